"""Recall at k, as trec_eval's ``recall.k``.

Relevant documents among the first k ranks divided by the number of relevant
documents judged for the query (retrieved or not).  Not capped: when a query has
more relevant documents than k, recall@k stays below 1.  0 for queries without
relevant documents.
"""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun


def recall(judged: JudgedRun, cutoff: int) -> np.ndarray:
    """Per-query recall@``cutoff``."""
    found = judged.relevant_in_top(cutoff)
    has_rel = judged.num_rel > 0
    return np.where(has_rel, found / np.where(has_rel, judged.num_rel, 1), 0.0)
