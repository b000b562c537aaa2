"""Dictionary-encoded runs: the streaming reader, integer-code ordering and checks, and the
code-based metrics join give exactly what the string-based reference paths give."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from harness.data import Qrels, Run, read_run
from harness.data.ids import IdColumn, lookup_codes
from harness.data.run import read_run_lines
from harness.data.trec_fast import read_run_columns
from harness.errors import InputError
from harness.metrics import align, evaluate, parse_metrics
from harness.metrics.judged import judged_rows


def _random_run_text(rng: np.random.Generator, n_queries: int = 40, depth: int = 30) -> str:
    """Queries out of string order, one split in two blocks, 1-decimal scores (many ties), self hits."""
    lines = []
    for q in rng.permutation(n_queries).tolist():
        docs = rng.choice(200, depth, replace=False)
        scores = np.sort(np.round(rng.random(depth) * 3, 1))[::-1]
        names = [f"q{q}" if (r == 2 and q % 2 == 0) else f"d{d}" for r, d in enumerate(docs.tolist(), 1)]
        lines += [f"q{q} Q0 {d} {r} {s} tag" for r, (d, s) in enumerate(zip(names, scores.tolist()), 1)]
    lines.append(lines.pop(0))                                  # the first query's top row comes last
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("block_size", [256, 1 << 20])
@pytest.mark.parametrize("suffix", [".trec", ".trec.gz"])
def test_streamed_blocks_equal_line_reader(tmp_path, block_size, suffix):
    text = _random_run_text(np.random.default_rng(3))
    path = tmp_path / f"run{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    columns = read_run_columns(path, block_size=block_size)
    assert columns is not None
    assert columns.queries.sorted and list(columns.queries.vocab) == sorted(columns.queries.vocab)
    fast = Run.from_columns(columns.queries, columns.docs, columns.scores)
    slow = read_run_lines(path)
    np.testing.assert_array_equal(fast.query_ids, slow.query_ids)
    np.testing.assert_array_equal(fast.doc_ids, slow.doc_ids)
    np.testing.assert_array_equal(fast.scores, slow.scores)
    assert fast.docs.codes is not None and fast.docs.codes.dtype == np.int32     # 4 bytes a row


def test_crlf_split_across_reads_and_lone_cr(tmp_path):
    # \r\n lines whose \r and \n fall into different reads still count as line ends ...
    text = "".join(f"q{i % 3} Q0 d{i} 1 {i}.5 t\r\n" for i in range(2000))
    path = tmp_path / "crlf.trec"
    path.write_bytes(text.encode())
    assert read_run_columns(path, block_size=97) is not None
    # ... a lone \r does not (trec_eval keeps it inside the line): the line reader names it.
    path.write_bytes(("q1 Q0 a 1 1 t\n" * 5000 + "q2 Q0 b 1 1 t\rq3 Q0 c 1 1 t\n").encode())
    assert read_run_columns(path) is None
    with pytest.raises(InputError) as error:
        read_run(path)
    assert error.value.line == 5001


def test_duplicate_in_a_later_block_names_its_line(tmp_path):
    lines = [f"q1 Q0 d{i} {i} {1000 - i} t" for i in range(3000)] + ["q1 Q0 d5 3001 -1 t"]
    path = tmp_path / "dup.trec"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="appears twice.*first on line 6") as error:
        read_run(path)
    assert error.value.line == 3001


def test_from_columns_equals_from_arrays():
    rng = np.random.default_rng(11)
    q = rng.choice(["b", "a", "c", "a10"], 400)
    d = np.array([f"d{i}" for i in range(400)])
    s = np.round(rng.random(400), 1)
    ref = Run.from_arrays(q, d, s)
    enc = Run.from_columns(IdColumn.encode(q), IdColumn(np.array([f"d{i}" for i in range(400)])[::-1].copy(),
                                                        np.arange(399, -1, -1, dtype=np.int32), sorted=False), s)
    np.testing.assert_array_equal(ref.query_ids, enc.query_ids)
    np.testing.assert_array_equal(ref.doc_ids, enc.doc_ids)
    np.testing.assert_array_equal(ref.scores, enc.scores)
    np.testing.assert_array_equal(ref.ranks(), enc.ranks())
    with pytest.raises(InputError, match="'d3' appears twice for query 'x'"):
        Run.from_columns(IdColumn.encode(["x", "x"]), IdColumn.encode(["d3", "d3"]), [1.0, 2.0])


def test_self_hits_on_codes_equal_string_comparison():
    q = np.array(["a", "a", "b", "b", "c"])
    d = np.array(["a", "x", "y", "b", "a"])
    enc = Run.from_columns(IdColumn.encode(q), IdColumn.encode(d), np.arange(5.0))
    plain = Run(q, d, np.arange(5.0))
    assert enc.self_hits().tolist() == (enc.query_ids == enc.doc_ids).tolist()
    assert plain.self_hits().tolist() == [True, False, False, True, False]
    assert enc.without_self_hits().doc_ids.tolist() == ["x", "y", "a"]


def test_lookup_codes_exact():
    col = IdColumn(np.array(["b", "a", "ab"]), np.array([0, 1, 2], dtype=np.int32), sorted=False)
    assert lookup_codes(col, np.array(["a", "zz", "ab", "b"])).tolist() == [1, -1, 2, 0]


def _random_qrels(rng: np.random.Generator, n_queries: int = 45) -> Qrels:
    qs, ds, rs = [], [], []
    for q in range(n_queries):                                  # q40..q44 are judged but never retrieved
        for d in rng.choice(200, 25, replace=False).tolist():
            qs.append(f"q{q}")
            ds.append(f"d{d}")
            rs.append(int(rng.integers(-1, 4)))                 # negative, 0 and graded labels
    return Qrels.from_arrays(qs, ds, rs)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("threshold", [0, 1, 2])
@pytest.mark.parametrize("complete", [False, True])
def test_judged_rows_give_the_values_of_the_full_join(tmp_path, seed, threshold, complete):
    rng = np.random.default_rng(seed)
    path = tmp_path / "run.trec"
    path.write_text(_random_run_text(rng))
    qrels, run = _random_qrels(rng), read_run(path)
    metrics = parse_metrics(["ndcg@10", "ndcg", "recall@20", "p@5", "mrr", "mrr@3", "map", "map@10",
                             "success@5", "r-prec"])
    full = align(qrels, run, relevance_threshold=threshold, complete=complete)
    compact = judged_rows(qrels, run, relevance_threshold=threshold, complete=complete, block_rows=64)
    assert len(compact.label) < len(full.label) and np.all(compact.label >= 0)
    np.testing.assert_array_equal(full.query_ids, compact.query_ids)
    for metric in metrics:
        np.testing.assert_array_equal(metric.compute(full), metric.compute(compact), err_msg=str(metric))
    # The same through evaluate() on an array-built (plain-column) run.
    plain = Run(run.query_ids.copy(), run.doc_ids.copy(), run.scores.copy())
    a = evaluate(qrels, run, metrics, relevance_threshold=threshold, complete=complete, exclude_self=True)
    b = evaluate(qrels, plain, metrics, relevance_threshold=threshold, complete=complete, exclude_self=True)
    assert a.aggregate == b.aggregate
    assert a.options["num_self_hits_removed"] == b.options["num_self_hits_removed"] == 20


def _arrow_chunks(ids: list[str], cuts: list[int]):
    """``ids`` as pyarrow string arrays cut at ``cuts``, each a slice of a bigger array (so its offsets do
    not start at 0 and its data holds other ids' bytes on both sides), and their ``(data, offsets)``."""
    pa = pytest.importorskip("pyarrow")
    from harness.data.trec_fast import _utf8_buffers

    padded = pa.array(["zz-before", *ids, "after-zz"], type=pa.string())
    bounds = [0, *cuts, len(ids)]
    chunks = [padded.slice(1 + a, b - a) for a, b in zip(bounds[:-1], bounds[1:])]
    buffers = _utf8_buffers(chunks)
    assert buffers is not None
    return buffers


@pytest.mark.parametrize("ids, cuts", [
    ([f"doc{n}" for n in np.random.default_rng(5).integers(0, 100_000, 3_000).tolist()], [1, 700, 701, 2999]),
    (["d1", "d10", "d100", "D1", "d2", "é1", "e1", "ž", "z", "日本", "日", "😀", "a😀", "é1"], [5]),   # UTF-8
    (["x", "x", "x"], []),
    ([f"{chr(33 + i % 90)}{'~' * (i % 13)}{i % 7}" for i in range(900)], [450]),   # wide bytes: ranks of the bytes
])
def test_encode_utf8_chunks_equals_encode_strings(ids, cuts):
    from harness.data.ids import encode_strings, encode_utf8_chunks

    column = encode_utf8_chunks(_arrow_chunks(ids, cuts))
    reference = encode_strings([ids], len(ids))
    assert column is not None and reference is not None and column.sorted
    assert column.vocab.dtype == reference.vocab.dtype
    assert column.vocab.tolist() == reference.vocab.tolist() == sorted(set(ids))
    assert column.codes is not None and reference.codes is not None
    assert column.codes.tolist() == reference.codes.tolist()
    assert column.values().tolist() == ids


def test_encode_utf8_chunks_declines_what_it_cannot_pack():
    from harness.data.ids import encode_utf8_chunks

    assert encode_utf8_chunks(_arrow_chunks(["a", "", "b"], [])) is None          # an empty id
    assert encode_utf8_chunks(_arrow_chunks(["a\0b", "a"], [1])) is None          # a NUL inside an id
    rng = np.random.default_rng(2)
    varied = ["".join(row) for row in rng.choice(list("0123456789abcdef"), (400, 20)).tolist()]
    assert encode_utf8_chunks(_arrow_chunks(varied, [100])) is None               # 80 bits of key
    empty = encode_utf8_chunks([])
    assert empty is not None and len(empty) == 0


def test_run_reader_encodes_ascii_doc_ids_sorted_and_others_through_pyarrow(tmp_path):
    text = _random_run_text(np.random.default_rng(4))
    ascii_path, other_path = tmp_path / "a.trec", tmp_path / "b.trec"
    ascii_path.write_text(text)
    other_path.write_text(text.replace(" d1 ", " dé "), encoding="utf-8")
    for path, sorted_vocab in ((ascii_path, True), (other_path, False)):
        columns = read_run_columns(path, block_size=512)
        assert columns is not None and columns.docs.sorted is sorted_vocab
        fast, slow = read_run(path), read_run_lines(path)
        np.testing.assert_array_equal(fast.query_ids, slow.query_ids)
        np.testing.assert_array_equal(fast.doc_ids, slow.doc_ids)
        np.testing.assert_array_equal(fast.scores, slow.scores)
