"""nDCG, as trec_eval's ``ndcg_cut.k`` (with a cutoff) and ``ndcg`` (without).

Gain of a retrieved document = its qrels label when the label is positive, else 0
(unjudged and negatively labelled documents gain nothing).  The relevance
threshold plays no part: trec_eval uses the raw labels, so with ``-l 2`` a
label-1 document still gains 1.  Discount: ``log2(rank + 1)``.  The ideal DCG
ranks every positive label of the query (retrieved or not) highest first and is
cut at the same depth.  A query without positive labels scores 0.
"""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun


def ndcg(judged: JudgedRun, cutoff: int | None = None) -> np.ndarray:
    """Per-query nDCG at ``cutoff`` (whole ranking when None)."""
    gain = judged.label > 0
    ideal_keep = np.ones(len(judged.ideal_rank), dtype=bool)
    if cutoff is not None:
        gain &= judged.rank <= cutoff
        ideal_keep = judged.ideal_rank <= cutoff
    dcg = judged.per_query_sum(gain, judged.label / np.log2(judged.rank + 1.0))
    ideal = np.bincount(
        judged.ideal_query[ideal_keep],
        weights=(judged.ideal_gain / np.log2(judged.ideal_rank + 1.0))[ideal_keep],
        minlength=judged.num_queries,
    )
    has_ideal = ideal > 0
    return np.where(has_ideal, dcg / np.where(has_ideal, ideal, 1.0), 0.0)
