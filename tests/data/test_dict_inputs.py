"""Dict inputs without per-row Python work: :func:`~harness.data.ids.encode_strings` against numpy's own
sorted factorisation, ``Run.from_dict`` / ``Qrels.from_dict`` against the row-by-row path (the reference
kept in ``from_arrays``) and pyarrow's dictionary encoding (the path before), and metrics against
pytrec_eval per query."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import harness.data.run as run_module
from harness.data import Qrels, Run
from harness.data.ids import IdColumn, encode_strings, lookup_codes
from harness.metrics import evaluate


def _encoded(ids: list[str], group: int = 7) -> IdColumn | None:
    groups = [ids[i:i + group] for i in range(0, len(ids), group)]
    return encode_strings(groups, len(ids))


def _check_against_numpy(ids: list[str]) -> None:
    column = _encoded(ids)
    assert column is not None and column.sorted and column.codes is not None
    reference = np.asarray(ids, dtype=str)
    vocab, codes = np.unique(reference, return_inverse=True)
    assert column.vocab.dtype == vocab.dtype
    assert column.vocab.tolist() == vocab.tolist()
    assert column.codes.tolist() == codes.reshape(-1).tolist()
    assert column.values().tolist() == ids


_RNG = np.random.default_rng(3)
_HEX = np.array(list("0123456789abcdef"))


def _random_ids(alphabet: np.ndarray, length: int, count: int, distinct: int) -> list[str]:
    pool = ["".join(row) for row in _RNG.choice(alphabet, (distinct, length)).tolist()]
    return [pool[i] for i in _RNG.integers(0, distinct, count).tolist()]


@pytest.mark.parametrize("ids", [
    [f"doc{n}" for n in _RNG.integers(0, 1_000_000, 3_000).tolist()],            # varying lengths: ranges
    ["", "a", "ab", "abc", "b", "", "ba", "a", "abd", "abc"],                       # prefixes, empty ids
    ["only"], ["x", "x", "x"],                                                      # one distinct id
    ["d1", "d10", "d100", "D1", "d2", "é1", "e1", "ž", "z", "日本", "日", "😀", "a😀", "é1"],   # UTF-8
    _random_ids(np.array(list("azAZ09~")), 12, 2_000, 500),    # byte ranges too wide: ranks of the bytes
    _random_ids(_HEX, 14, 2_000, 900),                         # the row number does not fit beside the key
], ids=["numbers", "prefixes", "single", "repeated", "utf8", "ranked", "unique-path"])
def test_encode_strings_equals_numpy_sorted_factorisation(ids):
    _check_against_numpy(ids)


def test_encode_strings_declines_what_it_cannot_pack():
    assert _encoded(_random_ids(_HEX, 20, 500, 400)) is None         # 80 bits of key
    assert _encoded(["a\0b", "a"]) is None                          # a NUL inside an id
    assert _encoded(["\ud800x", "y"]) is None                       # a lone surrogate
    with pytest.raises(TypeError):
        _encoded(["a", 1])                                          # type: ignore[list-item]
    empty = encode_strings([], 0)
    assert empty is not None and len(empty) == 0
    single = encode_strings([[""]], 1)
    assert single is not None and single.values().tolist() == [""]


def _nested(rng: np.random.Generator, queries: int, depth: int, decimals: int | None, shuffle: bool):
    pool = ["", "d1", "d10", "D1", "é1", "日本", "x y"] + [f"doc{i}" for i in range(2_000)]
    run: dict[str, dict[str, float]] = {}
    for q in range(queries):
        docs = rng.choice(len(pool), depth, replace=False)
        raw = rng.random(depth) * 3
        scores = np.round(raw, decimals) if decimals is not None else raw
        order = rng.permutation(depth) if shuffle else np.argsort(-scores, kind="stable")
        run[f"q{q % 7}-{q}"] = {pool[docs[i]]: float(scores[i]) for i in order.tolist()}
    run["empty"] = {}
    return run


def _rows(nested: dict) -> tuple[list[str], list[str], list[float]]:
    q, d, s = zip(*[(qid, did, value) for qid, docs in nested.items() for did, value in docs.items()])
    return list(q), list(d), list(s)


def _same_run(a: Run, b: Run) -> None:
    assert a.query_ids.tolist() == b.query_ids.tolist()
    assert a.doc_ids.tolist() == b.doc_ids.tolist()
    assert a.scores.tolist() == b.scores.tolist()
    assert a.ranks().tolist() == b.ranks().tolist()


@pytest.mark.parametrize("decimals", [1, 2, None])
@pytest.mark.parametrize("shuffle", [False, True])
def test_run_from_dict_equals_the_row_by_row_and_pyarrow_paths(monkeypatch, decimals, shuffle):
    nested = _nested(np.random.default_rng(decimals or 0), 60, 50, decimals, shuffle)
    fast = Run.from_dict(nested)
    assert fast.docs.sorted                                     # encoded by encode_strings
    _same_run(fast, Run.from_arrays(*_rows(nested)))            # the reference: strings sorted row by row
    monkeypatch.setattr(run_module, "encode_strings", lambda groups, count: None)
    before = Run.from_dict(nested)                              # pyarrow's dictionary encoding, as before
    assert not before.docs.sorted
    _same_run(fast, before)


def test_qrels_from_dict_equals_from_arrays_with_odd_ids():
    nested: dict[Any, Any] = {"q2": {"b": 1, "": 0, "é": 2, "日本": -1}, "q1": {"x": 3}, "q3": {}, "q10": {"a": 1}}
    fast = Qrels.from_dict(nested)
    slow = Qrels.from_arrays(*zip(*[(q, d, r) for q, docs in nested.items() for d, r in docs.items()]))
    for column in ("query_ids", "doc_ids", "relevance"):
        assert getattr(fast, column).tolist() == getattr(slow, column).tolist()
        assert getattr(fast, column).dtype == getattr(slow, column).dtype


def test_lookup_codes_binary_search_equals_the_hash_lookup():
    ids = [f"doc{n}" for n in range(0, 3_000, 3)] + ["é", "日本", ""]
    sorted_column = IdColumn.encode(ids)
    unsorted = IdColumn(sorted_column.vocab[::-1].copy(), None, sorted=False)
    wanted = np.asarray(["doc3", "doc4", "", "日本", "zzz", "doc2997", "doc3", "é"])
    found = lookup_codes(sorted_column, wanted)
    assert [sorted_column.vocab[c] if c >= 0 else None for c in found.tolist()] == \
        ["doc3", None, "", "日本", None, "doc2997", "doc3", "é"]
    hashed = lookup_codes(IdColumn(unsorted.vocab, np.arange(len(unsorted.vocab)), sorted=False), wanted)
    assert [unsorted.vocab[c] if c >= 0 else None for c in hashed.tolist()] == \
        [sorted_column.vocab[c] if c >= 0 else None for c in found.tolist()]


@pytest.mark.parametrize("decimals", [2, None])
def test_metrics_from_dicts_equal_pytrec_eval_per_query(decimals):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(21)
    run_dict = _nested(rng, 200, 100, decimals, shuffle=False)
    del run_dict["empty"]
    qrels_dict = {q: {d: int(rng.integers(-1, 3)) for d in list(docs)[::7]} | {"unretrieved": 1}
                  for q, docs in run_dict.items()}
    ours = evaluate(Qrels.from_dict(qrels_dict), Run.from_dict(run_dict), ["ndcg@10", "map", "mrr", "p@10",
                                                                            "recall@100"])
    theirs = pytrec_eval.RelevanceEvaluator(qrels_dict, {"ndcg_cut.10", "map", "recip_rank", "P.10",
                                                         "recall.100"}).evaluate(run_dict)
    names = {"ndcg@10": "ndcg_cut_10", "map": "map", "mrr": "recip_rank", "p@10": "P_10", "recall@100": "recall_100"}
    for ours_name, their_name in names.items():
        per_query = dict(zip(ours.query_ids, ours.per_query[ours_name].tolist()))
        assert set(per_query) == set(theirs)
        for qid, values in theirs.items():
            assert per_query[qid] == pytest.approx(values[their_name], abs=1e-12), (ours_name, qid)


@pytest.fixture(scope="module")
def trec_files(tmp_path_factory):
    """A tied TREC run (shuffled lines, odd ids) and its qrels, with their rows."""
    rng = np.random.default_rng(8)
    nested = _nested(rng, 40, 30, 1, shuffle=True)
    del nested["empty"]
    folder = tmp_path_factory.mktemp("entries")
    rows = [(q, d, s) for q, docs in nested.items() for d, s in docs.items() if d and " " not in d]
    rows = [rows[i] for i in rng.permutation(len(rows)).tolist()]
    run_path, qrels_path = folder / "run.trec", folder / "qrels.trec"
    run_path.write_text("".join(f"{q} Q0 {d} 1 {s!r} mine\n" for q, d, s in rows), encoding="utf-8")
    judged = [(q, d, int(rng.integers(-1, 3))) for q, d, _ in rows[::4]]
    qrels_path.write_text("".join(f"{q} 0 {d} {r}\n" for q, d, r in judged), encoding="utf-8")
    return run_path, qrels_path, rows, judged


def _same_qrels(a: Qrels, b: Qrels) -> None:
    for column in ("query_ids", "doc_ids", "relevance"):
        assert getattr(a, column).tolist() == getattr(b, column).tolist()


def test_every_entry_equals_the_file_readers(trec_files):
    from harness.data import read_qrels, read_run

    pd = pytest.importorskip("pandas")
    run_path, qrels_path, rows, judged = trec_files
    from_file, qrels_file = read_run(run_path), read_qrels(qrels_path)
    run_dict: dict[str, dict[str, float]] = {}
    for q, d, s in rows:
        run_dict.setdefault(q, {})[d] = s
    qrels_dict: dict[str, dict[str, int]] = {}
    for q, d, r in judged:
        qrels_dict.setdefault(q, {})[d] = r
    run_frame = pd.DataFrame(rows, columns=["q_id", "doc_id", "score"])
    qrels_frame = pd.DataFrame(judged, columns=["q_id", "doc_id", "score"])
    for run in (Run.from_dict(run_dict), Run.from_df(run_frame),
                Run.from_df(run_frame.astype({"q_id": object, "doc_id": object}))):
        _same_run(run, from_file)
    for qrels in (Qrels.from_dict(qrels_dict), Qrels.from_df(qrels_frame)):
        _same_qrels(qrels, qrels_file)
    numbered = pd.DataFrame({"qid": [1, 1, 2], "docno": [7, 8, 7], "rel": [1, 0, 2]})     # ids converted by str()
    _same_qrels(Qrels.from_df(numbered, "qid", "docno", "rel"), Qrels.from_arrays(["1", "1", "2"], ["7", "8", "7"],
                                                                                   [1, 0, 2]))
    with pytest.raises(Exception, match="appears twice"):
        Run.from_df(pd.concat([run_frame, run_frame.iloc[:1]]))
    with pytest.raises(Exception, match="no column 'label'"):
        Qrels.from_df(qrels_frame, score_col="label")


@pytest.mark.slow          # ranx compiles its numba functions on first use (minutes on a loaded machine)
def test_ranx_objects_equal_the_file_readers(trec_files):
    from harness.data import read_qrels, read_run

    ranx = pytest.importorskip("ranx")
    run_path, qrels_path, _, _ = trec_files
    run = Run.from_ranx(ranx.Run.from_file(str(run_path), kind="trec"))
    _same_run(run, read_run(run_path))
    assert run.name == "mine"
    _same_qrels(Qrels.from_ranx(ranx.Qrels.from_file(str(qrels_path), kind="trec")), read_qrels(qrels_path))
