"""Data formats: correct parsing, trec_eval ordering, and a clear error (file, line, problem)
for every kind of bad input; commands that write outputs leave nothing behind on failure."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.data import (
    Qrels,
    Run,
    load_beir,
    read_corpus,
    read_qrels,
    read_queries,
    read_run,
    read_training_rows,
    write_qrels,
    write_run,
)
from harness.errors import InputError
from harness.io.readers import UNICODE_ONLY_WHITESPACE, check_id, parse_trec_relevance, parse_trec_score


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows)


def beir_folder(root: Path, corpus=None, queries=None, qrels=None) -> Path:
    corpus = corpus if corpus is not None else [{"_id": "d1", "title": "T", "text": "alpha"},
                                                {"_id": "d2", "title": "", "text": "beta"}]
    queries = queries if queries is not None else [{"_id": "q1", "text": "alpha?"}, {"_id": "q2", "text": "beta?"}]
    qrels = qrels if qrels is not None else "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n"
    write(root / "corpus.jsonl", jsonl(corpus))
    write(root / "queries.jsonl", jsonl(queries))
    write(root / "qrels" / "test.tsv", qrels)
    return root


def expect_error(fn, path: Path, line: int | None, fragment: str) -> InputError:
    with pytest.raises(InputError) as info:
        fn()
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert fragment in err.problem
    where = f"{path}:{line}" if line is not None else str(path)
    assert str(err).startswith(where + ": ")
    return err


# --------------------------------------------------------------------------- good input
def test_beir_folder_loads_and_restricts_queries_to_judged(tmp_path):
    root = beir_folder(tmp_path / "ds", queries=[{"_id": "q1", "text": "a"}, {"_id": "q2", "text": "b"},
                                                  {"_id": "q3", "text": "unjudged"}])
    ds = load_beir(root)
    assert ds.corpus.ids == ["d1", "d2"] and ds.corpus.passages() == ["T alpha", "beta"]
    assert ds.queries.ids == ["q1", "q2"]
    assert ds.qrels.to_dict() == {"q1": {"d1": 1}, "q2": {"d2": 2}}


def test_gzip_files_are_read(tmp_path):
    root = tmp_path / "gz"
    root.mkdir()
    for name, rows in (("corpus.jsonl", [{"_id": "d1", "text": "x"}]), ("queries.jsonl", [{"_id": "q", "text": "y"}])):
        with gzip.open(root / f"{name}.gz", "wt", encoding="utf-8") as handle:
            handle.write(jsonl(rows))
    write(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq\td1\t1\n")
    ds = load_beir(root)
    assert len(ds.corpus) == 1 and len(ds.queries) == 1


def test_trec_and_beir_qrels_agree(tmp_path):
    trec = read_qrels(write(tmp_path / "q.trec", "1 0 a 1\n1 0 b 0\n2 0 c 2\n"))
    beir = read_qrels(write(tmp_path / "q.tsv", "query-id\tcorpus-id\tscore\n1\ta\t1\n1\tb\t0\n2\tc\t2\n"))
    assert trec.to_dict() == beir.to_dict() == {"1": {"a": 1, "b": 0}, "2": {"c": 2}}
    write_qrels(trec, tmp_path / "out.trec")
    assert read_qrels(tmp_path / "out.trec").to_dict() == trec.to_dict()


def _reference_order(rows):
    rows = sorted(rows, key=lambda r: r[1], reverse=True)   # doc id descending
    rows = sorted(rows, key=lambda r: -r[2])                 # then score descending (stable)
    return sorted(rows, key=lambda r: r[0])                  # query ascending (stable)


@pytest.mark.parametrize("seed", range(12))
def test_run_order_is_trec_eval_order(seed):
    """Score descending, ties by doc id descending (strcmp order), whatever the input order."""
    rng = random.Random(seed)
    pairs, rows = set(), []
    for _ in range(rng.randint(1, 300)):
        q = rng.choice(["1", "10", "2", "qé", "Q"])
        d = rng.choice(["d", "D1", "d10", "d2", "中", "z"]) + str(rng.randint(0, 40))
        if (q, d) not in pairs:
            pairs.add((q, d))
            rows.append((q, d, round(rng.random(), 1) if seed % 2 else rng.random()))
    if seed % 3:
        rng.shuffle(rows)
    run = Run.from_arrays(*zip(*rows))
    got = list(zip(run.query_ids.tolist(), run.doc_ids.tolist(), run.scores.tolist()))
    assert got == _reference_order(rows)


def test_run_round_trip_ignores_rank_column(tmp_path):
    path = write(tmp_path / "run.trec", "q1 Q0 a 1 0.5 t\nq1 Q0 b 2 0.5 t\nq1 Q0 c 3 0.9 t\n")
    run = read_run(path)
    assert run.doc_ids.tolist() == ["c", "b", "a"]          # 0.9 first; the 0.5 tie by doc id descending
    assert run.top_k(2).doc_ids.tolist() == ["c", "b"]
    write_run(run, tmp_path / "out.trec.gz")
    again = read_run(tmp_path / "out.trec.gz")
    assert again.doc_ids.tolist() == run.doc_ids.tolist() and np.array_equal(again.scores, run.scores)


# --------------------------------------------------------------------------- bad input
def test_malformed_json_line(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jsonl([{"_id": "d1", "text": "x"}, '{"_id": "d2", "text": ']))
    expect_error(lambda: read_corpus(path), path, 2, "malformed JSON")
    qpath = write(tmp_path / "queries.jsonl", "\n" + jsonl(["[1, 2]"]))
    expect_error(lambda: read_queries(qpath), qpath, 2, "expected a JSON object")
    tpath = write(tmp_path / "train.jsonl", jsonl([{"query": "a", "pos": ["b"]}, "{oops}"]))
    expect_error(lambda: read_training_rows(tpath), tpath, 2, "malformed JSON")


@pytest.mark.parametrize(("reader", "row", "fragment"), [
    (read_corpus, {"title": "t", "text": "x"}, "missing field '_id'"),
    (read_corpus, {"_id": "d9", "title": "t"}, "missing field 'text'"),
    (read_queries, {"text": "x"}, "missing field '_id'"),
    (read_queries, {"_id": "q9"}, "missing field 'text'"),
    (read_training_rows, {"pos": ["x"]}, "missing field 'query'"),
    (read_training_rows, {"query": "x"}, "missing field 'pos'"),
    (read_training_rows, {"query": "x", "pos": "y", "neg": [1]}, "neg[0] must be a string"),
])
def test_missing_or_mistyped_field(tmp_path, reader, row, fragment):
    good = {read_corpus: {"_id": "d0", "text": "ok"}, read_queries: {"_id": "q0", "text": "ok"},
            read_training_rows: {"query": "q", "pos": ["p"]}}[reader]
    path = write(tmp_path / "f.jsonl", jsonl([good, row]))
    expect_error(lambda: reader(path), path, 2, fragment)


def test_duplicate_ids(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jsonl([{"_id": "d1", "text": "a"}, {"_id": "d2", "text": "b"},
                                                   {"_id": "d1", "text": "c"}]))
    expect_error(lambda: read_corpus(path), path, 3, "duplicate document id 'd1' (first on line 1)")
    qpath = write(tmp_path / "queries.jsonl", jsonl([{"_id": "q", "text": "a"}, {"_id": "q", "text": "b"}]))
    expect_error(lambda: read_queries(qpath), qpath, 2, "duplicate query id 'q'")
    qrels = write(tmp_path / "qrels.trec", "1 0 a 1\n1 0 b 1\n1 0 a 0\n")
    expect_error(lambda: read_qrels(qrels), qrels, 3, "duplicate judgement for query '1' and document 'a'")
    run = write(tmp_path / "run.trec", "1 Q0 a 1 0.5 x\n1 Q0 a 2 0.4 x\n")
    expect_error(lambda: read_run(run), run, 2, "document 'a' appears twice for query '1'")
    with pytest.raises(InputError, match="appears twice"):
        Run.from_arrays(["1", "1"], ["a", "a"], [0.1, 0.2])


def test_qrels_naming_unknown_queries_or_documents(tmp_path):
    root = beir_folder(tmp_path / "a", qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tnope\t1\n")
    qrels = root / "qrels" / "test.tsv"
    expect_error(lambda: load_beir(root), qrels, 3, "unknown document id 'nope'")
    root = beir_folder(tmp_path / "b", qrels="query-id\tcorpus-id\tscore\nghost\td1\t1\n")
    expect_error(lambda: load_beir(root), root / "qrels" / "test.tsv", 2, "unknown query id 'ghost'")


def test_empty_text(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jsonl([{"_id": "d1", "title": " ", "text": "  "}]))
    expect_error(lambda: read_corpus(path), path, 1, "document 'd1' has empty title and text")
    assert read_corpus(path, allow_empty=True).ids == ["d1"]
    qpath = write(tmp_path / "queries.jsonl", jsonl([{"_id": "q1", "text": ""}]))
    expect_error(lambda: read_queries(qpath), qpath, 1, "query 'q1' has empty text")
    tpath = write(tmp_path / "train.jsonl", jsonl([{"query": "q", "pos": ["ok", " "]}]))
    expect_error(lambda: read_training_rows(tpath), tpath, 1, "pos[1] is empty")
    tpath = write(tmp_path / "train2.jsonl", jsonl([{"query": "q", "pos": []}]))
    expect_error(lambda: read_training_rows(tpath), tpath, 1, "empty list")


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-inf"])
def test_non_finite_scores(tmp_path, score):
    path = write(tmp_path / "run.trec", f"1 Q0 a 1 0.5 x\n1 Q0 b 2 {score} x\n")
    expect_error(lambda: read_run(path), path, 2, "is not finite")
    with pytest.raises(InputError, match="not finite"):
        Run.from_arrays(["1"], ["a"], [float(score)])


def test_wrong_column_counts_and_values(tmp_path):
    qrels = write(tmp_path / "q.trec", "1 0 a 1\n1 0 b\n")
    expect_error(lambda: read_qrels(qrels), qrels, 2, "expected 4 columns")
    beir = write(tmp_path / "q.tsv", "query-id\tcorpus-id\tscore\nq\td\t1\tx\n")
    expect_error(lambda: read_qrels(beir), beir, 2, "expected 3 tab-separated columns")
    rel = write(tmp_path / "r.trec", "1 0 a high\n")
    expect_error(lambda: read_qrels(rel), rel, 1, "relevance 'high' is not an integer")
    run = write(tmp_path / "run.trec", "1 Q0 a 1 0.5\n")
    expect_error(lambda: read_run(run), run, 1, "expected 6 columns")
    run = write(tmp_path / "run2.trec", "1 Q0 a one 0.5 x\n")
    expect_error(lambda: read_run(run), run, 1, "rank 'one' is not an integer")
    run = write(tmp_path / "run3.trec", "1 Q0 a 1 high x\n")
    expect_error(lambda: read_run(run), run, 1, "score 'high' is not a number")


def test_missing_and_empty_files(tmp_path):
    expect_error(lambda: read_run(tmp_path / "none.trec"), tmp_path / "none.trec", None, "does not exist")
    empty = write(tmp_path / "empty.trec", "\n")
    expect_error(lambda: read_run(empty), empty, None, "contains no results")
    expect_error(lambda: load_beir(tmp_path / "nodir"), tmp_path / "nodir", None, "does not exist")


def test_columnar_types_reject_inconsistent_arrays():
    with pytest.raises(ValueError):
        Qrels.from_arrays(["q"], ["d", "e"], [1])
    with pytest.raises(ValueError):
        Run.from_arrays(["q"], ["d"], [1.0, 2.0])


# --------------------------------------------------------------------------- CLI: exit 2, nothing half-written
def test_eval_cli_bad_dataset_exits_2_and_writes_nothing(tmp_path, capsys):
    root = beir_folder(tmp_path / "bad", corpus=[{"_id": "d1", "text": "a"}, '{"_id": broken'])
    out = tmp_path / "out"
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{root / 'corpus.jsonl'}:2: malformed JSON" in err
    assert not out.exists()
    assert not any(p.name.startswith(".out.") for p in tmp_path.iterdir())


def test_evaluate_cli_bad_run_exits_2(tmp_path, capsys):
    qrels = write(tmp_path / "q.trec", "1 0 a 1\n")
    run = write(tmp_path / "run.trec", "1 Q0 a 1 nan x\n")
    assert main(["evaluate", "--qrels", str(qrels), "--run", str(run), "-m", "ndcg@10"]) == 2
    captured = capsys.readouterr()
    assert f"{run}:1: score 'nan' is not finite" in captured.err and captured.out == ""


# ------------------------------------------------------------- trec_eval-exact parsing (harness/io/readers.py)


@pytest.mark.parametrize(("token", "value"), [
    ("1", 1.0), ("-2.5", -2.5), ("+.5", 0.5), ("5.", 5.0), ("1e-3", 0.001), ("1E+2", 100.0),
    ("0x1p-1", 0.5), ("-0X10", -16.0), ("1e-400", 0.0), ("0.1", 0.1),
])
def test_scores_accepted_with_strtods_value(token, value):
    assert parse_trec_score(token, "r", 1) == value


@pytest.mark.parametrize(("token", "read"), [
    ("1_000", "only 1.0 from its prefix '1'"), ("0.5x", "only 0.5 from its prefix '0.5'"),
    ("1e", "only 1.0 from its prefix '1'"), ("1,5", "only 1.0 from its prefix '1'"),
    ("high", "it as 0"), ("\u0661", "it as 0"), ("\uff11", "it as 0"),   # Arabic-Indic and full-width digits
])
def test_scores_atof_would_truncate_are_refused(token, read):
    with pytest.raises(InputError, match="is not a number") as info:
        parse_trec_score(token, "r", 3)
    assert info.value.line == 3 and info.value.problem.endswith(f"(trec_eval's atof would silently read {read})")


@pytest.mark.parametrize(("token", "why"), [("1e400", "overflows a 64-bit float"), ("-1e309", "overflows"),
                                            ("nan", "NaN or infinite"), ("-Infinity", "NaN or infinite"),
                                            ("0x1p99999", "overflows")])
def test_non_finite_scores_say_why(token, why):
    with pytest.raises(InputError, match="is not finite") as info:
        parse_trec_score(token, "r", 1)
    assert why in info.value.problem


@pytest.mark.parametrize(("token", "value"), [("0", 0), ("2", 2), ("-1", -1), ("+3", 3), ("2.0", 2), ("1.", 1),
                                              (str(2 ** 63 - 1), 2 ** 63 - 1), (str(-(2 ** 63)), -(2 ** 63))])
def test_labels_accepted_with_atols_value(token, value):
    assert parse_trec_relevance(token, "q", 1) == value


@pytest.mark.parametrize(("token", "fragment"), [
    ("1.5", "only 1 from its prefix '1'"), ("2e1", "only 2 from its prefix '2'"), ("1e30", "only 1"),
    ("rel", "read it as 0"), (str(2 ** 63), "out of range"), ("9" * 30, "out of range"),
    ("-" + "9" * 30, "out of range"),
])
def test_labels_atol_would_misread_are_refused(token, fragment):
    with pytest.raises(InputError) as info:
        parse_trec_relevance(token, "q", 4)
    assert fragment in info.value.problem and info.value.line == 4


def test_unicode_only_whitespace_is_what_python_splits_on_and_c_does_not():
    python_only = "".join(chr(c) for c in range(0x110000) if chr(c).isspace() and chr(c) not in " \t\n\r\x0b\x0c")
    assert python_only == UNICODE_ONLY_WHITESPACE


@pytest.mark.parametrize("bad", ["a b", "a\tb", "a\u3000b", "a\xa0", "\u2028x", "a\x00b", "x\x1b"])
def test_ids_with_whitespace_or_control_characters_are_refused(bad):
    with pytest.raises(InputError, match="contains whitespace or a control character"):
        check_id(bad, "f", 1, "document id")
    assert check_id("d#1_é-中", "f", 1, "document id") == "d#1_é-中"


def test_run_lines_split_on_newline_only(tmp_path):
    """A U+2028 or \\x85 inside a line must not start a new line (str.splitlines would) and shift
    every later line number: it is refused with the line it is on."""
    path = write(tmp_path / "run.trec", "q1 Q0 a 1 0.5 t\nq1 Q0 b 2 0.4 t\u2028x\nq1 Q0 c 3 0.3 t\n")
    expect_error(lambda: read_run(path), path, 2, "whitespace character U+2028 at column 16")


def test_crlf_files_read_like_lf(tmp_path):
    run = read_run(write(tmp_path / "run.trec", "q1 Q0 a 1 0.5 t\r\nq1 Q0 b 2 0.4 t\r\n"))
    qrels = read_qrels(write(tmp_path / "q.tsv", "query-id\tcorpus-id\tscore\r\nq1\ta\t1\r\n"))
    assert run.doc_ids.tolist() == ["a", "b"] and qrels.to_dict() == {"q1": {"a": 1}}


def test_a_corpus_id_with_a_space_is_refused_before_it_reaches_a_run(tmp_path):
    """Accepted before, the id 'd 2' was written to run.trec.gz as two fields and the stored run
    could not be read back; now the corpus line is refused."""
    path = write(tmp_path / "corpus.jsonl", jsonl([{"_id": "d1", "text": "a"}, {"_id": "d 2", "text": "b"}]))
    expect_error(lambda: read_corpus(path), path, 2, "document id 'd 2' contains whitespace")


def test_non_utf8_and_broken_gzip_name_line_and_offset(tmp_path):
    path = tmp_path / "queries.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": "\xc3\x28"}\n'))
    expect_error(lambda: read_queries(path), path, 2, "not valid UTF-8: byte 0xc3 at byte offset 50")  # 27 + 23
    trunc = tmp_path / "t.trec.gz"
    trunc.write_bytes(gzip.compress(b"1 0 a 1\n" * 1000)[:30])
    expect_error(lambda: read_qrels(trunc), trunc, None, "truncated .gz file")
    (tmp_path / "d.jsonl").mkdir()
    expect_error(lambda: read_training_rows(tmp_path / "d.jsonl"), tmp_path / "d.jsonl", None,
                 "training file is a directory, expected a file")
