"""R-precision, as trec_eval's ``Rprec``: precision after R documents, R = relevant documents judged for the query.

When fewer than R documents were retrieved, the missing ranks count as
non-relevant.  0 for queries without relevant documents.
"""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun


def r_precision(judged: JudgedRun, cutoff: None = None) -> np.ndarray:
    """Per-query R-precision (takes no cutoff)."""
    keep = judged.relevant & (judged.rank <= judged.num_rel[judged.row_query])
    found = judged.per_query_sum(keep)
    has_rel = judged.num_rel > 0
    return np.where(has_rel, found / np.where(has_rel, judged.num_rel, 1), 0.0)
