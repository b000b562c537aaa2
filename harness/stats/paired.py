"""Paired tests on per-query scores of two systems over the same queries.

All functions take ``base`` and ``system`` as equal-length arrays aligned by query
(see :mod:`harness.stats.align`) and work on the per-query differences
``d = system - base``.  Every test is two-sided.

* :func:`paired_ttest`: Student's paired t-test, computed by
  :func:`scipy.stats.ttest_rel`.  Degenerate inputs that scipy answers with NaN
  are decided explicitly: all differences zero gives ``t = 0, p = 1``; a constant
  non-zero difference gives ``t = ±inf, p = 0`` (the limit of the statistic).
* :func:`randomization_test`: the paired randomization (sign-flip) test on the mean
  difference.  Exact when the number of non-zero differences is at most
  ``exact_max_n`` (default 30; all 2^n sign vectors, enumerated by meet-in-the-middle, so
  exact stays cheap up to n ~ 40); otherwise Monte Carlo with ``resamples`` random
  sign vectors and ``p = (count + 1) / (B + 1)``.
* :func:`bootstrap_ci`: percentile bootstrap interval of the mean difference
  (resampling queries with replacement; quantiles linearly interpolated).
* :func:`bootstrap_test`: bootstrap p-value by the shift method: the bootstrap
  distribution of the mean, centred on the observed mean, is the null
  distribution; ``p = (count + 1) / (B + 1)``.

Resampling draws come from a :class:`numpy.random.Generator` or an integer seed;
draws are made in blocks whose size depends only on ``n`` (:mod:`harness.stats.draws`),
so results are identical on every machine for the same seed, and the same code
serves many systems at once (:mod:`harness.stats.shared`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy_stats

from harness.errors import HarnessError
from harness.stats import draws

# Exact enumeration is used up to this many non-zero differences by default (2 x 2^15
# partial sums: well under a millisecond, and free of Monte Carlo error).
DEFAULT_EXACT_MAX_N = 30
# Hard limit for exact enumeration (2 x 2^(n/2) partial sums held in memory).
_EXACT_HARD_LIMIT = 44
DEFAULT_RESAMPLES = 10_000


class StatisticsError(HarnessError, ValueError):
    """Inputs a test cannot handle (unpaired lengths, too few queries, non-finite scores...)."""


@dataclass(frozen=True)
class TestResult:
    """Outcome of one two-sided paired test."""

    statistic: float          # t for the t-test; the observed mean difference for resampling tests
    p_value: float
    method: str               # human-readable, e.g. "randomization (exact, 2^12 sign vectors)"
    exact: bool | None = None
    resamples: int | None = None


def differences(base, system) -> np.ndarray:
    """``system - base`` as float64, after checking the two arrays are paired."""
    base = np.asarray(base, dtype=np.float64).reshape(-1)
    system = np.asarray(system, dtype=np.float64).reshape(-1)
    if base.shape != system.shape:
        raise StatisticsError(f"paired scores differ in length: {len(base)} baseline vs {len(system)} system")
    if len(base) == 0:
        raise StatisticsError("no paired queries to compare")
    diff = system - base
    if not np.all(np.isfinite(diff)):
        raise StatisticsError("per-query scores must be finite")
    return diff


def _generator(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.Generator(np.random.PCG64(seed))


def tolerance(diff: np.ndarray) -> float:
    # Equal statistics computed in different summation orders differ by rounding
    # only; count them as "at least as extreme".  1e-9 of the total absolute
    # difference is far below any real score difference and far above rounding.
    return 1e-9 * float(np.abs(diff).sum())


def paired_ttest(base, system) -> TestResult:
    """Two-sided paired t-test; equals ``scipy.stats.ttest_rel(system, base)`` where that is defined."""
    diff = differences(base, system)
    if len(diff) < 2:
        raise StatisticsError("the paired t-test needs at least 2 queries")
    if np.all(diff == diff[0]):
        if diff[0] == 0.0:
            return TestResult(0.0, 1.0, "paired t-test (all differences zero)")
        return TestResult(math.copysign(math.inf, diff[0]), 0.0, "paired t-test (constant difference)")
    system = np.asarray(system, dtype=np.float64).reshape(-1)
    base = np.asarray(base, dtype=np.float64).reshape(-1)
    res = _scipy_stats.ttest_rel(system, base)
    return TestResult(float(res.statistic), float(res.pvalue), "paired t-test")


def _subset_sums(values: np.ndarray) -> np.ndarray:
    """All 2^len(values) signed sums ``sum(s_i * v_i)`` with ``s_i in {+1, -1}``."""
    sums = np.zeros(1, dtype=np.float64)
    for v in values:
        sums = np.concatenate((sums + v, sums - v))
    return sums


def _exact_sign_flip_count(nonzero: np.ndarray, threshold: float) -> int:
    """Number of sign vectors whose |signed sum| >= threshold (> 0), by meet-in-the-middle."""
    half = len(nonzero) // 2
    left = _subset_sums(nonzero[:half])
    right = np.sort(_subset_sums(nonzero[half:]))
    # |l + r| >= t  <=>  r >= t - l  or  r <= -t - l  (disjoint because t > 0)
    upper = len(right) - np.searchsorted(right, threshold - left, side="left")
    lower = np.searchsorted(right, -threshold - left, side="right")
    return int(upper.sum() + lower.sum())


def randomization_test(base, system, *, resamples: int = DEFAULT_RESAMPLES, seed=0,
                       exact: bool | None = None, exact_max_n: int = DEFAULT_EXACT_MAX_N) -> TestResult:
    """Two-sided paired randomization (sign-flip) test of the mean difference.

    ``exact=None`` enumerates all sign vectors when at most ``exact_max_n`` differences
    are non-zero (zero differences do not change under a sign flip, so they are left
    out of the enumeration without changing p) and uses Monte Carlo otherwise;
    ``exact=True``/``False`` forces the mode.  The Monte Carlo estimate is
    ``(count + 1) / (B + 1)``, which counts the observed assignment and is never 0.
    """
    diff = differences(base, system)
    observed = float(diff.mean())
    threshold = abs(float(diff.sum())) - tolerance(diff)
    nonzero = diff[diff != 0.0]
    use_exact = len(nonzero) <= exact_max_n if exact is None else exact
    if use_exact:
        if len(nonzero) > _EXACT_HARD_LIMIT:
            raise StatisticsError(f"exact enumeration of 2^{len(nonzero)} sign vectors is too large; use Monte Carlo")
        method = f"randomization (exact, 2^{len(nonzero)} sign vectors)"
        if threshold <= 0.0:
            return TestResult(observed, 1.0, method, exact=True)
        count = _exact_sign_flip_count(nonzero, threshold)
        return TestResult(observed, count / 2.0 ** len(nonzero), method, exact=True)
    if resamples < 1:
        raise StatisticsError(f"resamples must be positive, got {resamples}")
    count = int(draws.sign_flip_counts(diff[None, :], np.array([threshold]), resamples, _generator(seed))[0])
    method = f"randomization (Monte Carlo, B={resamples})"
    return TestResult(observed, (count + 1) / (resamples + 1), method, exact=False, resamples=resamples)


def bootstrap_means(diff: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``resamples`` bootstrap resamples of ``diff`` (queries drawn with replacement)."""
    return draws.bootstrap_means(np.asarray(diff, dtype=np.float64)[None, :], resamples, rng)[0]


