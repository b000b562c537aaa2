"""One comparison (system vs baseline on one metric) and its result record.

:func:`compare_pair` runs the chosen paired test, the bootstrap confidence
interval, the effect size and win/tie/loss counts on aligned per-query scores.
:func:`compare_aggregate` does the same for an average over several datasets
(see :mod:`harness.stats.aggregate` for the methods).  Each comparison draws from
its own random stream, derived from the seed and the comparison's key
(:mod:`harness.stats.seeds`), so adding comparisons never changes the others.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.stats import paired
from harness.stats.align import MISSING_POLICIES, PairedScores
from harness.stats.seeds import comparison_rng

TESTS = ("ttest", "randomization", "bootstrap")
TEST_NAMES = {
    "ttest": "two-sided paired t-test",
    "randomization": "two-sided paired randomization (sign-flip) test",
    "bootstrap": "two-sided paired bootstrap test (shift method)",
}
CI_METHOD = "percentile bootstrap"


@dataclass(frozen=True)
class StatsOptions:
    """Every setting that changes a p-value or interval; recorded with the results."""

    test: str = "ttest"
    resamples: int = paired.DEFAULT_RESAMPLES   # Monte Carlo sign flips and bootstrap resamples
    seed: int = 0
    ci_level: float = 0.95
    exact_max_n: int = paired.DEFAULT_EXACT_MAX_N
    missing: str = "error"

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise ConfigError(f"unknown test {self.test!r}; choose one of {', '.join(TESTS)}")
        if self.missing not in MISSING_POLICIES:
            raise ConfigError(f"unknown missing-query policy {self.missing!r}; choose one of "
                              f"{', '.join(MISSING_POLICIES)}")
        if int(self.resamples) < 1:
            raise ConfigError(f"resamples must be positive, got {self.resamples}")
        if not 0.0 < float(self.ci_level) < 1.0:
            raise ConfigError(f"ci_level must be in (0, 1), got {self.ci_level}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {self.seed!r}")

    def describe(self) -> str:
        text = TEST_NAMES[self.test]
        if self.test == "randomization":
            text += (f" (exact when at most {self.exact_max_n} non-zero differences, otherwise Monte Carlo "
                     f"with B={self.resamples}, p=(count+1)/(B+1))")
        elif self.test == "bootstrap":
            text += f" (B={self.resamples})"
        return (f"{text}; {self.ci_level:.0%} {CI_METHOD} CI of the mean difference (B={self.resamples}); "
                f"seed {self.seed}; missing queries: {self.missing}")


DEFAULT_OPTIONS = StatsOptions()


@dataclass
class Comparison:
    """System vs baseline on one metric (and dataset, or aggregate over datasets)."""

    metric: str
    system: str
    baseline: str
    test: str
    n: int                      # paired queries (datasets for a macro aggregate)
    mean_base: float
    mean: float
    delta: float                # mean - mean_base
    p_value: float
    p_adjusted: float
    ci_low: float
    ci_high: float
    effect_size: float          # Cohen's d_z
    wins: int
    ties: int
    losses: int
    dataset: str | None = None
    statistic: float = math.nan
    test_method: str = ""
    ci_level: float = 0.95
    ci_method: str = CI_METHOD
    correction: str = "none"
    family: str = ""
    family_size: int = 1
    aggregate: str | None = None        # None, or "pooled"/"macro" for an average over datasets
    datasets: tuple[str, ...] = ()      # the datasets of an aggregate
    missing: str = "error"
    missing_in_base: int = 0
    missing_in_system: int = 0
    seed: int | None = None
    resamples: int | None = None

    def significant(self, alpha: float) -> bool:
        """Whether the corrected p-value is below ``alpha``."""
        return self.p_adjusted < alpha

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; non-finite numbers (e.g. d_z of a constant difference) become ``None``."""
        out = asdict(self)
        out["datasets"] = list(self.datasets)
        return {k: _json_safe(v) for k, v in out.items()}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _key(dataset: str | None, metric: str, baseline: str, system: str, purpose: str) -> tuple[str, ...]:
    return (purpose, dataset or "", metric, baseline, system)


@contextlib.contextmanager
def comparison_context(system: str, baseline: str, metric: str, dataset: str | None) -> Iterator[None]:
    """Re-raise a :class:`StatisticsError` with the comparison it belongs to."""
    try:
        yield
    except paired.StatisticsError as exc:
        where = f" on {dataset}" if dataset else ""
        raise paired.StatisticsError(f"{system} vs {baseline}, {metric}{where}: {exc}") from None


def run_test(base: np.ndarray, system: np.ndarray, options: StatsOptions,
             rng: np.random.Generator) -> paired.TestResult:
    """The configured test on paired arrays."""
    if options.test == "ttest":
        return paired.paired_ttest(base, system)
    if options.test == "randomization":
        return paired.randomization_test(base, system, resamples=options.resamples, seed=rng,
                                         exact_max_n=options.exact_max_n)
    return paired.bootstrap_test(base, system, resamples=options.resamples, seed=rng)


def compare_pair(scores: PairedScores, *, metric: str, system: str, baseline: str,
                 dataset: str | None = None, options: StatsOptions = DEFAULT_OPTIONS) -> Comparison:
    """Test, interval, effect size and win/tie/loss for one system vs the baseline."""
    test_rng = comparison_rng(options.seed, _key(dataset, metric, baseline, system, "test"))
    ci_rng = comparison_rng(options.seed, _key(dataset, metric, baseline, system, "ci"))
    with comparison_context(system, baseline, metric, dataset):
        result = run_test(scores.base, scores.system, options, test_rng)
    ci_low, ci_high = paired.percentile_interval(
        paired.bootstrap_means(scores.diff, options.resamples, ci_rng), options.ci_level)
    wins, ties, losses = paired.win_tie_loss(scores.base, scores.system)
    mean_base, mean = float(scores.base.mean()), float(scores.system.mean())
    return Comparison(
        metric=metric, system=system, baseline=baseline, test=options.test, n=scores.n,
        mean_base=mean_base, mean=mean, delta=mean - mean_base,
        p_value=result.p_value, p_adjusted=result.p_value, ci_low=ci_low, ci_high=ci_high,
        effect_size=paired.effect_size(scores.base, scores.system), wins=wins, ties=ties, losses=losses,
        dataset=dataset, statistic=result.statistic, test_method=result.method, ci_level=options.ci_level,
        missing=options.missing, missing_in_base=scores.missing_in_base,
        missing_in_system=scores.missing_in_system, seed=options.seed, resamples=options.resamples,
    )
