"""The pyarrow fast path reads runs and qrels exactly as the line-by-line reference readers do,
and hands every file it cannot vouch for to them (which read it or name the bad line)."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from harness.data.qrels import read_qrels, read_qrels_lines
from harness.data.run import read_run, read_run_lines
from harness.data.trec_fast import read_qrels_columns, read_run_columns
from harness.errors import InputError

# Ties (q1: d2/d3/d5 at 0.5 as "+.5", "5e-1", "0.50"), queries out of string order (q10 before q2),
# a query split in two blocks (q1), ascending scores (q2), non-ASCII ids, long and signed numbers.
TRICKY_RUN = """\
q10 Q0 a 1 3 tag
q10 Q0 b 2 -0 tag
q1 Q0 d2 1 +.5 tag
q1 Q0 d3 2 5e-1 tag
q2 Q0 é 1 0.1 tag
q2 Q0 文書 2 0.30000000000000004441 tag
q2 Q0 z 3 1E3 tag
q1 Q0 d5 3 0.50 tag
q1 Q0 d1 4 1. tag
q1 Q0 d9 5 -1.5e-3 tag
q1 Q0 d0 6 2.2250738585072011e-308 tag
q3 Q0 x 1 4.9e-324 last

"""


def _same_run(a, b) -> None:
    np.testing.assert_array_equal(a.query_ids, b.query_ids)
    np.testing.assert_array_equal(a.doc_ids, b.doc_ids)
    assert a.scores.dtype == b.scores.dtype == np.float64
    np.testing.assert_array_equal(a.scores.view(np.int64), b.scores.view(np.int64))   # bit for bit (-0.0 too)
    assert (a.name, a.source) == (b.name, b.source)


def _write(path, text: str):
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_bytes(text.encode())
    return path


@pytest.mark.parametrize("name", ["run.trec", "run.trec.gz"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_fast_run_equals_line_reader(tmp_path, name, newline):
    path = _write(tmp_path / name, TRICKY_RUN.replace("\n", newline))
    assert read_run_columns(path) is not None          # the fast path took it
    fast = read_run(path)
    _same_run(fast, read_run_lines(path))
    assert fast.query_ids.tolist()[:6] == ["q1"] * 6
    assert fast.doc_ids.tolist()[:6] == ["d1", "d5", "d3", "d2", "d0", "d9"]    # ties: doc id descending
    assert fast.scores[5] == -0.0015 and fast.name == "last"


def test_tab_separated_run_and_space_separated_run_agree(tmp_path):
    spaces = _write(tmp_path / "a.trec", TRICKY_RUN)
    tabs = _write(tmp_path / "b.trec", TRICKY_RUN.replace(" ", "\t"))
    assert read_run_columns(tabs) is not None
    a, b = read_run(spaces), read_run(tabs)
    np.testing.assert_array_equal(a.doc_ids, b.doc_ids)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_random_decimal_scores_equal_strtod(tmp_path):
    rng = np.random.default_rng(7)
    tokens = []
    for i in range(3000):
        digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 25))))
        cut = int(rng.integers(0, len(digits) + 1))
        token = f"{rng.choice(['', '+', '-'])}{digits[:cut]}.{digits[cut:]}".rstrip(".") or "0"
        if i % 3 == 0:
            token += f"{rng.choice(['e', 'E'])}{rng.choice(['', '+', '-'])}{rng.integers(0, 280)}"   # stays finite
        tokens.append(token)
    text = "".join(f"q Q0 d{i} {i + 1} {t} r\n" for i, t in enumerate(tokens))
    path = _write(tmp_path / "run.trec", text)
    fast = read_run(path)
    _same_run(fast, read_run_lines(path))
    by_doc = dict(zip(fast.doc_ids.tolist(), fast.scores.tolist()))
    assert all(by_doc[f"d{i}"] == float(t) for i, t in enumerate(tokens))


@pytest.mark.parametrize("line, reads", [
    ("q1 Q0 d1 1 0x1p-1 t", 0.5),             # hexadecimal: strtod reads it, pyarrow does not
    ("q1  Q0 d1 1 0.5 t", 0.5),               # two spaces
    ("q1 Q0\td1 1 0.5 t", 0.5),               # tab and spaces mixed
    (" q1 Q0 d1 1 0.5 t", 0.5),               # leading blank
    ("q1 Q0 d1 +1 INFINITY t", None),         # non-finite
    ("q1 Q0 d1 1 nan t", None),
    ("q1 Q0 d1 1 1e999 t", None),
    ("q1 Q0 d1 1 0.5x t", None),
    ("q1 Q0 d1 x 0.5 t", None),
    ("q1 Q0 d1\x01 1 0.5 t", 0.5),            # a control character stays in the id (as before)
    ("q1 Q0 d1\u3000 1 0.5 t", None),         # Unicode-only whitespace
    ("q1 Q0 d1 1 0.5 t\rq2 Q0 d2 1 0.5 t", None),   # a lone \r
])
def test_odd_lines_go_to_the_line_reader(tmp_path, line, reads):
    path = _write(tmp_path / "run.trec", "q0 Q0 d0 1 1.0 t\n" + line + "\n")
    if reads is None:
        with pytest.raises(InputError) as fast_error:
            read_run(path)
        with pytest.raises(InputError) as line_error:
            read_run_lines(path)
        assert str(fast_error.value) == str(line_error.value)
        assert fast_error.value.line == 2
    else:
        _same_run(read_run(path), read_run_lines(path))
        assert read_run(path).scores[1] == reads


def test_errors_keep_their_line(tmp_path):
    dup = _write(tmp_path / "dup.trec", "q1 Q0 a 1 1 t\nq1 Q0 b 2 0.5 t\nq1 Q0 a 3 0.2 t\n")
    assert read_run_columns(dup) is not None           # parsed fine; the duplicate is found afterwards
    with pytest.raises(InputError, match="appears twice.*first on line 1") as error:
        read_run(dup)
    assert error.value.line == 3
    bom = _write(tmp_path / "bom.trec", "\ufeffq1 Q0 a 1 1 t\n")
    assert read_run_columns(bom) is None
    with pytest.raises(InputError, match="byte-order mark"):
        read_run(bom)
    bad_utf8 = tmp_path / "bad.trec"
    bad_utf8.write_bytes(b"q1 Q0 a 1 1 t\nq1 Q0 \xff 2 0.5 t\n")
    with pytest.raises(InputError, match="not valid UTF-8") as error:
        read_run(bad_utf8)
    assert error.value.line == 2


QRELS = "q2 0 b 1\nq1 0 a 2\nq1 0 é -1\nq10 Q0 c 0\n"


@pytest.mark.parametrize("name", ["qrels.txt", "qrels.txt.gz"])
def test_fast_qrels_equal_line_reader(tmp_path, name):
    trec = _write(tmp_path / name, QRELS)
    beir = _write(tmp_path / ("beir." + name), "query-id\tcorpus-id\tscore\n"
                  + "".join(f"{q}\t{d}\t{r}\n" for q, _, d, r in (x.split() for x in QRELS.splitlines())))
    for path in (trec, beir):
        assert read_qrels_columns(path) is not None
        fast, slow = read_qrels(path), read_qrels_lines(path)
        np.testing.assert_array_equal(fast.query_ids, slow.query_ids)
        np.testing.assert_array_equal(fast.doc_ids, slow.doc_ids)
        np.testing.assert_array_equal(fast.relevance, slow.relevance)
        assert fast.relevance.tolist() == [2, -1, 0, 1]


def test_qrels_fallbacks_and_errors(tmp_path):
    labels = _write(tmp_path / "labels.txt", "q1 0 a 2.0\nq1 0 b +1\n")    # atol reads 2.0 as 2 and +1 as 1
    assert read_qrels_columns(labels) is None                                # pyarrow refuses both
    assert read_qrels(labels).relevance.tolist() == [2, 1]
    dup = _write(tmp_path / "dup.txt", "q1 0 a 1\nq1 0 b 1\nq1 0 a 0\n")
    with pytest.raises(InputError, match="first on line 1") as error:
        read_qrels(dup)
    assert error.value.line == 3


_NO_PANDAS = """
import contextlib, io, json, sys
from harness.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(["evaluate", "--qrels", sys.argv[1], "--run", sys.argv[2], "--per-query"])
print(json.dumps({"rc": rc, "pandas": "pandas" in sys.modules, "pyarrow": "pyarrow" in sys.modules,
                  "ndcg": json.loads(out.getvalue())["aggregate"]["ndcg@10"]}))
"""


def test_evaluate_from_files_imports_no_pandas(tmp_path):
    """pyarrow imports pandas (half a second of CPU) when it converts a Python value or an array to
    numpy through its own API; the readers avoid both, so ``harness evaluate`` never loads pandas."""
    import json
    import subprocess
    import sys

    run = _write(tmp_path / "run.trec", TRICKY_RUN.replace(" é ", " e ").replace(" 文書 ", " w "))
    qrels = _write(tmp_path / "qrels.txt", "q1 0 d3 1\nq1 0 d9 2\nq2 0 z 1\nq3 0 y 1\n")
    out = subprocess.run([sys.executable, "-c", _NO_PANDAS, str(qrels), str(run)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0 and report["pyarrow"]                 # the fast readers ran
    assert not report["pandas"]
    assert report["ndcg"] > 0
