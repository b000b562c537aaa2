"""Speed of ``evaluate`` against pytrec_eval on 2,000 queries x 1,000 retrieved documents.

Run with ``pytest -m "benchmark and slow"`` (or ``tox -e bench``).  Two measurements: each side end to
end (building its inputs from the same numpy arrays: ``Run``/``Qrels.from_arrays`` here, dicts of dicts
there) and each side's evaluation alone on prebuilt inputs.  Rounds are interleaved (pytrec_eval in
pedantic's untimed ``setup``), both sides timed in process CPU seconds (single-threaded code on both
sides: load from other processes adds wall time, not CPU time), and the bounds are on the median of the
per-round ratios harness / pytrec_eval (tests/train/benchutil.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from benchutil import paired_rounds
from optional_extras import require_extra

from harness.data import Qrels, Run
from harness.metrics import evaluate, parse_metrics

pytrec_eval = require_extra("pytrec_eval")

N_QUERIES, N_DOCS = 2_000, 1_000
METRICS = parse_metrics(["ndcg@10", "recall@100", "mrr", "map", "p@10", "success@10"])
PYTREC_MEASURES = {"ndcg_cut.10", "recall.100", "recip_rank", "map", "P.10", "success.10"}

pytestmark = [pytest.mark.slow, pytest.mark.benchmark(group="evaluate-2000x1000")]
ROUNDS = 5
# Cost bounds, harness / pytrec_eval (median round); the measured medians and spreads are in the report.
MAX_RATIO_END_TO_END = 3.0
MAX_RATIO_EVALUATION = 2.5


@pytest.fixture(scope="module")
def arrays():
    """Tie-heavy scores (3 decimals) and 10 graded judgements per query, 5 of them retrieved."""
    rng = np.random.default_rng(0)
    query_ids = np.array([f"q{i}" for i in range(N_QUERIES)])
    doc_pool = np.array([f"doc{i}" for i in range(200_000)])
    retrieved = np.stack([rng.choice(len(doc_pool), N_DOCS, replace=False) for _ in range(N_QUERIES)])
    run = (np.repeat(query_ids, N_DOCS), doc_pool[retrieved.ravel()], np.round(rng.random(N_QUERIES * N_DOCS), 3))
    judged = np.concatenate([retrieved[:, :5], rng.choice(len(doc_pool), (N_QUERIES, 5))], axis=1)
    judged = [np.unique(row) for row in judged]
    qrels = (np.repeat(query_ids, [len(row) for row in judged]), doc_pool[np.concatenate(judged)],
             rng.integers(0, 3, sum(len(row) for row in judged)))
    return qrels, run


def _harness(qrels_arrays, run_arrays):
    return evaluate(Qrels.from_arrays(*qrels_arrays), Run.from_arrays(*run_arrays), METRICS)


def _nested(qids, docids, values, cast):
    out: dict = {}
    for q, d, v in zip(qids.tolist(), docids.tolist(), values.tolist()):
        out.setdefault(q, {})[d] = cast(v)
    return out


def _pytrec_evaluate(qrels_dict, run_dict):
    per_query = pytrec_eval.RelevanceEvaluator(qrels_dict, PYTREC_MEASURES).evaluate(run_dict)
    measures = next(iter(per_query.values())).keys()
    return {m: float(np.mean([values[m] for values in per_query.values()])) for m in measures}


def _pytrec(qrels_arrays, run_arrays):
    return _pytrec_evaluate(_nested(*qrels_arrays, int), _nested(*run_arrays, float))


def test_same_numbers(arrays):
    ours = _harness(*arrays).aggregate
    theirs = _pytrec(*arrays)
    for metric in METRICS:
        key = metric.trec_eval_name
        assert abs(ours[str(metric)] - theirs[key]) < 1e-9


def test_end_to_end_from_arrays(benchmark, arrays):
    benchmark.extra_info.update(queries=N_QUERIES, docs_per_query=N_DOCS, includes="input building + evaluation")
    times = paired_rounds(benchmark, lambda: _pytrec(*arrays), lambda: _harness(*arrays), ROUNDS)
    times.report(benchmark, f"evaluate {N_QUERIES} x {N_DOCS} from arrays, harness / pytrec_eval")
    assert times.result.aggregate["ndcg@10"] == pytest.approx(_pytrec(*arrays)["ndcg_cut_10"], abs=1e-9)
    times.assert_at_most(MAX_RATIO_END_TO_END, "harness / pytrec_eval, end to end")


def test_evaluation_only(benchmark, arrays):
    benchmark.extra_info.update(queries=N_QUERIES, docs_per_query=N_DOCS, includes="evaluation of prebuilt inputs")
    qrels_arrays, run_arrays = arrays
    ours = (Qrels.from_arrays(*qrels_arrays), Run.from_arrays(*run_arrays), METRICS)
    theirs = (_nested(*qrels_arrays, int), _nested(*run_arrays, float))
    times = paired_rounds(benchmark, lambda: _pytrec_evaluate(*theirs), lambda: evaluate(*ours), ROUNDS)
    times.report(benchmark, f"evaluate {N_QUERIES} x {N_DOCS} prebuilt inputs, harness / pytrec_eval")
    times.assert_at_most(MAX_RATIO_EVALUATION, "harness / pytrec_eval, evaluation only")
