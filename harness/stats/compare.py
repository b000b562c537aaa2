"""One comparison (system vs baseline on one metric) and its result record.

:func:`compare_pair` runs the chosen paired test, the bootstrap confidence
interval, the effect size and win/tie/loss counts on aligned per-query scores.
:func:`compare_aggregate` does the same for an average over several datasets
(see :mod:`harness.stats.aggregate` for the methods).  :func:`compare_group`
tests every system compared with the baseline on one dataset and metric from one
shared set of draws (:mod:`harness.stats.shared`): the stream is keyed by seed,
dataset, metric and number of queries, never by the system, so identical scores
give identical p-values and adding systems never changes the others.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.stats import paired, shared
from harness.stats.align import MISSING_POLICIES, PairedScores
from harness.stats.floor import DEFAULT_MAX_RESAMPLES
from harness.stats.seeds import draws_rng

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
    resamples: int = paired.DEFAULT_RESAMPLES   # Monte Carlo sign flips and bootstrap resamples (at least)
    seed: int = 0
    ci_level: float = 0.95
    exact_max_n: int = paired.DEFAULT_EXACT_MAX_N
    missing: str = "error"
    # Large families raise the test's B to 20*m/alpha (harness.stats.floor), up to this cap.
    max_resamples: int = DEFAULT_MAX_RESAMPLES

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise ConfigError(f"unknown test {self.test!r}; choose one of {', '.join(TESTS)}")
        if self.missing not in MISSING_POLICIES:
            raise ConfigError(f"unknown missing-query policy {self.missing!r}; choose one of "
                              f"{', '.join(MISSING_POLICIES)}")
        if int(self.resamples) < 1:
            raise ConfigError(f"resamples must be positive, got {self.resamples}")
        if int(self.max_resamples) < int(self.resamples):
            raise ConfigError(f"max_resamples ({self.max_resamples}) is below resamples ({self.resamples})")
        if not 0.0 < float(self.ci_level) < 1.0:
            raise ConfigError(f"ci_level must be in (0, 1), got {self.ci_level}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {self.seed!r}")

    def describe(self, test_resamples: int | None = None) -> str:
        """One sentence; ``test_resamples`` is the test's B when a large family raised it."""
        b = test_resamples or self.resamples
        text = TEST_NAMES[self.test]
        if self.test == "randomization":
            text += (f" (exact when at most {self.exact_max_n} non-zero differences, otherwise Monte Carlo "
                     f"with B={b}, p=(count+1)/(B+1))")
        elif self.test == "bootstrap":
            text += f" (B={b})"
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
    # Another system whose run (or results) this one repeats: the comparison is that system's, shown again and
    # counted once in the correction family (harness.stats.suite.compare_suite's ``same_as``).
    same_as: str | None = None

    def significant(self, alpha: float) -> bool:
        """Whether the corrected p-value is below ``alpha``."""
        return self.p_adjusted < alpha

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; non-finite numbers (e.g. d_z of a constant difference) become ``None``."""
        out = asdict(self)
        out["datasets"] = list(self.datasets)
        if out["same_as"] is None:      # only where a row repeats another's run
            del out["same_as"]
        return {k: _json_safe(v) for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """The comparison :meth:`to_dict` wrote (``None`` in a float field reads back as NaN)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.type == "float" and value is None:
                value = math.nan
            elif f.name == "datasets":
                value = tuple(value or ())
            values[f.name] = value
        return cls(**values)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@contextlib.contextmanager
def comparison_context(system: str, baseline: str, metric: str, dataset: str | None) -> Iterator[None]:
    """Re-raise a :class:`StatisticsError` with the comparison it belongs to."""
    try:
        yield
    except paired.StatisticsError as exc:
        where = f" on {dataset}" if dataset else ""
        raise paired.StatisticsError(f"{system} vs {baseline}, {metric}{where}: {exc}") from None


def run_tests(diffs: np.ndarray, options: StatsOptions, resamples: int,
              rng: np.random.Generator) -> list[paired.TestResult]:
    """The configured test on each row of ``diffs`` (k x n, systems minus baseline), from shared draws."""
    if options.test == "ttest":
        # ttest_rel(system, base) is the one-sample test of system - base; zeros keep that difference exact.
        return [paired.paired_ttest(np.zeros_like(d), d) for d in diffs]
    if options.test == "randomization":
        return shared.randomization_tests(diffs, resamples=resamples, rng=rng, exact_max_n=options.exact_max_n)
    return shared.bootstrap_tests(diffs, resamples=resamples, rng=rng)


