"""Hand-computed oracles for every metric (each expected value is worked out in the comment)."""
from __future__ import annotations

from math import log2

import pytest

from harness.data import Qrels, Run
from harness.errors import ConfigError, InputError
from harness.metrics import evaluate


def _run(rows):
    return Run.from_arrays(*zip(*rows))


def _qrels(rows):
    return Qrels.from_arrays(*zip(*rows))


def _values(qrels, run, metrics, **options):
    result = evaluate(qrels, run, metrics, **options)
    return {m: result.aggregate[m] for m in result.per_query}, result


# q1 ranks d1 d2 d3 d4; relevant: d2, d4 and d5 (never retrieved), so R = 3.
BINARY_RUN = _run([("q1", "d1", 3.0), ("q1", "d2", 2.0), ("q1", "d3", 1.0), ("q1", "d4", 0.5)])
BINARY_QRELS = _qrels([("q1", "d2", 1), ("q1", "d4", 1), ("q1", "d5", 1), ("q1", "d3", 0)])


@pytest.mark.parametrize("metric, expected", [
    ("p@2", 1 / 2),                     # d2 in the top 2
    ("p@5", 2 / 5),                     # only 4 retrieved, still divided by 5
    ("recall@2", 1 / 3),
    ("recall@4", 2 / 3),                # d5 never retrieved
    ("mrr", 1 / 2),                     # first relevant at rank 2
    ("mrr@1", 0.0),                     # cut before it
    ("mrr@2", 1 / 2),
    ("map", (1 / 2 + 2 / 4) / 3),       # precision at ranks 2 and 4, over R = 3
    ("map@2", (1 / 2) / 3),             # divided by R, not by min(k, R)
    ("success@1", 0.0),
    ("success@2", 1.0),
    ("r-prec", 1 / 3),                  # top R = 3 holds d2 only
    ("ndcg@2", (1 / log2(3)) / (1 + 1 / log2(3))),
    ("ndcg@4", (1 / log2(3) + 1 / log2(5)) / (1 + 1 / log2(3) + 1 / log2(4))),
    ("ndcg", (1 / log2(3) + 1 / log2(5)) / (1 + 1 / log2(3) + 1 / log2(4))),
])
def test_binary_judgements(metric, expected):
    values, _ = _values(BINARY_QRELS, BINARY_RUN, [metric])
    assert values[metric] == pytest.approx(expected, abs=1e-12)


def test_ties_are_broken_by_document_id_descending():
    # d10 and d9 tie; strcmp puts "d9" above "d10", so d9 is ranked first even
    # though it was listed second and 9 < 10 numerically.
    run = _run([("q", "d10", 1.0), ("q", "d9", 1.0), ("q", "d1", 0.5)])
    values, _ = _values(_qrels([("q", "d9", 1)]), run, ["mrr", "p@1", "ndcg@1"])
    assert values == {"mrr": 1.0, "p@1": 1.0, "ndcg@1": 1.0}
    values, _ = _values(_qrels([("q", "d10", 1)]), run, ["mrr", "p@1", "ndcg@2"])
    assert values == pytest.approx({"mrr": 1 / 2, "p@1": 0.0, "ndcg@2": 1 / log2(3)}, abs=1e-12)


def test_scores_are_compared_in_double_precision():
    # As trec_eval 10 (64-bit scores): no tie, so "a" ranks first despite "b" > "a".
    run = _run([("q", "a", 0.1000000000001), ("q", "b", 0.1)])
    values, _ = _values(_qrels([("q", "b", 1)]), run, ["mrr"])
    assert values == {"mrr": 0.5}


# Graded labels: a=1, b=-1 (negative), c=2, d=0, e=3 (not retrieved).
GRADED_RUN = _run([("q", "a", 0.9), ("q", "b", 0.8), ("q", "c", 0.7), ("q", "d", 0.6)])
GRADED_QRELS = _qrels([("q", "a", 1), ("q", "b", -1), ("q", "c", 2), ("q", "d", 0), ("q", "e", 3)])
# nDCG uses the raw positive labels at every threshold: DCG = 1/log2(2) + 2/log2(4) = 2,
# ideal = 3, 2, 1 -> 3 + 2/log2(3) + 1/log2(4).
GRADED_NDCG = 2 / (3 + 2 / log2(3) + 1 / 2)


