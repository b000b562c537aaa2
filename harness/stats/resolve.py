"""Deterministic sign-flip p-values for decisions Monte Carlo cannot settle.

A Monte Carlo p-value whose corrected decision is within its Clopper-Pearson error
of the threshold (:func:`harness.stats.suite.unsettled_decisions`) would be decided
by the seed, even at millions of draws when the true p sits at the threshold.  Such
a comparison is resolved here instead, from its per-query differences ``d`` alone,
in three steps of decreasing strength (:func:`harness.stats.suite.settle_decisions`
applies them):

1. **Exact on a grid.**  Metrics such as Acc@k, P@k, recall and MRR@k take rational
   values with small denominators, so ``d = k / q`` for integers ``k_i`` and one
   scale ``q`` (found with :meth:`fractions.Fraction.limit_denominator`, each value
   within 1e-11 of ``k_i / q``).  The statistic ``sum s_i |k_i|`` equals
   ``A - 2 S`` with ``A = sum |k_i|`` and ``S`` the sum of the flipped subset, so
   its null distribution is the subset-sum distribution of the ``|k_i|``, computed
   exactly by dynamic programming (one shifted add per query, only up to the tail
   needed).  Every entry is a sum of non-negative terms (rescaled by exact powers
   of two), so its relative rounding error is at most ``n * 2^-53``, and the pairwise
   sum of the tail adds at most ``(128 + log2 L) * 2^-53``: the p-value is the exact
   permutation p-value to a relative ``(n + 192) * 2^-53`` (< 5e-13 for n <= 4000).
   Cost ``n * L`` with ``L ~ A/2``; used when that is within ``budget``.
2. **Exact bounds.**  Otherwise ``|d_i|`` is rounded to a grid ``h`` chosen from
   ``budget``: ``|d_i| = h a_i + e_i``, ``E = sum |e_i|``.  Since
   ``|sum s_i |d_i| - h sum s_i a_i| <= E`` for every sign vector,
   ``P(h|Y| >= x + E) <= p <= P(h|Y| >= x - E)`` with ``Y = sum s_i a_i`` computed
   exactly as in 1.  When the corrected decision is the same at both bounds
   (checked jointly for all resolved comparisons) it is the exact test's decision.
   With n = 500 and budget 2e8, ``h ~ 1e-4`` and the bounds are within about 1% of p.
3. **Saddlepoint.**  Only where the bounds straddle the threshold, the decision is
   made by the Lugannani-Rice approximation of the tail of ``X = sum s_i d_i``
   with cumulant generating function ``K(t) = sum log cosh(t d_i)``:
   ``K'(t_hat) = x``, ``w = sqrt(2 (t_hat x - K(t_hat)))``, ``u = t_hat sqrt(K''(t_hat))``,
   ``P(X >= x) ~ 1 - Phi(w) + phi(w) (1/u - 1/w)``, and ``p = 2 P(X >= x)``.
   Its relative error is O(1/n) uniformly far into the tail (Daniels 1987;
   Robinson 1982 for permutation tests).  The value reported is the saddlepoint
   clipped into the exact bounds of step 2, so it is never further from the
   exact p than those bounds allow.

Measured accuracy (tests/stats/test_stats_resolve.py), saddlepoint against the exact
grid p-value on real-ish difference vectors (scores in [0, 1], 0-60% ties, mean
shifts; ``d`` on a 1/1000 grid; exact p from 1e-7 to 1e-2): largest relative error
3.6% at n = 100, 0.54% at n = 200, 0.26% at n = 500, 0.16% at n = 1000 (median
0.3%); poor only with few non-zero values (29% at 20 of them, where the suite
enumerates exactly anyway) or on a coarse grid (17% for recall on a 1/4 grid at
n = 200, where step 1 applies).  Against 20,000,000 Monte Carlo sign flips (n = 300,
continuous differences) it agrees within 1.8 and 0.6 Monte Carlo standard errors at
p = 1.1e-3 and 3.0e-4.  The exact steps agree with
brute-force enumeration of all 2^n sign vectors (n <= 18) to 1e-12, and the bounds
of step 2 are within 2% of each other at n = 200-500 with the default budget.

All three are functions of ``d`` only: the same data give the same p-value and
decision under every seed, and no other comparison changes them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import optimize as _optimize
from scipy import special as _special

from harness.stats.paired import StatisticsError

# Work allowed for one exact count: queries x table entries (about a second of numpy).
DEFAULT_BUDGET = 200_000_000
# Largest denominator tried per value when looking for a common grid, and the closeness required.
MAX_DENOMINATOR = 10_000
GRID_TOLERANCE = 1e-11
_RESCALE_EVERY = 256          # the table is multiplied by 2^-256 every 256 queries (exact in binary)
KINDS = ("exact", "bounded", "saddlepoint")
KIND_NAMES = {"exact": "exact enumeration on the metric's grid",
              "bounded": "exact bounds from a rounded grid",
              "saddlepoint": "Lugannani-Rice saddlepoint approximation"}


@dataclass(frozen=True)
class Resolution:
    """A deterministic two-sided sign-flip p-value and exact bounds on the permutation p-value."""

    p_value: float
    low: float          # exact lower bound on the permutation p-value
    high: float         # exact upper bound
    kind: str           # "exact" or "bounded" (bounds only); the caller may turn "bounded" into "saddlepoint"
    grid: str           # the grid used, e.g. "1/60" or "h=1.04e-04"
    saddlepoint: float  # the Lugannani-Rice value (unclipped), for the record

    def method(self, kind: str | None = None) -> str:
        """The ``test_method`` text of a comparison resolved this way."""
        kind = kind or self.kind
        if kind == "exact":
            return f"randomization (exact on the {self.grid} grid)"
        if kind == "bounded":
            return f"randomization (exact bounds [{self.low:.4g}, {self.high:.4g}], grid {self.grid})"
        return (f"randomization (saddlepoint, Lugannani-Rice, within exact bounds "
                f"[{self.low:.4g}, {self.high:.4g}])")


def common_grid(values: np.ndarray, max_denominator: int = MAX_DENOMINATOR,
                tol: float = GRID_TOLERANCE) -> int | None:
    """The smallest ``q`` with every value within ``tol`` of a multiple of ``1/q``, or ``None``.

    Each distinct value is approximated by its best rational with denominator at most
    ``max_denominator``; ``q`` is the least common multiple of those denominators.
    Irrational-looking values (nDCG) fail the closeness test and give ``None``.
    """
    q = 1
    for v in np.unique(np.abs(np.asarray(values, dtype=np.float64))).tolist():
        frac = Fraction(v).limit_denominator(max_denominator)
        if abs(v - frac.numerator / frac.denominator) > tol:
            return None
        q = q * frac.denominator // math.gcd(q, frac.denominator)
        if q > 10 ** 12:
            return None
    return q


def subset_sum_lower_tail(weights: np.ndarray, limits: list[int]) -> list[float]:
    """``P(S <= c)`` for each ``c`` in ``limits``, ``S`` the sum of a uniformly random subset of ``weights``.

    ``weights`` are positive integers.  The table of ``P(S = j)`` is built for
    ``j <= max(limits)`` only (sums never decrease as items are added), by one
    shifted add per weight; all terms are non-negative, so each entry's relative
    rounding error is at most ``len(weights) * 2^-53``; numpy's pairwise sum of the
    tail adds at most ``(128 + log2 L) * 2^-53`` (blocks of 128, then pairs).
    """
    weights = np.asarray(weights, dtype=np.int64)
    if len(weights) and int(weights.min()) < 1:
        raise StatisticsError("subset sums need positive integer weights")
    top = max(limits)
    if top < 0:
        return [0.0 for _ in limits]
    table = np.zeros(top + 1, dtype=np.float64)
    table[0] = 1.0
    scale_exp = 0                     # the table holds counts times 2^-scale_exp (exact powers of two)
    for i, a in enumerate(weights.tolist(), 1):
        if a <= top:
            table[a:] += table[:-a].copy()
        if i % _RESCALE_EVERY == 0:
            table *= 2.0 ** -_RESCALE_EVERY
            scale_exp += _RESCALE_EVERY
    rest = len(weights) - scale_exp
    return [0.0 if c < 0 else math.ldexp(float(table[:c + 1].sum()), -rest) for c in limits]


def _two_sided_tails(a: np.ndarray, thresholds: list[float]) -> list[float]:
    """``P(|sum s_i a_i| >= t)`` for real ``t`` and positive integers ``a`` (random signs)."""
    total = int(a.sum())
    limits: list[int | None] = []
    for t in thresholds:
        need = math.ceil(t)                               # |Y| >= t  <=>  |Y| >= ceil(t) (Y is an integer)
        if need <= 0:
            limits.append(None)
        else:
            limits.append((total - need) // 2)            # Y = A - 2S >= need  <=>  S <= (A - need) / 2
    valid = [c for c in limits if c is not None]
    lower = iter(subset_sum_lower_tail(a, valid) if valid else [])
    # |Y| >= need > 0: the two tails are disjoint and equal by symmetry
    return [1.0 if c is None else min(1.0, 2.0 * next(lower)) for c in limits]


def _log_cosh(y: np.ndarray) -> np.ndarray:
    y = np.abs(y)
    return y + np.log1p(np.exp(-2.0 * y)) - math.log(2.0)


def saddlepoint_p(d: np.ndarray) -> float:
    """Two-sided sign-flip p-value ``P(|sum s_i d_i| >= |sum d_i|)`` by the Lugannani-Rice formula."""
    d = np.asarray(d, dtype=np.float64)
    observed = abs(math.fsum(d.tolist()))            # correctly rounded: independent of the query order
    d = np.sort(np.abs(d[d != 0.0]))
    if len(d) == 0:
        return 1.0

    def slope(t: float) -> float:
        return float(np.dot(d, np.tanh(t * d)))

    return _lugannani_rice(d, observed, slope)


def _lugannani_rice(d: np.ndarray, x: float, slope) -> float:
    x = abs(x)
    top = float(d.sum())
    if x >= top * (1 - 1e-12):          # only the observed signs (and their mirror) reach the maximum
        return min(1.0, 2.0 * 2.0 ** -len(d))
    if x <= 0.0:
        return 1.0
    hi = 1.0 / float(d.max())
    while slope(hi) < x:
        hi *= 2.0
    t = _optimize.brentq(lambda s: slope(s) - x, 0.0, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    cgf = float(_log_cosh(t * d).sum())
    curvature = float(np.dot(d * d, 1.0 - np.tanh(t * d) ** 2))
    w = math.sqrt(max(2.0 * (t * x - cgf), 0.0))
    u = t * math.sqrt(curvature)
    if w < 1e-6 or u < 1e-6:           # at the centre the formula is 0/0; the tail there is 1/2
        return 1.0
    upper = float(_special.ndtr(-w)) + math.exp(-0.5 * w * w) / math.sqrt(2 * math.pi) * (1.0 / u - 1.0 / w)
    return float(min(1.0, max(0.0, 2.0 * upper)))


def resolve_sign_flip(diff: np.ndarray, *, budget: int = DEFAULT_BUDGET, use_grid: bool = True) -> Resolution:
    """Exact p-value (grid data) or exact bounds plus the saddlepoint value, for the differences ``diff``.

    The p-value is that of the Monte Carlo test it replaces: ``P(|sum s_i d_i| >= |sum d_i| - tol)``
    with the same tolerance (:func:`harness.stats.paired.tolerance`, summed exactly here).  ``budget`` bounds the work
    (queries x table entries); ``use_grid=False`` skips step 1 (bounds only).
    """
    d = np.asarray(diff, dtype=np.float64).reshape(-1)
    if len(d) == 0 or not np.all(np.isfinite(d)):
        raise StatisticsError("resolution needs finite differences")
    # correctly rounded sums (math.fsum): the result does not depend on the order of the queries
    observed = abs(math.fsum(d.tolist())) - 1e-9 * math.fsum(np.abs(d).tolist())
    nonzero = d[d != 0.0]
    sp = saddlepoint_p(d) if len(nonzero) else 1.0
    if observed <= 0.0 or len(nonzero) == 0:
        return Resolution(1.0, 1.0, 1.0, "exact", "trivial", sp)
    n = len(nonzero)
    mag = np.sort(np.abs(nonzero))                   # a function of the values, not of the query order
    q = common_grid(nonzero) if use_grid else None
    if q is not None:
        a = np.rint(mag * q).astype(np.int64)
        total = int(a.sum())
        signed = abs(int(np.rint(nonzero * q).astype(np.int64).sum()))
        # a value within the tolerance of 0 (rounding residue, not a grid point) is no grid value: bounds
        if np.all(a > 0) and n * max(1, (total - signed) // 2) <= budget:
            # the tolerance only ever admits the observed value itself (grid steps are >= 1/q >> tol)
            (p,) = _two_sided_tails(a, [float(signed)])
            return Resolution(p, p, p, "exact", f"1/{q}", sp)
    # rounded grid h: table length ~ sum|d| / (2h) entries, n of them
    h = max(float(mag.sum()) * n / (2.0 * budget), 1e-12)
    a = np.rint(mag / h).astype(np.int64)
    slack = float(np.abs(mag - h * a).sum())
    keep = a > 0
    a = a[keep]
    if len(a) == 0:
        return Resolution(sp, 0.0, 1.0, "bounded", f"h={h:.3g}", sp)
    margin = 1e-12 * float(mag.sum())        # rounding of the sums themselves, outward
    low, high = _two_sided_tails(a, [(observed + slack + margin) / h, (observed - slack - margin) / h])
    rounding = (len(a) + 192) * 2.0 ** -53              # the tables' and sums' relative rounding, outward
    low, high = low * (1.0 - rounding), min(1.0, high * (1.0 + rounding))
    # zero a_i (|d_i| < h/2) still flip: they are part of the slack, not of Y
    p = min(max(sp, low), high)
    return Resolution(p, low, high, "bounded", f"h={h:.3g}", sp)
