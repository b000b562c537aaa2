"""Average precision, as trec_eval's ``map`` and ``map_cut.k``.

Sum, over the relevant documents retrieved within the cutoff, of the precision
at their rank, divided by the number of relevant documents judged for the query
(not by min(k, that number)).  0 for queries without relevant documents.
"""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun, position_in_group


def average_precision(judged: JudgedRun, cutoff: int | None = None) -> np.ndarray:
    """Per-query AP over the first ``cutoff`` ranks (all ranks when None)."""
    keep = judged.relevant if cutoff is None else judged.relevant & (judged.rank <= cutoff)
    query, rank = judged.row_query[keep], judged.rank[keep]
    # Relevant rows are grouped by query in rank order, so the running count of
    # relevant documents is the position within the group.
    rel_so_far = position_in_group(query)
    total = np.bincount(query, weights=rel_so_far / rank, minlength=judged.num_queries)
    has_rel = judged.num_rel > 0
    return np.where(has_rel, total / np.where(has_rel, judged.num_rel, 1), 0.0)
