"""The hashed (query, document) join: exact whatever the hash does."""
from __future__ import annotations

import numpy as np
import pytest
from metrics_testdata import random_case

from harness.data import Qrels, Run
from harness.metrics import evaluate, join, parse_metrics
from harness.metrics.join import NEGATIVE_LABEL, NOT_JUDGED, hash_ids, judged_labels

METRICS = parse_metrics(["ndcg@10", "ndcg", "recall@5", "p@5", "mrr", "map", "success@1", "r-prec"])


def test_labels_use_trec_eval_codes():
    qrels = Qrels.from_arrays(["a", "a", "a", "b"], ["x", "y", "z", "x"], [2, 0, -1, 1])
    # rows: query index among qrels queries (a=0, b=1) and document
    labels = judged_labels(qrels, np.array([0, 0, 0, 0, 1, 1]), np.array(["x", "y", "z", "w", "x", "y"]))
    assert labels.tolist() == [2, 0, NEGATIVE_LABEL, NOT_JUDGED, 1, NOT_JUDGED]


def test_hash_ignores_array_width_and_byte_order():
    narrow = np.array(["d1", "é", "doc-7"])
    wide = np.array(["d1", "é", "doc-7", "a" * 40])[:3]
    swapped = narrow.astype(narrow.dtype.newbyteorder(">"))
    assert wide.dtype != narrow.dtype
    assert hash_ids(narrow).tolist() == hash_ids(wide).tolist() == hash_ids(swapped).tolist()
    assert len(set(hash_ids(np.array(["ab", "ba", "a", "b", "d1", "d10"])).tolist())) == 6


def _results(seed):
    (qq, qd, qr), (rq, rd, rs) = random_case(seed)
    result = evaluate(Qrels.from_arrays(qq, qd, qr), Run.from_arrays(rq, rd, rs), METRICS, complete=True)
    return np.stack([result.per_query[str(m)] for m in METRICS])


@pytest.mark.parametrize("weak_hash", [
    # Equal lengths collide: many false candidates (removed by confirmation)
    # and judged documents of one query that collide (exact fallback).
    lambda ids: np.char.str_len(np.asarray(ids, dtype=str)).astype(np.uint64),
    # Everything collides.
    lambda ids: np.zeros(len(ids), dtype=np.uint64),
])
def test_results_do_not_depend_on_hash_quality(monkeypatch, weak_hash):
    expected = [_results(seed) for seed in range(4)]
    monkeypatch.setattr(join, "hash_ids", weak_hash)
    for seed in range(4):
        assert np.array_equal(_results(seed), expected[seed])


def test_false_candidates_are_rejected_without_fallback(monkeypatch):
    # One judged document per query, so keys stay unique under a length hash and
    # the fast path runs; same-length unjudged documents must not be matched.
    monkeypatch.setattr(join, "hash_ids", lambda ids: np.char.str_len(np.asarray(ids, dtype=str)).astype(np.uint64))
    monkeypatch.setattr(join, "_exact_labels", lambda *args: pytest.fail("fallback used"))
    qrels = Qrels.from_arrays(["q1", "q2"], ["aa", "bbb"], [1, 1])
    labels = judged_labels(qrels, np.array([0, 0, 1, 1, 0]), np.array(["ab", "aa", "bbb", "bbc", "bbb"]))
    assert labels.tolist() == [NOT_JUDGED, 1, 1, NOT_JUDGED, NOT_JUDGED]


def test_empty_inputs():
    qrels = Qrels.from_arrays(["q"], ["d"], [1])
    empty_run = Run.from_arrays([], [], [])
    result = evaluate(qrels, empty_run, ["mrr"], complete=True)
    assert result.query_ids == ["q"] and result.aggregate == {"mrr": 0.0}
    assert judged_labels(qrels, np.zeros(0, np.int64), np.array([], dtype=str)).tolist() == []
