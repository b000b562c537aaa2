"""Reciprocal rank, as trec_eval's ``recip_rank``, and its cut version MRR@k.

1 / rank of the first relevant document, 0 when none is retrieved.  MRR@k is
``recip_rank`` on the run truncated to its first k documents (after trec_eval
ordering), i.e. 0 when the first relevant document is below rank k.
"""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun


def reciprocal_rank(judged: JudgedRun, cutoff: int | None = None) -> np.ndarray:
    """Per-query reciprocal rank of the first relevant document within ``cutoff`` ranks."""
    keep = judged.relevant if cutoff is None else judged.relevant & (judged.rank <= cutoff)
    query, rank = judged.row_query[keep], judged.rank[keep]
    # Rows are grouped by query in rank order: the first row of each group is the best.
    first = np.ones(len(query), dtype=bool)
    first[1:] = query[1:] != query[:-1]
    out = np.zeros(judged.num_queries, dtype=np.float64)
    out[query[first]] = 1.0 / rank[first]
    return out
