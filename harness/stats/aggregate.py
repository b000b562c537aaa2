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
from harness.stats import paired
from harness.stats.align import PairedScores
from harness.stats.compare import CI_METHOD, DEFAULT_OPTIONS, Comparison, StatsOptions, comparison_context, run_test
from harness.stats.seeds import comparison_rng

AGGREGATE_METHODS = ("pooled", "macro")
AGGREGATE_DESCRIPTIONS = {
    "pooled": "macro average over datasets; significance by the paired test on all per-query differences "
              "pooled over the datasets; CI by stratified bootstrap of the macro delta",
    "macro": "macro average over datasets; significance by the paired test on per-dataset mean scores "
             "(n = datasets); CI by bootstrap over datasets",
}


def stratified_bootstrap_deltas(diffs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap distribution of the macro mean difference, resampling queries within each dataset."""
    total = np.zeros(resamples, dtype=np.float64)
    for diff in diffs:
        total += paired.bootstrap_means(diff, resamples, rng)
    return total / len(diffs)


def compare_aggregate(pairs: Mapping[str, PairedScores], *, name: str, metric: str, system: str, baseline: str,
                      method: str = "pooled", options: StatsOptions = DEFAULT_OPTIONS) -> Comparison:
    """Compare ``system`` with ``baseline`` on the macro average of ``metric`` over ``pairs``' datasets."""
    if method not in AGGREGATE_METHODS:
        raise ConfigError(f"unknown aggregate method {method!r}; choose one of {', '.join(AGGREGATE_METHODS)}")
    if not pairs:
        raise ConfigError(f"aggregate {name!r} has no datasets")
    datasets = tuple(pairs)
    base_means = np.array([pairs[d].base.mean() for d in datasets])
    sys_means = np.array([pairs[d].system.mean() for d in datasets])
    key = (name, metric, baseline, system, "|".join(datasets), method)
    test_rng = comparison_rng(options.seed, ("aggregate-test", *key))
    ci_rng = comparison_rng(options.seed, ("aggregate-ci", *key))
    if method == "pooled":
        base = np.concatenate([pairs[d].base for d in datasets])
        sys_ = np.concatenate([pairs[d].system for d in datasets])
        boot = stratified_bootstrap_deltas([pairs[d].diff for d in datasets], options.resamples, ci_rng)
    else:
        base, sys_ = base_means, sys_means
        boot = paired.bootstrap_means(sys_means - base_means, options.resamples, ci_rng)
    with comparison_context(system, baseline, metric, f"{name} ({method} aggregate)"):
        result = run_test(base, sys_, options, test_rng)
    ci_low, ci_high = paired.percentile_interval(boot, options.ci_level)
    wins, ties, losses = paired.win_tie_loss(base, sys_)
    mean_base, mean = float(base_means.mean()), float(sys_means.mean())
    return Comparison(
        metric=metric, system=system, baseline=baseline, test=options.test, n=len(base),
        mean_base=mean_base, mean=mean, delta=mean - mean_base,
        p_value=result.p_value, p_adjusted=result.p_value, ci_low=ci_low, ci_high=ci_high,
        effect_size=paired.effect_size(base, sys_), wins=wins, ties=ties, losses=losses,
        dataset=name, statistic=result.statistic, test_method=f"{method}: {result.method}",
        ci_level=options.ci_level,
        ci_method=("stratified " if method == "pooled" else "dataset-level ") + CI_METHOD,
        aggregate=method, datasets=datasets, missing=options.missing,
        missing_in_base=sum(p.missing_in_base for p in pairs.values()),
        missing_in_system=sum(p.missing_in_system for p in pairs.values()),
        seed=options.seed, resamples=options.resamples,
    )
