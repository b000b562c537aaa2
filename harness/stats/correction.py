"""Multiple-comparison correction of p-values over a declared family.

Methods (names as accepted everywhere in the harness):

* ``bonferroni``: ``min(1, m * p)`` (controls the family-wise error rate);
* ``holm``: Holm's step-down version of Bonferroni (FWER, uniformly more powerful);
* ``bh``: Benjamini-Hochberg step-up adjustment (controls the false discovery rate);
* ``none``: p-values unchanged.

The adjusted values equal ``statsmodels.stats.multitest.multipletests`` with
methods ``bonferroni``, ``holm`` and ``fdr_bh`` (checked in the tests).
"""
from __future__ import annotations

import numpy as np

from harness.stats.paired import StatisticsError

CORRECTIONS = ("holm", "bonferroni", "bh", "none")
CORRECTION_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni", "bh": "Benjamini-Hochberg", "none": "no correction"}
CORRECTION_CONTROLS = {"holm": "family-wise error rate", "bonferroni": "family-wise error rate",
                       "bh": "false discovery rate", "none": "nothing"}


def adjust_pvalues(p_values, method: str) -> np.ndarray:
    """Adjusted p-values of one family, in the input order."""
    if method not in CORRECTIONS:
        raise StatisticsError(f"unknown correction {method!r}; choose one of {', '.join(CORRECTIONS)}")
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise StatisticsError("p-values must lie in [0, 1]")
    m = len(p)
    if m == 0 or method == "none":
        return p.copy()
    if method == "bonferroni":
        return np.minimum(p * m, 1.0)
    order = np.argsort(p, kind="mergesort")
    ranked = p[order]
    if method == "holm":
        # p_(i) * (m - i + 1), made monotone non-decreasing from the smallest p up.
        adjusted = np.maximum.accumulate(ranked * np.arange(m, 0, -1))
    else:
        # p_(i) * m / i, made monotone from the largest p down.
        adjusted = np.minimum.accumulate((ranked * m / np.arange(1, m + 1))[::-1])[::-1]
    out = np.empty(m, dtype=np.float64)
    out[order] = np.minimum(adjusted, 1.0)
    return out
