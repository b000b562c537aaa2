"""Every class of bad input, through the real command line: exit status 2, one line on stderr
naming the file, the line (where there is one) and the problem, no traceback, and nothing
written.  Plus the parsing conventions that decide numbers (trec_eval's atof/atol, negative
labels, ids) and the CLI's own behaviour (--debug, unexpected errors, broken pipes, option
checks)."""
from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import build_parser, main
from harness.cli.eval import warn_ignored_options

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- fixtures: files
def jsonl(rows) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows).encode()


GOOD_CORPUS = [{"_id": "d1", "title": "T", "text": "alpha"}, {"_id": "d2", "text": "beta"}]
GOOD_QUERIES = [{"_id": "q1", "text": "alpha?"}, {"_id": "q2", "text": "beta?"}]
GOOD_QRELS = b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n"
TREC_QRELS = b"q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 2\n"
TREC_RUN = b"q1 Q0 d1 1 0.9 sys\nq1 Q0 d2 2 0.4 sys\nq2 Q0 d2 1 0.8 sys\n"


def dataset(root: Path, corpus: bytes | None = None, queries: bytes | None = None,
            qrels: bytes | None = None) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_bytes(jsonl(GOOD_CORPUS) if corpus is None else corpus)
    (root / "queries.jsonl").write_bytes(jsonl(GOOD_QUERIES) if queries is None else queries)
    (root / "qrels" / "test.tsv").write_bytes(GOOD_QRELS if qrels is None else qrels)
    return root


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


@dataclass
class Case:
    """One bad input: ``setup(tmp)`` writes files and returns the argv and the bad file."""

    setup: Callable[[Path], tuple[list[str], Path]]
    line: int | None
    problem: str


def _evaluate(qrels: bytes = TREC_QRELS, run: bytes = TREC_RUN, qrels_name: str = "qrels.trec",
              run_name: str = "run.trec", bad: str = "run") -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        (tmp / qrels_name).write_bytes(qrels)
        (tmp / run_name).write_bytes(run)
        argv = ["evaluate", "--qrels", str(tmp / qrels_name), "--run", str(tmp / run_name), "-m", "ndcg@10"]
        return argv, tmp / (run_name if bad == "run" else qrels_name)
    return setup


def _eval(bad: str, **files: bytes) -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        root = dataset(tmp / "ds", **files)
        argv = ["eval", "--model", "bm25", "--dataset-dir", str(root), "--out", str(tmp / "out")]
        return argv, root / bad
    return setup


def _dir_as_run(tmp: Path) -> tuple[list[str], Path]:
    (tmp / "qrels.trec").write_bytes(TREC_QRELS)
    (tmp / "run.trec").mkdir()
    return ["evaluate", "--qrels", str(tmp / "qrels.trec"), "--run", str(tmp / "run.trec")], tmp / "run.trec"


def _dir_as_corpus(tmp: Path) -> tuple[list[str], Path]:
    root = dataset(tmp / "ds")
    (root / "corpus.jsonl").unlink()
    (root / "corpus.jsonl").mkdir()
    return ["eval", "--model", "bm25", "--dataset-dir", str(root), "--out", str(tmp / "out")], root / "corpus.jsonl"


def _missing_qrels(tmp: Path) -> tuple[list[str], Path]:
    (tmp / "run.trec").write_bytes(TREC_RUN)
    return ["evaluate", "--qrels", str(tmp / "nope.trec"), "--run", str(tmp / "run.trec")], tmp / "nope.trec"


