"""Parity with trec_eval's own test collection and expected outputs (printed to 4 decimals)."""
from __future__ import annotations

import re

import pytest

from harness.data import read_qrels, read_run
from harness.metrics import evaluate, parse_metric

# trec_eval measures this package computes; every other line of the outputs is skipped.
SUPPORTED = re.compile(r"^(map|ndcg|recip_rank|Rprec|P_\d+|recall_\d+|ndcg_cut_\d+|map_cut_\d+|success_\d+)$")


def _read_expected(path):
    """``{qid or "all": {trec_eval measure: printed value}}`` from a trec_eval output file."""
    expected: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        measure, qid, value = line.split()
        expected.setdefault(qid, {})[measure] = value
    return expected


@pytest.fixture(scope="module")
def collection(shared_data):
    folder = shared_data / "trec-eval-test"
    qrels, run = read_qrels(folder / "qrels.test"), read_run(folder / "results.test")
    per_query = _read_expected(folder / "out.test.aq")
    aggregate = _read_expected(folder / "out.test.a")["all"]
    measures = [m for m in aggregate if SUPPORTED.match(m)]
    metrics = [parse_metric(m) for m in measures]
    assert [m.trec_eval_name for m in metrics] == measures
    return evaluate(qrels, run, metrics), measures, per_query, aggregate


def test_covers_every_supported_measure_of_the_output(collection):
    _, measures, _, aggregate = collection
    # 9 cutoffs each for P, recall, ndcg_cut, map_cut; 3 for success; map, ndcg, recip_rank, Rprec.
    assert len(measures) == 4 * 9 + 3 + 4
    assert int(aggregate["num_q"]) == 3


def test_aggregates_match_trec_eval(collection):
    result, measures, _, aggregate = collection
    assert result.options["num_queries"] == int(aggregate["num_q"])
    mismatches = {m: (f"{result.aggregate[str(parse_metric(m))]:.4f}", aggregate[m]) for m in measures
                  if f"{result.aggregate[str(parse_metric(m))]:.4f}" != aggregate[m]}
    assert not mismatches


def test_per_query_values_match_trec_eval(collection):
    result, measures, per_query, _ = collection
    queries = sorted(q for q in per_query if q != "all")
    assert result.query_ids == queries
    mismatches = {}
    for qid in queries:
        for measure in measures:
            ours = f"{result.metric(str(parse_metric(measure)))[qid]:.4f}"
            if ours != per_query[qid][measure]:
                mismatches[(qid, measure)] = (ours, per_query[qid][measure])
    assert not mismatches


def test_collection_exercises_ties_and_unsorted_input(shared_data):
    # The parity above is only meaningful for tie handling if the run has ties,
    # and for ordering if its lines are not already in rank order.
    lines = [line.split() for line in (shared_data / "trec-eval-test" / "results.test").read_text().splitlines()]
    scores: dict[str, list[float]] = {}
    for qid, _, _, _, score, _ in lines:
        scores.setdefault(qid, []).append(float(score))
    assert sum(len(s) - len(set(s)) for s in scores.values()) >= 10
    assert any(s != sorted(s, reverse=True) for s in scores.values())
