"""Averages over several datasets (BEIR average, MIRACL over languages, C-MTEB) and their tests.

The reported numbers are always **macro** averages: the mean over datasets of each
dataset's mean score, so every dataset counts once whatever its size.
``delta`` is the difference of the two macro averages.

Significance of an aggregate is computed by one of two stated methods:

* ``pooled`` (default): the configured paired test on the per-query differences of
  all datasets concatenated (n = total queries).  Its null hypothesis is "no
  difference on the average query of the pooled collection"; with many queries it
  is far more powerful than testing a handful of dataset means.  The confidence
  interval is a stratified percentile bootstrap of the macro delta itself
  (queries resampled within each dataset), so the interval is about the number in
  the table.  Effect size and win/tie/loss are over the pooled queries.
* ``macro``: the configured paired test on the per-dataset mean scores
  (n = number of datasets).  The interval resamples datasets; effect size and
  win/tie/loss count datasets.  Honest about dataset-level variation, but has
  little power with few datasets (the exact randomization test over 5 datasets
  cannot go below p = 1/16).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from harness.errors import ConfigError
from harness.stats import paired, shared
from harness.stats.align import PairedScores
from harness.stats.compare import (
    CI_METHOD,
    DEFAULT_OPTIONS,
    Comparison,
    StatsOptions,
    named_tests,
)
from harness.stats.seeds import draws_rng

AGGREGATE_METHODS = ("pooled", "macro")
AGGREGATE_DESCRIPTIONS = {
    "pooled": "macro average over datasets; significance by the paired test on all per-query differences "
              "pooled over the datasets; CI by stratified bootstrap of the macro delta",
    "macro": "macro average over datasets; significance by the paired test on per-dataset mean scores "
             "(n = datasets); CI by bootstrap over datasets",
}


def stratified_bootstrap_deltas(diffs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap distribution of the macro mean difference, resampling queries within each dataset."""
    return stratified_bootstrap_many([d[None, :] for d in diffs], resamples, rng)[0]


def stratified_bootstrap_many(diffs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """As :func:`stratified_bootstrap_deltas` for k systems at once: ``diffs[d]`` is (k x n_d); returns (k x B)."""
    total = np.zeros((len(diffs[0]), resamples), dtype=np.float64)
    for diff in diffs:
        total += shared.bootstrap_means(diff, resamples=resamples, rng=rng)
    return total / len(diffs)


def compare_aggregate_group(pairs: Mapping[str, Mapping[str, PairedScores]], *, name: str, metric: str,
                            baseline: str, method: str = "pooled", options: StatsOptions = DEFAULT_OPTIONS,
                            resamples: int | None = None) -> dict[str, Comparison]:
    """Every system of ``pairs`` (``{system: {dataset: scores}}``) on the macro average over the datasets.

    Draws are shared by all systems with the same per-dataset query counts (see
    :func:`harness.stats.compare.compare_group`).
    """
    if method not in AGGREGATE_METHODS:
        raise ConfigError(f"unknown aggregate method {method!r}; choose one of {', '.join(AGGREGATE_METHODS)}")
    if not pairs or any(not per_ds for per_ds in pairs.values()):
        raise ConfigError(f"aggregate {name!r} has no datasets")
    test_b = resamples or options.resamples
    datasets = tuple(next(iter(pairs.values())))
    scope = ("aggregate", name, method, "|".join(datasets), metric)
    shapes = {s: np.array([pairs[s][d].n for d in datasets]) for s in pairs}
    out: dict[str, Comparison] = {}
    for group in _same_shapes(list(pairs), shapes):   # draws are shared per per-dataset query counts
        out.update(_aggregate_group({s: pairs[s] for s in group}, datasets, scope, name=name, metric=metric,
                                    baseline=baseline, method=method, options=options, test_b=test_b))
    return {s: out[s] for s in pairs}


def _same_shapes(systems: list[str], shapes: Mapping[str, np.ndarray]) -> list[list[str]]:
    groups: dict[tuple[int, ...], list[str]] = {}
    for s in systems:
        groups.setdefault(tuple(shapes[s].tolist()), []).append(s)
    return list(groups.values())


def _aggregate_group(pairs: Mapping[str, Mapping[str, PairedScores]], datasets: tuple[str, ...],
                     scope: tuple[str, ...], *, name: str, metric: str, baseline: str, method: str,
                     options: StatsOptions, test_b: int) -> dict[str, Comparison]:
    systems = list(pairs)
    first = pairs[systems[0]]
    n_per = [first[d].n for d in datasets]
    base_means = {s: np.array([pairs[s][d].base.mean() for d in datasets]) for s in systems}
    sys_means = {s: np.array([pairs[s][d].system.mean() for d in datasets]) for s in systems}
    ci_rng = draws_rng(options.seed, "ci", (*scope, *map(str, n_per)), sum(n_per))
    if method == "pooled":
        bases = {s: np.concatenate([pairs[s][d].base for d in datasets]) for s in systems}
        syss = {s: np.concatenate([pairs[s][d].system for d in datasets]) for s in systems}
        boots = stratified_bootstrap_many([np.stack([pairs[s][d].diff for s in systems]) for d in datasets],
                                          options.resamples, ci_rng)
    else:
        bases, syss = base_means, sys_means
        boots = shared.bootstrap_means(np.stack([sys_means[s] - base_means[s] for s in systems]),
                                       resamples=options.resamples, rng=ci_rng)
    diffs = np.stack([syss[s] - bases[s] for s in systems])
    test_rng = draws_rng(options.seed, "test", (*scope, *map(str, n_per)), diffs.shape[1])
    results = named_tests(systems, diffs, options, test_b, test_rng, baseline=baseline, metric=metric,
                          where=f"{name} ({method} aggregate)")
    out = {}
    for s, result, boot in zip(systems, results, boots):
        base, sys_ = bases[s], syss[s]
        ci_low, ci_high = paired.percentile_interval(boot, options.ci_level)
        wins, ties, losses = paired.win_tie_loss(base, sys_)
        mean_base, mean = float(base_means[s].mean()), float(sys_means[s].mean())
        out[s] = Comparison(
            metric=metric, system=s, baseline=baseline, test=options.test, n=len(base),
            mean_base=mean_base, mean=mean, delta=mean - mean_base,
            p_value=result.p_value, p_adjusted=result.p_value, ci_low=ci_low, ci_high=ci_high,
            effect_size=paired.effect_size(base, sys_), wins=wins, ties=ties, losses=losses,
            dataset=name, statistic=result.statistic, test_method=f"{method}: {result.method}",
            ci_level=options.ci_level,
            ci_method=("stratified " if method == "pooled" else "dataset-level ") + CI_METHOD,
            aggregate=method, datasets=datasets, missing=options.missing,
            missing_in_base=sum(p.missing_in_base for p in pairs[s].values()),
            missing_in_system=sum(p.missing_in_system for p in pairs[s].values()),
            seed=options.seed, resamples=result.resamples or options.resamples,
        )
    return out


def compare_aggregate(pairs: Mapping[str, PairedScores], *, name: str, metric: str, system: str, baseline: str,
                      method: str = "pooled", options: StatsOptions = DEFAULT_OPTIONS,
                      resamples: int | None = None) -> Comparison:
    """Compare ``system`` with ``baseline`` on the macro average of ``metric`` over ``pairs``' datasets."""
    if not pairs:
        raise ConfigError(f"aggregate {name!r} has no datasets")
    return compare_aggregate_group({system: pairs}, name=name, metric=metric, baseline=baseline, method=method,
                                   options=options, resamples=resamples)[system]