def _truncated(data: bytes) -> bytes:
    whole = gz(data * 50)
    return whole[: len(whole) // 2]


BAD_UTF8_CORPUS = jsonl(GOOD_CORPUS[:1]) + b'{"_id": "d2", "text": "caf\xe9"}\n'
# byte offset of the bad byte: the first line's length + the position of \xe9 in the second
BAD_UTF8_OFFSET = len(jsonl(GOOD_CORPUS[:1])) + len(b'{"_id": "d2", "text": "caf')

CASES = {
    "non-utf8-corpus": Case(_eval("corpus.jsonl", corpus=BAD_UTF8_CORPUS), 2,
                            f"not valid UTF-8: byte 0xe9 at byte offset {BAD_UTF8_OFFSET}"),
    "non-utf8-qrels": Case(_evaluate(qrels=b"q1 0 d1 1\nq1 0 d\xff2 0\n", bad="qrels"), 2,
                           "not valid UTF-8: byte 0xff at byte offset 16"),    # 0-based: 10 + len("q1 0 d")
    "non-utf8-run": Case(_evaluate(run=TREC_RUN + b"q2 Q0 \xc3( 2 0.1 sys\n"), 4, "not valid UTF-8: byte 0xc3"),
    "non-utf8-run-gz": Case(_evaluate(run=gz(b"q1 Q0 d1 1 0.9 s\nq1 Q0 \x80 2 0.1 s\n"), run_name="run.trec.gz"), 2,
                            "not valid UTF-8: byte 0x80 at byte offset 23"),   # in the decompressed bytes: 17 + 6
    "truncated-gz": Case(_evaluate(run=_truncated(TREC_RUN), run_name="run.trec.gz"), None,
                         "compressed data ends early (truncated .gz file)"),
    "not-gzip-gz": Case(_evaluate(run=TREC_RUN, run_name="run.trec.gz"), None,
                        "not a gzip file, although its name ends in .gz"),
    "corrupt-gz": Case(_evaluate(run=gz(TREC_RUN)[:12] + b"\x00" * 40, run_name="run.trec.gz"), None,
                       "corrupt gzip data"),
    "score-overflow": Case(_evaluate(run=b"q1 Q0 d1 1 1e400 sys\n"), 1, "score '1e400' is not finite (overflows"),
    "relevance-30-digits": Case(_evaluate(qrels=b"q1 0 d1 " + b"9" * 30 + b"\n", bad="qrels"), 1,
                                f"relevance '{'9' * 30}' is out of range"),
    "relevance-1e30": Case(_evaluate(qrels=b"q1 0 d1 1\nq1 0 d2 1e30\n", bad="qrels"), 2,
                           "relevance '1e30' is not an integer (trec_eval's atol would silently read only 1 "
                           "from its prefix '1')"),
    "relevance-fraction": Case(_evaluate(qrels=b"q1 0 d1 1.5\n", bad="qrels"), 1, "relevance '1.5' is not an integer"),
    "directory-as-run": Case(_dir_as_run, None, "run file is a directory, expected a file"),
    "directory-as-corpus": Case(_dir_as_corpus, None, "is a directory, expected a file"),
    "missing-qrels": Case(_missing_qrels, None, "qrels file does not exist"),
    "malformed-json": Case(_eval("corpus.jsonl", corpus=jsonl([GOOD_CORPUS[0], '{"_id": "d2", "text": '])), 2,
                           "malformed JSON"),
    "missing-field": Case(_eval("queries.jsonl", queries=jsonl([GOOD_QUERIES[0], {"_id": "q2"}])), 2,
                          "missing field 'text'"),
    "duplicate-doc-id": Case(_eval("corpus.jsonl", corpus=jsonl(GOOD_CORPUS + [{"_id": "d1", "text": "again"}])), 3,
                             "duplicate document id 'd1' (first on line 1)"),
    "duplicate-run-row": Case(_evaluate(run=TREC_RUN + b"q1 Q0 d1 9 0.1 sys\n"), 4,
                              "document 'd1' appears twice for query 'q1' (first on line 1)"),
    "empty-text": Case(_eval("queries.jsonl", queries=jsonl([GOOD_QUERIES[0], {"_id": "q2", "text": "  "}])), 2,
                       "query 'q2' has empty text"),
    "nan-score": Case(_evaluate(run=b"q1 Q0 d1 1 0.5 s\nq1 Q0 d2 2 NaN s\n"), 2, "score 'NaN' is not finite"),
    "run-wrong-columns": Case(_evaluate(run=b"q1 Q0 d1 1 0.5 s\nq1 Q0 d2 2 0.4\n"), 2,
                              "expected 6 columns (qid Q0 docid rank score tag), got 5"),
    "qrels-wrong-columns": Case(_evaluate(qrels=b"q1 0 d1 1\nq1 d2 1\n", bad="qrels"), 2,
                                "expected 4 columns (qid iter docid rel), got 3"),
    "run-id-unicode-space": Case(_evaluate(run=TREC_RUN + "q2 Q0 d\u30002 9 0.1 sys\n".encode()), 4,
                                 "contains the whitespace character U+3000 at column 8"),
    "beir-qrels-id-space": Case(_eval("qrels/test.tsv", qrels=b"query-id\tcorpus-id\tscore\nq1\td 1\t1\n"), 2,
                                "document id 'd 1' contains whitespace"),
    "corpus-id-space": Case(_eval("corpus.jsonl", corpus=jsonl([GOOD_CORPUS[0], {"_id": "d 2", "text": "b"}])), 2,
                            "document id 'd 2' contains whitespace or a control character (U+0020)"),
    "corpus-id-tab": Case(_eval("corpus.jsonl", corpus=jsonl([{"_id": "d1\t", "text": "b"}])), 1,
                          "(U+0009)"),
    "id-boolean": Case(_eval("corpus.jsonl", corpus=jsonl([GOOD_CORPUS[0], {"_id": True, "text": "b"}])), 2,
                       "field '_id' must be a string or an integer, got boolean true"),
    "id-float": Case(_eval("queries.jsonl", queries=jsonl([{"_id": 1.0, "text": "b"}])), 1,
                     "field '_id' must be a string or an integer, got number 1.0"),
    "id-null": Case(_eval("queries.jsonl", queries=jsonl([{"_id": None, "text": "b"}])), 1,
                    "field '_id' must be a string or an integer, got null"),
    "id-list": Case(_eval("corpus.jsonl", corpus=jsonl([{"_id": ["d1"], "text": "b"}])), 1,
                    "field '_id' must be a string or an integer, got a list"),
    "id-object": Case(_eval("corpus.jsonl", corpus=jsonl([{"_id": {"x": 1}, "text": "b"}])), 1,
                      "field '_id' must be a string or an integer, got an object"),
    "lone-surrogate": Case(_eval("corpus.jsonl", corpus=jsonl(['{"_id": "d1", "text": "a\\ud800b"}'])), 1,
                           "lone UTF-16 surrogate"),
    "byte-order-mark": Case(_evaluate(run=b"\xef\xbb\xbf" + TREC_RUN), 1, "starts with a byte-order mark (U+FEFF)"),
    "bom-corpus": Case(_eval("corpus.jsonl", corpus=b"\xef\xbb\xbf" + jsonl(GOOD_CORPUS)), 1, "byte-order mark"),
    "score-1_000": Case(_evaluate(run=b"q1 Q0 d1 1 1_000 sys\n"), 1,
                        "score '1_000' is not a number (trec_eval's atof would silently read only 1.0 from its "
                        "prefix '1')"),
    "score-word": Case(_evaluate(run=b"q1 Q0 d1 1 high sys\n"), 1,
                       "score 'high' is not a number (trec_eval's atof would silently read it as 0)"),
}


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_clear_line(tmp_path, capsys, name):
    case = CASES[name]
    argv, bad_file = case.setup(tmp_path)
    before = _tree(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    where = f"{bad_file}:{case.line}" if case.line is not None else f"{bad_file}"
    assert code == 2, err
    assert out == ""
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"harness {argv[0]}: error: {where}: "), err
    assert case.problem in err
    assert _tree(tmp_path) == before            # no output, no half-written temporary left behind


@pytest.mark.parametrize("name", ["non-utf8-corpus", "truncated-gz", "id-boolean"])
def test_bad_input_in_a_real_process(tmp_path, name):
    """The installed entry point: same line, no traceback, exit 2 (a subprocess, not main())."""
    case = CASES[name]
    argv, bad_file = case.setup(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "harness", *argv], check=False, capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "HARNESS_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert case.problem in proc.stderr and str(bad_file) in proc.stderr
    assert proc.stdout == ""


# --------------------------------------------------------------------------- conventions that change numbers
def _scores(capsys, tmp_path: Path, qrels: bytes, run: bytes, *metrics: str) -> dict[str, float]:
    (tmp_path / "q.trec").write_bytes(qrels)
    (tmp_path / "r.trec").write_bytes(run)
    argv = ["evaluate", "--qrels", str(tmp_path / "q.trec"), "--run", str(tmp_path / "r.trec")]
    for m in metrics:
        argv += ["-m", m]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_negative_labels_are_judged_non_relevant(tmp_path, capsys):
    """trec_eval: a label below the relevance level (default 1) is non-relevant, and nDCG gains
    only positive labels; so -1 scores exactly like 0 (and not like 'unjudged')."""
    run = b"q1 Q0 d2 1 0.9 s\nq1 Q0 d1 2 0.5 s\nq1 Q0 d3 3 0.1 s\n"
    metrics = ("ndcg@10", "map", "p@2", "recall@10", "mrr")
    negative = _scores(capsys, tmp_path, b"q1 0 d1 1\nq1 0 d2 -1\nq1 0 d3 2\n", run, *metrics)
    zero = _scores(capsys, tmp_path, b"q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 2\n", run, *metrics)
    assert negative == zero
    # d2 (label -1) first gains nothing: DCG = 1/log2(3) + 2/log2(4); IDCG = 2 + 1/log2(3)
    assert negative["ndcg@10"] == pytest.approx((1 / 1.5849625007211562 + 1.0) / (2 + 1 / 1.5849625007211562))
    assert negative["p@2"] == pytest.approx(0.5) and negative["mrr"] == pytest.approx(0.5)


def test_score_tokens_read_as_trec_eval_reads_them(tmp_path, capsys):
    """Every accepted token has exactly strtod's value: exponents, leading '+', '.5', hex floats;
    'x.0' labels are atol's x."""
    run = b"q1 Q0 a 1 +.5 s\nq1 Q0 b 2 5e-1 s\nq1 Q0 c 3 0x1p-1 s\nq1 Q0 d 4 0.25 s\n"
    qrels = b"q1 0 a 0\nq1 0 c 1.0\nq1 0 d 1\n"
    # a, b, c tie at 0.5: trec_eval breaks ties by doc id descending -> c, b, a, d
    got = _scores(capsys, tmp_path, qrels, run, "mrr", "p@1")
    assert got == {"mrr": 1.0, "p@1": 1.0}


def test_integer_json_ids_are_kept_exactly(tmp_path, capsys):
    """Integer ids (MKQA's example_id is one in the release) become str(int), digit for digit."""
    big = 12345678901234567890123
    root = dataset(tmp_path / "ds", corpus=jsonl([{"_id": big, "text": "alpha"}, {"_id": 7, "text": "beta"}]),
                   queries=jsonl([{"_id": 1, "text": "alpha"}]),
                   qrels=f"query-id\tcorpus-id\tscore\n1\t{big}\t1\n".encode())
    from harness.data import load_beir

    ds = load_beir(root)
    assert ds.corpus.ids == [str(big), "7"] and ds.queries.ids == ["1"]


# --------------------------------------------------------------------------- the CLI itself
def test_debug_shows_the_traceback(tmp_path, capsys):
    argv, bad = CASES["nan-score"].setup(tmp_path)
    assert main(["--debug", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith(f"{bad}:2: score 'NaN' is not finite (NaN or infinite)")


def test_unexpected_exception_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    import harness.cli.evaluate as evaluate_cli

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(evaluate_cli, "evaluate", broken)
    argv, _ = _evaluate()(tmp_path)
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err == ("harness evaluate: error: unexpected ZeroDivisionError: float division by zero "
                   "(run with --debug for the traceback)\n")
    assert main(["--debug", *argv]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_broken_pipe_exits_quietly_with_141(tmp_path):
    """`harness evaluate ... | head -1`: the command stops at the closed pipe, prints nothing on
    stderr, and exits 141 (what pipefail reports)."""
    rows = "".join(f"q{i} Q0 d{i} 1 1.0 s\n" for i in range(20000))
    (tmp_path / "q.trec").write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(20000)))
    (tmp_path / "r.trec").write_text(rows)
    script = (f"set -o pipefail; {sys.executable} -m harness evaluate --qrels q.trec --run r.trec --per-query "
              "--format table | head -1")
    proc = subprocess.run(["bash", "-c", script], check=False, capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, env={**os.environ, "HARNESS_NUM_THREADS": "1"})
    assert proc.stdout.split() == ["query", "ndcg@10", "recall@100", "mrr@10", "map", "p@10", "success@10"]
    assert proc.stderr == ""
    assert proc.returncode == 141


@pytest.mark.parametrize("argv, message", [
    (["--threads", "0", "evaluate", "--qrels", "q", "--run", "r"], "argument --threads: must be a positive integer"),
    (["--threads", "-2", "evaluate", "--qrels", "q", "--run", "r"], "argument --threads: must be a positive integer"),
    (["--threads", "two", "evaluate", "--qrels", "q", "--run", "r"], "expected a positive integer, got 'two'"),
    (["eval", "--model", "bm25", "--dataset-dir", "d", "--top-k", "0"], "argument --top-k: must be a positive integer"),
    (["eval", "--model", "bm25", "--dataset-dir", "d", "--batch-size", "-1"], "argument --batch-size"),
    (["compare", "--run", "a", "--run", "b", "--alpha", "1.5"], "argument --alpha: must lie strictly between 0 and 1"),
    (["compare", "--run", "a", "--run", "b", "--resamples", "0"], "argument --resamples"),
])
def test_invalid_option_values_are_refused(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_thread_environment_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_NUM_THREADS", "0")
    argv, _ = _evaluate()(tmp_path)
    assert main(argv) == 2
    assert "HARNESS_NUM_THREADS: must be a positive integer (1 or more), got 0" in capsys.readouterr().err


def test_eval_warns_about_options_the_model_ignores(caplog):
    parser = build_parser()
    bm25 = parser.parse_args(["eval", "--model", "bm25", "--dataset-dir", "d", "--pooling", "cls", "--normalize",
                              "--max-length", "64", "--index", "HNSW32", "--k1", "1.2"])
    with caplog.at_level(logging.WARNING, logger="harness"):
        assert warn_ignored_options(bm25, lexical=True) == ["pooling", "normalize", "max_length", "index"]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "--pooling does not apply to BM25 (--model bm25) and is ignored" and len(lines) == 4
    caplog.clear()
    dense = parser.parse_args(["eval", "--model", "minilm", "--dataset-dir", "d", "--b", "0.4", "--pooling", "mean"])
    with caplog.at_level(logging.WARNING, logger="harness"):
        assert warn_ignored_options(dense, lexical=False) == ["b"]
    assert [r.getMessage() for r in caplog.records] == [
        "--b does not apply to a dense model (--model minilm) and is ignored"]
    plain = parser.parse_args(["eval", "--model", "bm25", "--dataset-dir", "d"])
    assert (plain.k1, plain.b, plain.index) == (None, None, None)   # defaults filled only for BM25
    assert warn_ignored_options(plain, lexical=True) == []


# --------------------------------------------------------------------------- stored results (harness compare --result)
PER_QUERY_HEADER = b"query_id\tndcg@10\trecall@100\n"
PER_QUERY_GOOD_ROW = b"q1\t0.5\t1.0\n"


def _stored_pair(tmp: Path) -> tuple[Path, Path]:
    """Two real, comparable result directories (written by the store) for the same toy dataset."""
    from harness.evaluation_result import EvaluationResult
    from harness.protocol import ProtocolCard
    from harness.store import write_result

    card = ProtocolCard(dataset="toy", metrics=("ndcg@10", "recall@100"))
    dirs = []
    for name, scores in (("a", [0.5, 0.25, 0.75]), ("b", [0.625, 0.125, 1.0])):
        evaluation = EvaluationResult(["q1", "q2", "q3"], {"ndcg@10": scores, "recall@100": [1.0, 0.5, 1.0]})
        dirs.append(write_result(tmp / name, run=None, evaluation=evaluation, card=card, manifest={"model": name}))
    return dirs[0], dirs[1]


def _compare_result(file: str, data: bytes) -> Callable[[Path], tuple[list[str], Path]]:
    """``harness compare --result A --result B`` with ``file`` of B replaced by ``data``."""
    def setup(tmp: Path) -> tuple[list[str], Path]:
        a, b = _stored_pair(tmp)
        (b / file).write_bytes(data)
        return ["compare", "--result", str(a), "--result", str(b)], b / file
    return setup


# unique query ids, so that only the truncation can stop the reader
PER_QUERY_LONG = PER_QUERY_HEADER + b"".join(b"q%d\t0.5\t1.0\n" % i for i in range(400))
PER_QUERY_TRUNCATED = gz(PER_QUERY_LONG)[: len(gz(PER_QUERY_LONG)) // 2]
# 0-based offset of \xff in the decompressed bytes: header, first row, then "q"
PER_QUERY_BAD_UTF8_OFFSET = len(PER_QUERY_HEADER) + len(PER_QUERY_GOOD_ROW) + 1

CASES_STORED = {
    "per-query-truncated-gz": Case(_compare_result("per_query.tsv.gz", PER_QUERY_TRUNCATED), None,
                                   "compressed data ends early (truncated .gz file)"),
    "per-query-not-gzip": Case(_compare_result("per_query.tsv.gz", PER_QUERY_HEADER + PER_QUERY_GOOD_ROW), None,
                               "not a gzip file, although its name ends in .gz"),
    "per-query-non-utf8": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + PER_QUERY_GOOD_ROW
                                                                      + b"q\xff2\t0.25\t0.5\n")), 3,
                               f"not valid UTF-8: byte 0xff at byte offset {PER_QUERY_BAD_UTF8_OFFSET}"),
    "per-query-non-numeric": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + PER_QUERY_GOOD_ROW
                                                                         + b"q2\thigh\t0.5\n")), 3,
                                  "ndcg@10 value 'high' is not a number"),
    "per-query-underscore": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + b"q1\t0.5\t1_0\n")), 2,
                                 "recall@100 value '1_0' is not a number"),
    "per-query-nan": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + PER_QUERY_GOOD_ROW
                                                                 + b"q2\tnan\t0.5\n")), 3,
                          "ndcg@10 value 'nan' is not a number"),
    "per-query-overflow": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + b"q1\t1e400\t1.0\n")), 2,
                               "ndcg@10 value '1e400' is not finite"),
    "per-query-columns": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + PER_QUERY_GOOD_ROW
                                                                     + b"q2\t0.5\n")), 3,
                              "expected 3 tab-separated columns (query_id and 2 metric(s)), got 2"),
    "per-query-duplicate-id": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_HEADER + PER_QUERY_GOOD_ROW
                                                                          + PER_QUERY_GOOD_ROW)), 3,
                                   "query id 'q1' appears twice (first on line 2)"),
    "per-query-no-header": Case(_compare_result("per_query.tsv.gz", gz(PER_QUERY_GOOD_ROW)), 1,
                                "must start with a 'query_id' header"),
    "manifest-malformed-json": Case(_compare_result("manifest.json",
                                                    b'{\n  "card": {"dataset": "toy"},\n  "model" "b"\n}\n'),
                                    3, "malformed JSON (Expecting ':' delimiter"),
    "manifest-non-utf8": Case(_compare_result("manifest.json", b'{\n  "model": "caf\xe9"\n}\n'), 2,
                              "not valid UTF-8: byte 0xe9"),
    "manifest-not-an-object": Case(_compare_result("manifest.json", b"[1, 2]\n"), 1,
                                   "expected a JSON object, got list"),
    "manifest-bad-card": Case(_compare_result("manifest.json", b'{\n  "created": "x",\n  "card": "toy"\n}\n'), 3,
                              "invalid protocol card (expected a JSON object, got str)"),
    "metrics-non-numeric": Case(_compare_result("metrics.json", b'{\n  "ndcg@10": 0.5,\n  "recall@100": "high"\n}\n'),
                                3, "metric 'recall@100' must be a finite number, got 'high'"),
}


