"""The Monte Carlo floor: how many resamples a family of comparisons needs.

With ``B`` Monte Carlo sign flips (or bootstrap resamples) the smallest p-value a
test can return is ``1 / (B + 1)``.  Holm and Bonferroni over a family of ``m``
comparisons at level ``alpha`` reject only when ``p <= alpha / m`` (Holm's first
step; Benjamini-Hochberg's smallest threshold is the same), so with the usual
``B = 10,000`` a family of more than ~500 comparisons can reject nothing, and
well before that the decisions depend on the draws.

**Rule.**  ``B >= 20 * m / alpha``, i.e. the floor ``1 / (B + 1)`` is at most
1/20 of ``alpha / m``; the count is the configured ``resamples`` raised to that
bound, rounded up to one significant digit (194,400 -> 200,000).  When the bound
exceeds ``max_resamples`` the run is refused with the numbers (use a smaller
family, a larger cap, or the t-test).  Decisions whose p sits so close to its
corrected threshold that Monte Carlo error could flip them (Clopper-Pearson
99.9% interval on both sides, :func:`harness.stats.suite.unsettled_decisions`)
are, for the randomization test, decided from their data alone: exact p on the
metric's grid or exact bounds, else the saddlepoint approximation
(:mod:`harness.stats.resolve`, :func:`harness.stats.suite.settle_decisions`); other
Monte Carlo decisions (bootstrap) are redrawn with 10x the resamples, up to
``max_resamples``.  Exact enumeration (few non-zero differences) and the t-test
have no floor.
"""
from __future__ import annotations

import math

from scipy import stats as _scipy_stats

from harness.errors import ConfigError

FLOOR_FACTOR = 20
DEFAULT_MAX_RESAMPLES = 2_000_000


def round_up_one_digit(value: int) -> int:
    """``value`` rounded up to one significant digit: 4000 -> 4000, 194400 -> 200000, 205200 -> 300000."""
    if value <= 1:
        return 1
    scale = 10 ** (len(str(int(value))) - 1)
    return math.ceil(value / scale) * scale


def rule_resamples(family_size: int, alpha: float) -> int:
    """The smallest ``B`` allowed by the rule ``B >= 20 m / alpha`` (before rounding)."""
    return math.ceil(FLOOR_FACTOR * family_size / alpha - 1e-9)


def resamples_for_family(family_size: int, alpha: float, resamples: int,
                         max_resamples: int = DEFAULT_MAX_RESAMPLES) -> int:
    """``B`` for a family of ``family_size`` comparisons at level ``alpha``: ``resamples`` raised to the rule."""
    needed = rule_resamples(family_size, alpha)
    if needed <= resamples:
        return resamples
    chosen = round_up_one_digit(needed)
    if chosen > max_resamples:
        raise ConfigError(
            f"a family of m={family_size} comparisons at alpha={alpha:g} needs p <= alpha/m = "
            f"{alpha / family_size:.3g}; Monte Carlo tests need B >= 20*m/alpha = {needed} resamples so that the "
            f"smallest p 1/(B+1) is well below that, above the cap of B={max_resamples}. Raise the cap "
            f"(max_resamples / --max-resamples), correct over smaller families (family 'metric' or 'dataset'), "
            f"or use the t-test")
    return chosen


def monte_carlo_bounds(p_value: float, resamples: int | None, confidence: float = 0.999) -> tuple[float, float]:
    """Clopper-Pearson interval of the true p behind a Monte Carlo ``p = (count + 1) / (B + 1)``."""
    b = int(resamples or 0)
    if b < 1:
        return p_value, p_value
    count = max(0, min(b, round(p_value * (b + 1)) - 1))
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if count == 0 else float(_scipy_stats.beta.ppf(tail, count, b - count + 1))
    high = 1.0 if count == b else float(_scipy_stats.beta.ppf(1.0 - tail, count + 1, b - count))
    return low, high


def floor_note(family_size: int, alpha: float, resamples: int, correction_name: str) -> str | None:
    """A table note for a large family (one where the rule matters), or ``None`` for a small one.

    The note names the family size and the ``B`` used, and warns when that ``B``
    does not satisfy the rule (e.g. comparisons corrected together after being
    computed separately).
    """
    needed = rule_resamples(family_size, alpha)
    threshold = alpha / family_size
    floor = 1.0 / (resamples + 1)
    if resamples >= needed:
        if needed <= 10_000:        # the default B covers it: a small family, nothing to say
            return None
        return (f"Large family: {family_size} comparisons, so {correction_name} needs p <= alpha/m = "
                f"{threshold:.3g}; Monte Carlo tests used B={resamples} resamples (rule B >= 20*m/alpha), "
                f"smallest attainable p 1/(B+1) = {floor:.3g}.")
    return (f"Warning: large family of {family_size} comparisons: {correction_name} needs p <= alpha/m = "
            f"{threshold:.3g}, but Monte Carlo tests with B={resamples} cannot go below p = 1/(B+1) = {floor:.3g} "
            f"(rule: B >= 20*m/alpha = {needed}); decisions near that floor depend on the draws.")
