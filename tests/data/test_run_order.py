"""trec_eval's run order (query, score descending, doc id descending) on integer doc ranks, and the
fast dict / DataFrame entries: every path gives the rows a plain Python sort gives, and the metrics
pytrec_eval gives."""
from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest

from harness.data import Qrels, Run, read_run
from harness.data.run import _string_order, _trec_order, read_run_lines
from harness.errors import InputError
from harness.metrics import evaluate

# Ids that are prefixes of one another, differ only in case, or are not ASCII (code point order).
_NAMES = ["d1", "d10", "d100", "D1", "d2", "d9", "doc", "doc-1", "é1", "e1", "ž", "z", "日本", "日", "a b"[:1], "x_1"]


def _rows(rng: np.random.Generator, n_queries: int = 30, depth: int = 40, decimals: int | None = 1):
    """Random (query, doc, score) rows, shuffled; scores rounded (ties) unless ``decimals`` is None."""
    pool = _NAMES + [f"p{i}" for i in range(300)]
    rows = []
    for q in range(n_queries):
        docs = rng.choice(len(pool), depth, replace=False)
        raw = rng.random(depth) * 3
        scores = np.round(raw, decimals) if decimals is not None else raw
        rows += [(f"q{q}", pool[d], float(s)) for d, s in zip(docs.tolist(), scores.tolist())]
    order = rng.permutation(len(rows))
    return [rows[i] for i in order.tolist()]


def _reference(rows) -> list[tuple[str, str, float]]:
    """trec_eval's order by Python sorts: doc id descending (str order is code point order), then
    stably by query and score descending."""
    by_doc = sorted(rows, key=lambda r: r[1], reverse=True)
    return sorted(by_doc, key=lambda r: (r[0], -r[2]))


def _listed(run: Run) -> list[tuple[str, str, float]]:
    return list(zip(run.query_ids.tolist(), run.doc_ids.tolist(), run.scores.tolist()))


@pytest.mark.parametrize("decimals", [0, 1, 2, None])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_entry_orders_like_a_python_sort(tmp_path, decimals, seed):
    rows = _rows(np.random.default_rng(seed), decimals=decimals)
    expected = _reference(rows)
    q, d, s = (list(c) for c in zip(*rows))
    nested: dict[str, dict[str, float]] = {}
    for qid, did, score in rows:
        nested.setdefault(qid, {})[did] = score
    path = tmp_path / "run.trec"
    path.write_text("".join(f"{a} Q0 {b} 1 {c!r} t\n" for a, b, c in sorted(rows)), encoding="utf-8")
    pd = pytest.importorskip("pandas")
    runs = {"from_arrays": Run.from_arrays(q, d, s), "from_dict": Run.from_dict(nested),
            "from_df": Run.from_df(pd.DataFrame({"q_id": q, "doc_id": d, "score": s})),
            "read_run": read_run(path), "read_run_lines": read_run_lines(path)}
    for name, run in runs.items():
        assert _listed(run) == expected, name
        assert run.ranks().tolist() == Run.from_arrays(q, d, s).ranks().tolist(), name


def test_ties_broken_by_doc_id_descending():
    run = Run.from_arrays(["q", "q", "q", "q", "q"], ["d1", "d10", "d9", "d2", "e"], [1.0, 1.0, 2.0, 1.0, 0.5])
    assert run.doc_ids.tolist() == ["d9", "d2", "d10", "d1", "e"]


def test_sorted_and_unsorted_vocabularies_give_one_order():
    rng = np.random.default_rng(5)
    vocab = np.asarray(sorted({f"d{i}" for i in rng.integers(0, 10_000, 500).tolist()}))
    codes = rng.integers(0, len(vocab), 2_000)
    qcodes = np.repeat(np.arange(20), 100)
    scores = np.round(rng.random(2_000), 1)
    keep = np.unique(qcodes * len(vocab) + codes, return_index=True)[1]        # unique (query, doc)
    qcodes, codes, scores = qcodes[keep], codes[keep], scores[keep]
    queries = np.asarray([f"q{i:02d}" for i in range(20)])
    on_sorted = Run.from_codes(queries, qcodes, vocab, codes, scores)
    shuffle = rng.permutation(len(vocab))                   # the same ids, vocabulary out of order
    inverse = np.argsort(shuffle)
    on_unsorted = Run.from_codes(queries, qcodes, vocab[shuffle], inverse[codes], scores)
    expected = _reference(list(zip(queries[qcodes].tolist(), vocab[codes].tolist(), scores.tolist())))
    assert _listed(on_sorted) == expected
    assert _listed(on_unsorted) == expected


