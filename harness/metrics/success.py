"""Success at k (hit rate), as trec_eval's ``success.k``: 1 if any of the first k documents is relevant."""
from __future__ import annotations

import numpy as np

from harness.metrics.judged import JudgedRun


def success(judged: JudgedRun, cutoff: int) -> np.ndarray:
    """Per-query success@``cutoff`` (0.0 or 1.0)."""
    return (judged.relevant_in_top(cutoff) > 0).astype(np.float64)
