"""The metrics entry point: ``evaluate(qrels, run, metrics) -> EvaluationResult``."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from numbers import Integral

import numpy as np

from harness.data import Qrels, Run
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.metrics.judged import judged_rows
from harness.metrics.names import METRICS, Metric, parse_metrics

log = logging.getLogger(__name__)


def evaluate(
    qrels: Qrels,
    run: Run,
    metrics: Sequence[str | Metric],
    *,
    relevance_threshold: int = 1,
    exclude_self: bool = False,
    complete: bool = False,
) -> EvaluationResult:
    """Score ``run`` against ``qrels`` exactly as trec_eval does, per query and on average.

    Args:
        qrels: the judgements (labels may be graded, 0 or negative).
        run: the ranked results; the order is trec_eval's (score descending, then
            document id descending), the run's own ranks play no part.
        metrics: names such as ``"ndcg@10"``, ``"recall@100"``, ``"mrr"`` (see
            :func:`~harness.metrics.parse_metric`).
        relevance_threshold: lowest label that counts as relevant (trec_eval ``-l``;
            nDCG ignores it and uses the raw labels, as trec_eval does).
        exclude_self: drop retrieved documents whose id equals the query id before
            scoring (BEIR's ArguAna/Quora protocol).  A query keeps counting as
            answered even if nothing is left of its ranking.
        complete: average over every judged query, unanswered ones scoring 0
            (trec_eval ``-c``); by default only judged queries the run answers count.

    Returns:
        An :class:`~harness.evaluation_result.EvaluationResult` with queries in sorted id
        order and ``options`` recording the protocol options and query counts.

    Raises:
        ConfigError: unknown metric or bad option.
        InputError: no query of the run is judged (and ``complete`` is off).
    """
    wanted = parse_metrics(metrics)
    on_answers = [str(m) for m in wanted if METRICS.get(m.name).scored_on != "qrels"]
    if on_answers:
        raise ConfigError(f"{', '.join(on_answers)}: scored on answer strings, not on relevance judgements; "
                          "evaluate under a benchmark whose protocol has answers (e.g. MKQA)")
    if isinstance(relevance_threshold, bool) or not isinstance(relevance_threshold, Integral):
        raise ConfigError(f"relevance_threshold must be an integer, got {relevance_threshold!r}")
    if relevance_threshold < 0:
        raise ConfigError(f"relevance_threshold must be >= 0, got {relevance_threshold}")
    relevance_threshold = int(relevance_threshold)

    answered = run.bounds()[0]
    scored_run = run.without_self_hits() if exclude_self else run
    judged = judged_rows(qrels, scored_run, relevance_threshold=relevance_threshold,
                         complete=bool(complete), run_query_ids=answered)

    judged_queries = qrels.bounds()[0]
    answered_and_judged = int(np.isin(judged_queries, answered).sum())
    missing_from_run = len(judged_queries) - answered_and_judged
    unjudged_in_run = len(answered) - answered_and_judged
    if judged.num_queries == 0:
        raise InputError(run.source, f"no query of the run has judgements in the qrels "
                                     f"({len(answered)} run queries, {len(judged_queries)} judged queries)")
    if missing_from_run and not complete:
        log.warning("%d of %d judged queries have no results in the run and are left out of the "
                    "averages (use complete=True / --complete to count them as 0)",
                    missing_from_run, len(judged_queries))

    per_query = {str(m): m.compute(judged) for m in wanted}
    aggregate = {name: float(values.mean()) for name, values in per_query.items()}
    options = {
        "metrics": [str(m) for m in wanted],
        "relevance_threshold": relevance_threshold,
        "exclude_self": bool(exclude_self),
        "complete": bool(complete),
        "num_queries": judged.num_queries,
        "num_judged_queries_missing_from_run": missing_from_run,
        "num_run_queries_without_judgements": unjudged_in_run,
        "num_self_hits_removed": len(run) - len(scored_run),
    }
    return EvaluationResult(query_ids=judged.query_ids.tolist(), per_query=per_query,
                            aggregate=aggregate, options=options)