@pytest.mark.parametrize("name", list(CASES_STORED))
def test_bad_stored_result_is_one_clear_line(tmp_path, capsys, name):
    case = CASES_STORED[name]
    argv, bad_file = case.setup(tmp_path)
    before = _tree(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    where = f"{bad_file}:{case.line}" if case.line is not None else f"{bad_file}"
    assert code == 2, err
    assert out == ""
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"harness compare: error: {where}: "), err
    assert case.problem in err, err
    assert _tree(tmp_path) == before


def test_intact_stored_results_compare(tmp_path, capsys):
    """The same pair, untouched, compares (the bad cases above fail on their file, not the setup)."""
    a, b = _stored_pair(tmp_path)
    assert main(["compare", "--result", str(a), "--result", str(b), "--format", "json"]) == 0
    ndcg = next(c for c in json.loads(capsys.readouterr().out)["comparisons"] if c["metric"] == "ndcg@10")
    # per-query values read back exactly: means of (0.5, 0.25, 0.75) and (0.625, 0.125, 1.0); b wins on q1 and q3
    assert (ndcg["mean_base"], ndcg["mean"], ndcg["n"]) == (0.5, (0.625 + 0.125 + 1.0) / 3, 3)
    assert (ndcg["wins"], ndcg["ties"], ndcg["losses"]) == (2, 0, 1)
