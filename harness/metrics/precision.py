"""Precision at k, as trec_eval's ``P.k``.

Relevant documents among the first k ranks divided by k, even when the run
retrieved fewer than k documents for the query (the missing ranks count as
non-relevant).
"""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun


def precision(judged: JudgedRun, cutoff: int) -> np.ndarray:
    """Per-query P@``cutoff``."""
    return judged.relevant_in_top(cutoff) / float(cutoff)
