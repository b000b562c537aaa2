"""Parity with pytrec_eval (trec_eval's own C code) on random, tie-heavy runs, per query to 1e-9."""
from __future__ import annotations

import numpy as np
import pytest
from metrics_testdata import pytrec_reference, random_case, to_dicts, trec_order
from optional_extras import require_extra

from harness.data import Qrels, Run
from harness.metrics import evaluate, parse_metrics

require_extra("pytrec_eval")

METRICS = parse_metrics([
    "ndcg@1", "ndcg@3", "ndcg@10", "ndcg@100", "ndcg",
    "recall@1", "recall@5", "recall@10", "recall@100",
    "p@1", "p@5", "p@10", "p@100",
    "mrr", "mrr@1", "mrr@3", "mrr@10",
    "map", "map@1", "map@5", "map@10", "map@100",
    "success@1", "success@5", "success@10",
    "r-prec",
])
SEEDS = range(8)


def _case(seed):
    (qq, qd, qr), (rq, rd, rs) = random_case(seed)
    qrels, run = Qrels.from_arrays(qq, qd, qr), Run.from_arrays(rq, rd, rs)
    return qrels, run, to_dicts(qq, qd, qr, int), to_dicts(rq, rd, rs, float)


def _assert_matches(result, qrels_dict, run_dict, threshold):
    for metric in METRICS:
        reference = pytrec_reference(qrels_dict, run_dict, metric, threshold)
        assert result.query_ids == sorted(reference), f"{metric}: evaluated queries differ"
        ours = result.per_query[str(metric)]
        theirs = np.array([reference[q] for q in result.query_ids])
        worst = int(np.argmax(np.abs(ours - theirs)))
        assert np.allclose(ours, theirs, rtol=0, atol=1e-9), (
            f"{metric} query {result.query_ids[worst]}: ours {ours[worst]!r} pytrec_eval {theirs[worst]!r}")
        assert abs(result.aggregate[str(metric)] - theirs.mean()) < 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_run_order_is_trec_eval_order(seed):
    _, run, _, run_dict = _case(seed)
    for qid, docs, _ in run.groups():
        assert docs.tolist() == trec_order(run_dict[qid])


@pytest.mark.parametrize("threshold", [1, 2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_every_metric_matches_pytrec_eval(seed, threshold):
    qrels, run, qrels_dict, run_dict = _case(seed)
    result = evaluate(qrels, run, METRICS, relevance_threshold=threshold)
    assert result.options["num_queries"] == len(set(qrels_dict) & set(run_dict))
    _assert_matches(result, qrels_dict, run_dict, threshold)


@pytest.mark.parametrize("seed", SEEDS)
def test_complete_matches_pytrec_eval_with_empty_rankings(seed):
    # trec_eval -c scores judged queries without results as 0; pytrec_eval does the
    # same for a query given an empty ranking.
    qrels, run, qrels_dict, run_dict = _case(seed)
    padded = {**{q: {} for q in qrels_dict}, **run_dict}
    result = evaluate(qrels, run, METRICS, complete=True)
    assert result.query_ids == sorted(qrels_dict)
    assert result.options["num_judged_queries_missing_from_run"] == len(set(qrels_dict) - set(run_dict))
    _assert_matches(result, qrels_dict, padded, 1)


@pytest.mark.parametrize("complete", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_exclude_self_matches_beir_style_removal(seed, complete):
    # BEIR removes the query's own id from its results and keeps the query.
    qrels, run, qrels_dict, run_dict = _case(seed)
    without_self = {q: {d: s for d, s in docs.items() if d != q} for q, docs in run_dict.items()}
    removed = sum(q in docs for q, docs in run_dict.items())
    assert removed > 0, "the generator should produce self hits"
    reference_run = {**{q: {} for q in qrels_dict}, **without_self} if complete else without_self
    result = evaluate(qrels, run, METRICS, exclude_self=True, complete=complete)
    assert result.options["exclude_self"] is True
    assert result.options["num_self_hits_removed"] == removed
    _assert_matches(result, qrels_dict, reference_run, 1)