def named_tests(systems: list[str], diffs: np.ndarray, options: StatsOptions, resamples: int,
                rng: np.random.Generator, *, baseline: str, metric: str, where: str | None) -> list[paired.TestResult]:
    """:func:`run_tests` with errors naming the comparison (each system's own for the t-test)."""
    if options.test == "ttest":
        out = []
        for system, d in zip(systems, diffs):
            with comparison_context(system, baseline, metric, where):
                out.append(run_tests(d[None, :], options, resamples, rng)[0])
        return out
    with comparison_context(", ".join(systems), baseline, metric, where):
        return run_tests(diffs, options, resamples, rng)


def by_length(items: Mapping[str, np.ndarray]) -> dict[int, list[str]]:
    """Names grouped by the length of their array (draws are shared per number of queries)."""
    groups: dict[int, list[str]] = {}
    for name, arr in items.items():
        groups.setdefault(len(arr), []).append(name)
    return groups


def compare_group(pairs: Mapping[str, PairedScores], *, metric: str, baseline: str, dataset: str | None = None,
                  options: StatsOptions = DEFAULT_OPTIONS, resamples: int | None = None) -> dict[str, Comparison]:
    """Every system of ``pairs`` (``{system: scores vs the baseline}``) on one dataset and metric.

    Test draws and bootstrap-interval draws are shared by all systems with the
    same number of paired queries; ``resamples`` overrides the test's B (large
    families, :mod:`harness.stats.floor`); the interval always uses ``options.resamples``.
    """
    test_b = resamples or options.resamples
    scope = (dataset or "", metric)
    out: dict[str, Comparison] = {}
    for n, systems in by_length({s: p.diff for s, p in pairs.items()}).items():
        diffs = np.stack([pairs[s].diff for s in systems])
        results = named_tests(systems, diffs, options, test_b, draws_rng(options.seed, "test", scope, n),
                              baseline=baseline, metric=metric, where=dataset)
        boots = shared.bootstrap_means(diffs, resamples=options.resamples,
                                       rng=draws_rng(options.seed, "ci", scope, n))
        for system, result, boot in zip(systems, results, boots):
            out[system] = _comparison(pairs[system], result, boot, metric=metric, system=system,
                                      baseline=baseline, dataset=dataset, options=options)
    return {s: out[s] for s in pairs}


def _comparison(scores: PairedScores, result: paired.TestResult, boot: np.ndarray, *, metric: str, system: str,
                baseline: str, dataset: str | None, options: StatsOptions) -> Comparison:
    ci_low, ci_high = paired.percentile_interval(boot, options.ci_level)
    wins, ties, losses = paired.win_tie_loss(scores.base, scores.system)
    mean_base, mean = float(scores.base.mean()), float(scores.system.mean())
    return Comparison(
        metric=metric, system=system, baseline=baseline, test=options.test, n=scores.n,
        mean_base=mean_base, mean=mean, delta=mean - mean_base,
        p_value=result.p_value, p_adjusted=result.p_value, ci_low=ci_low, ci_high=ci_high,
        effect_size=paired.effect_size(scores.base, scores.system), wins=wins, ties=ties, losses=losses,
        dataset=dataset, statistic=result.statistic, test_method=result.method, ci_level=options.ci_level,
        missing=options.missing, missing_in_base=scores.missing_in_base,
        missing_in_system=scores.missing_in_system, seed=options.seed,
        resamples=result.resamples or options.resamples,
    )


def compare_pair(scores: PairedScores, *, metric: str, system: str, baseline: str,
                 dataset: str | None = None, options: StatsOptions = DEFAULT_OPTIONS,
                 resamples: int | None = None) -> Comparison:
    """Test, interval, effect size and win/tie/loss for one system vs the baseline.

    Equal to that system's comparison in :func:`compare_group` (same shared draws).
    """
    return compare_group({system: scores}, metric=metric, baseline=baseline, dataset=dataset, options=options,
                         resamples=resamples)[system]