def test_order_is_none_when_rows_already_in_trec_order():
    qcode = np.array([0, 0, 0, 1, 1])
    scores = np.array([3.0, 2.0, 2.0, 1.0, 0.0])
    assert _trec_order(qcode, scores, lambda rows: np.array([5, 4])[: len(rows)]) is None
    order = _trec_order(qcode, scores, lambda rows: np.array([4, 5])[: len(rows)])
    assert order is not None and order.tolist() == [0, 2, 1, 3, 4]


def test_from_dict_equals_the_row_by_row_path_with_odd_inputs():
    nested: dict[Any, Any] = {"q2": {"b": 1, "a": 1, "c": 2.5}, "q1": {}, "q10": {"a": np.float32(0.25), "z": True}}
    run = Run.from_dict(nested, name="mine")
    assert run.name == "mine"
    assert _listed(run) == [("q10", "z", 1.0), ("q10", "a", 0.25), ("q2", "c", 2.5), ("q2", "b", 1.0),
                            ("q2", "a", 1.0)]
    assert run.query_ids.tolist().count("q1") == 0 and list(run.bounds()[0]) == ["q10", "q2"]
    odd: dict[Any, Any] = {1: {2: 0.5, "x": "0.75"}}
    mixed = Run.from_dict(odd)                 # non-str ids, str score: converted
    assert _listed(mixed) == [("1", "x", 0.75), ("1", "2", 0.5)]
    assert len(Run.from_dict({})) == 0 and len(Run.from_dict({"q": {}})) == 0
    with pytest.raises(InputError, match="not finite"):
        Run.from_dict({"q": {"d": float("nan")}})
    with pytest.raises(ValueError):
        Run.from_dict(cast(Any, {"q": {"d": "high"}}))


def test_qrels_from_dict_equals_from_arrays():
    nested: dict[Any, Any] = {"q2": {"b": 1, "a": 0, "c": 2}, "q1": {"x": -1}, "q3": {}, "q10": {"a": True, "b": 2.0}}
    rows = [(q, d, int(r)) for q, docs in nested.items() for d, r in docs.items()]
    fast = Qrels.from_dict(nested)
    q, d, r = zip(*rows)
    slow = Qrels.from_arrays(q, d, r)
    for column in ("query_ids", "doc_ids", "relevance"):
        assert getattr(fast, column).tolist() == getattr(slow, column).tolist()
        assert getattr(fast, column).dtype == getattr(slow, column).dtype
    assert Qrels.from_dict(cast(Any, {1: {2: "3"}})).relevance.tolist() == [3]


def test_from_df_names_a_missing_column():
    pd = pytest.importorskip("pandas")
    with pytest.raises(InputError, match="no column 'score'"):
        Run.from_df(pd.DataFrame({"q_id": ["q"], "doc_id": ["d"], "value": [1.0]}))


@pytest.mark.parametrize("decimals", [1, 2, None])
def test_metrics_on_tied_runs_equal_pytrec_eval(decimals):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(11)
    rows = _rows(rng, n_queries=40, depth=60, decimals=decimals)
    run_dict: dict[str, dict[str, float]] = {}
    for qid, did, score in rows:
        run_dict.setdefault(qid, {})[did] = score
    qrels_dict = {q: {d: int(rng.integers(0, 3)) for d in list(docs)[:: 3]} for q, docs in run_dict.items()}
    ours = evaluate(Qrels.from_dict(qrels_dict), Run.from_dict(run_dict), ["ndcg@10", "map", "mrr", "p@5", "recall@20"])
    theirs = pytrec_eval.RelevanceEvaluator(qrels_dict, {"ndcg_cut.10", "map", "recip_rank", "P.5", "recall.20"}
                                            ).evaluate(run_dict)
    names = {"ndcg@10": "ndcg_cut_10", "map": "map", "mrr": "recip_rank", "p@5": "P_5", "recall@20": "recall_20"}
    for ours_name, their_name in names.items():
        per_query = dict(zip(ours.query_ids, ours.per_query[ours_name].tolist()))
        assert set(per_query) == set(theirs)
        for qid, values in theirs.items():
            assert per_query[qid] == pytest.approx(values[their_name], abs=1e-12), (ours_name, qid)


@pytest.mark.parametrize("ids", [
    ["d1", "d10", "d100", "D1", "d2", "", "doc-1", "é1", "e1", "ÿ"],                       # Latin-1, one word
    [f"document-{i}-x" for i in range(300, 0, -7)] + ["document-", "document-1"],          # two words
    ["z" * 33, "z" * 32, "y" * 33],                                                       # past four words
    ["日本", "日", "ž", "z", "a"],                                                         # beyond Latin-1
])
def test_string_order_equals_numpy_argsort(ids):
    arr = np.asarray(ids)
    assert _string_order(arr).tolist() == np.argsort(arr, kind="stable").tolist()
    assert arr[_string_order(arr)].tolist() == sorted(ids)