def percentile_interval(means: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of bootstrap means (linearly interpolated quantiles)."""
    if not 0.0 < level < 1.0:
        raise StatisticsError(f"confidence level must be in (0, 1), got {level}")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_ci(base, system, *, level: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                 seed=0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean difference ``system - base``."""
    diff = differences(base, system)
    if resamples < 1:
        raise StatisticsError(f"resamples must be positive, got {resamples}")
    return percentile_interval(bootstrap_means(diff, resamples, _generator(seed)), level)


def bootstrap_test(base, system, *, resamples: int = DEFAULT_RESAMPLES, seed=0) -> TestResult:
    """Two-sided paired bootstrap test (shift method) of a zero mean difference."""
    diff = differences(base, system)
    if resamples < 1:
        raise StatisticsError(f"resamples must be positive, got {resamples}")
    observed = float(diff.mean())
    means = bootstrap_means(diff, resamples, _generator(seed))
    threshold = abs(observed) - tolerance(diff) / len(diff)
    count = int(np.count_nonzero(np.abs(means - observed) >= threshold))
    return TestResult(observed, (count + 1) / (resamples + 1), f"bootstrap (shift method, B={resamples})",
                      exact=False, resamples=resamples)


def effect_size(base, system) -> float:
    """Cohen's d_z: mean difference over the standard deviation of differences (ddof=1).

    NaN for a single query; 0 when every difference is zero; ±inf for a constant
    non-zero difference.
    """
    diff = differences(base, system)
    if len(diff) < 2:
        return math.nan
    mean = float(diff.mean())
    sd = float(diff.std(ddof=1))
    if sd == 0.0 or np.all(diff == diff[0]):
        return 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    return mean / sd


def win_tie_loss(base, system) -> tuple[int, int, int]:
    """Queries where the system scores higher, equal (exactly), lower than the baseline."""
    diff = differences(base, system)
    wins = int(np.count_nonzero(diff > 0))
    losses = int(np.count_nonzero(diff < 0))
    return wins, len(diff) - wins - losses, losses