@pytest.mark.parametrize("threshold, expected", [
    # relevant a, c, e (R = 3)
    (1, {"p@4": 2 / 4, "mrr": 1.0, "map": (1 / 1 + 2 / 3) / 3, "recall@4": 2 / 3, "r-prec": 2 / 3}),
    # relevant c, e (R = 2); a (label 1) no longer counts
    (2, {"p@4": 1 / 4, "mrr": 1 / 3, "map": (1 / 3) / 2, "recall@4": 1 / 2, "r-prec": 0.0}),
    # every judged label >= 0 counts: a, c, d, e (R = 4); b (negative) never does
    (0, {"p@4": 3 / 4, "mrr": 1.0, "map": (1 / 1 + 2 / 3 + 3 / 4) / 4, "recall@4": 3 / 4, "r-prec": 3 / 4}),
])
def test_graded_labels_and_relevance_threshold(threshold, expected):
    metrics = [*expected, "ndcg@4", "ndcg"]
    values, result = _values(GRADED_QRELS, GRADED_RUN, metrics, relevance_threshold=threshold)
    assert values == pytest.approx({**expected, "ndcg@4": GRADED_NDCG, "ndcg": GRADED_NDCG}, abs=1e-12)
    assert result.options["relevance_threshold"] == threshold


def test_ideal_dcg_is_cut_at_k_and_uses_unretrieved_labels():
    # ndcg@1: DCG = label of a = 1; ideal = best label (e, 3) at rank 1.
    values, _ = _values(GRADED_QRELS, GRADED_RUN, ["ndcg@1"])
    assert values["ndcg@1"] == pytest.approx(1 / 3, abs=1e-12)


def test_queries_without_relevant_documents_score_zero_and_count():
    run = _run([("q1", "a", 1.0), ("q2", "x", 1.0), ("q3", "y", 1.0)])
    # q2 has only non-relevant labels, q3 only labels below -1 (trec_eval would crash).
    qrels = _qrels([("q1", "a", 1), ("q2", "x", 0), ("q2", "z", -1), ("q3", "y", -2), ("q3", "w", -3)])
    metrics = ["ndcg@10", "ndcg", "recall@10", "p@1", "mrr", "map", "success@1", "r-prec"]
    values, result = _values(qrels, run, metrics)
    assert result.query_ids == ["q1", "q2", "q3"]
    for metric in metrics:
        assert result.metric(metric) == pytest.approx({"q1": 1.0, "q2": 0.0, "q3": 0.0})
        assert values[metric] == pytest.approx(1 / 3)


def test_which_queries_are_averaged():
    # q1 judged and answered (mrr 1), q2 judged but not answered, q3 answered but not judged.
    run = _run([("q1", "a", 1.0), ("q3", "b", 1.0)])
    qrels = _qrels([("q1", "a", 1), ("q2", "c", 1)])
    values, result = _values(qrels, run, ["mrr"])
    assert result.query_ids == ["q1"] and values["mrr"] == 1.0
    assert result.options["num_judged_queries_missing_from_run"] == 1
    assert result.options["num_run_queries_without_judgements"] == 1
    values, result = _values(qrels, run, ["mrr"], complete=True)
    assert result.query_ids == ["q1", "q2"] and values["mrr"] == 0.5
    assert result.metric("mrr") == {"q1": 1.0, "q2": 0.0}
    assert result.options["complete"] is True


def test_exclude_self_drops_query_id_hits_and_keeps_the_query():
    # q1 retrieves itself first; q2 retrieves only itself.
    run = _run([("q1", "q1", 2.0), ("q1", "d1", 1.0), ("q2", "q2", 1.0)])
    qrels = _qrels([("q1", "d1", 1), ("q2", "d2", 1)])
    values, result = _values(qrels, run, ["mrr", "p@1"])
    assert values == {"mrr": 0.5 / 2, "p@1": 0.0}
    values, result = _values(qrels, run, ["mrr", "p@1"], exclude_self=True)
    assert result.query_ids == ["q1", "q2"]           # q2 still counts, with an empty ranking
    assert values == {"mrr": 1.0 / 2, "p@1": 1.0 / 2}
    assert result.options["exclude_self"] is True and result.options["num_self_hits_removed"] == 2


def test_options_record_the_protocol():
    _, result = _values(BINARY_QRELS, BINARY_RUN, ["ndcg_cut_10", "nDCG@10", "P.5"])
    assert result.options == {
        "metrics": ["ndcg@10", "p@5"], "relevance_threshold": 1, "exclude_self": False, "complete": False,
        "num_queries": 1, "num_judged_queries_missing_from_run": 0, "num_run_queries_without_judgements": 0,
        "num_self_hits_removed": 0,
    }


@pytest.mark.parametrize("threshold", [-1, 1.5, True, "1"])
def test_bad_relevance_threshold(threshold):
    with pytest.raises(ConfigError, match="relevance_threshold"):
        evaluate(BINARY_QRELS, BINARY_RUN, ["map"], relevance_threshold=threshold)


def test_no_judged_query_in_run_is_an_input_error():
    run = Run.from_arrays(["x"], ["d"], [1.0], source="runs/bm25.trec")
    with pytest.raises(InputError, match=r"runs/bm25.trec: no query of the run has judgements"):
        evaluate(BINARY_QRELS, run, ["map"])
