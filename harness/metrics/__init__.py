"""Retrieval metrics computed exactly as trec_eval (version 10) computes them.

Use::

    from harness.metrics import evaluate
    result = evaluate(qrels, run, ["ndcg@10", "recall@100", "mrr"])
    result.aggregate["ndcg@10"], result.metric("ndcg@10")["q1"]

Every value equals trec_eval's (and pytrec_eval's) to 1e-9, per query; the tests
check this against pytrec_eval on tie-heavy random runs and against trec_eval's
own test collection.  Read this when a number looks odd.

Ranking
    Each query's documents are ordered by score descending, ties broken by
    document id descending in ``strcmp`` (code point) order, so ``d9`` ranks
    above ``d10`` at equal score.  The rank column of a run file is ignored.
    Scores are compared as 64-bit floats, as trec_eval 10 does.  (trec_eval 9,
    which pytrec_eval 0.5 bundles, stored scores as 32-bit floats, so scores
    that differ only after about 7 significant digits tie there and not here.
    Runs scored in float32, as faiss and Lucene scores are, rank the same.)

Relevance
    A retrieved document is relevant when its qrels label is >= the relevance
    threshold (trec_eval ``-l``, default 1).  Documents absent from the qrels of
    the query, and documents with negative labels, are never relevant.  R, the
    number of relevant documents of a query, counts every judged document with
    label >= max(threshold, 0), retrieved or not.

Metrics (``name@k`` = trec_eval measure)
    ``ndcg@k`` = ``ndcg_cut.k``, ``ndcg`` = ``ndcg``: gain = the raw label when
    positive, else 0, whatever the threshold (with ``-l 2`` a label-1 document
    still gains 1); discount ``log2(rank + 1)``; the ideal ranking sorts all
    positive labels of the query, retrieved or not, and is cut at k too.
    ``recall@k`` = ``recall.k``: relevant in top k / R (not capped at k).
    ``p@k`` = ``P.k``: relevant in top k / k, even if fewer than k were retrieved.
    ``mrr`` = ``recip_rank``: 1 / rank of the first relevant document.
    ``mrr@k``: ``recip_rank`` of the ranking cut after k documents.
    ``map`` = ``map``, ``map@k`` = ``map_cut.k``: sum of precision at the rank of
    each relevant document retrieved (within k), divided by R (not min(k, R)).
    ``success@k`` = ``success.k``: 1 if a relevant document is in the top k.
    ``r-prec`` = ``Rprec``: relevant in the top R / R.

Which queries are averaged
    By default the mean runs over the queries that are both judged and answered
    by the run; run queries without judgements are ignored, and judged queries
    the run does not answer are left out (a warning is logged).  With
    ``complete=True`` (trec_eval ``-c``) every judged query counts and the
    unanswered ones score 0.  Queries whose judgements contain no relevant
    document (only 0 or negative labels) are evaluated like trec_eval does: every
    metric is 0 for them and they are included in the mean.  (trec_eval itself
    crashes on a query whose labels are all below -1; here it scores 0.)

Protocol options
    ``relevance_threshold`` (above), ``exclude_self`` (drop documents whose id
    equals the query id before ranking, as BEIR does for ArguAna and Quora; a
    query whose only result was itself stays answered and scores 0) and
    ``complete``.  All three, the metric list and the query counts are recorded
    in ``EvaluationResult.options``.

Registry: the metric families live in :data:`METRICS` (a :class:`harness.registry.Registry`);
a plug-in adds one with :func:`register_metric` or the ``retrieval_harness.metrics`` entry
point group, and ``harness list metrics`` lists them.

Layout: one metric per module (``ndcg.py``, ``recall.py``, ...), all reducing
the columnar :class:`~harness.metrics.judged.JudgedRun` that
:func:`~harness.metrics.judged.align` builds once per evaluation.
"""
from harness.metrics.evaluation import evaluate
from harness.metrics.judged import JudgedRun, align
from harness.metrics.names import METRICS, Metric, MetricKind, parse_metric, parse_metrics, register_metric

DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr@10", "map", "p@10", "success@10")

__all__ = ["DEFAULT_METRICS", "METRICS", "JudgedRun", "Metric", "MetricKind", "align", "evaluate", "parse_metric",
           "parse_metrics", "register_metric"]
