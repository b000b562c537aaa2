"""Replicates (the seeds axis of a suite): one system trained with several seeds.

A system with replicates is compared with the baseline on its **per-query scores
averaged over the seeds** (:func:`average_replicates`): the paired test then runs
on n = queries as for a single run, its statistic is the difference of the
seed-averaged means (the number the table prints), and run-to-run variation enters
through the averaged scores rather than as a separate factor.  This is the test
stated in the tables' notes (:data:`REPLICATE_TEST_NOTE`).  The spread shown next
to the mean is the sample standard deviation (ddof 1) over the replicates' own
means (:func:`replicate_spread`), for an aggregate over each replicate's macro
average (nested aggregates averaged first).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats import shared
from harness.stats.paired import percentile_interval
from harness.stats.seeds import draws_rng

REPLICATE_TEST_NOTE = ("Rows with replicates show the mean ± sd (ddof 1) over the seeds of each seed's mean "
                       "score; their significance test is the suite's paired test on the per-query scores "
                       "averaged over the seeds (n = queries).")


def _evaluation(value: Any) -> EvaluationResult:
    evaluation = getattr(value, "evaluation", value)
    if not isinstance(evaluation, EvaluationResult):
        raise ConfigError(f"expected an EvaluationResult or a stored result, got {type(value).__name__}")
    return evaluation


def average_replicates(runs: Sequence[Any], what: str = "replicates") -> EvaluationResult:
    """The per-query mean over ``runs`` (EvaluationResults or stored results) of every metric they share.

    Every replicate must score the same queries (they are evaluated under one protocol card); a
    difference is a ConfigError naming it rather than a silent subset."""
    if not runs:
        raise ConfigError(f"{what}: no replicate results to average")
    evals = [_evaluation(r) for r in runs]
    ids = list(evals[0].query_ids)
    order = {q: i for i, q in enumerate(ids)}
    metrics = [m for m in evals[0].per_query if all(m in e.per_query for e in evals)]
    sums = {m: np.zeros(len(ids), dtype=np.float64) for m in metrics}
    for k, e in enumerate(evals):
        if set(e.query_ids) != set(ids) or len(e.query_ids) != len(ids):
            raise ConfigError(f"{what}: replicate {k + 1} scored other queries than replicate 1 "
                              f"({len(e.query_ids)} vs {len(ids)}); replicates must share the protocol card")
        index = np.fromiter((order[q] for q in e.query_ids), dtype=np.int64, count=len(ids))
        for m in metrics:
            sums[m][index] += e.per_query[m]
    options = dict(evals[0].options)
    options["replicates"] = len(evals)
    return EvaluationResult(ids, {m: v / len(evals) for m, v in sums.items()}, options=options)


def replicate_means(runs: Sequence[Any], metric: str) -> np.ndarray:
    """Each replicate's mean score of ``metric``."""
    return np.array([float(np.mean(_evaluation(r).per_query[metric])) for r in runs], dtype=np.float64)


def aggregate_replicate_means(runs_by_dataset: Mapping[str, Sequence[Any]], metric: str,
                              aggregates: Mapping[str, Sequence[str]], name: str) -> np.ndarray:
    """Each replicate's macro average of ``metric`` over aggregate ``name`` (members that are aggregates
    themselves are averaged first, as in the table)."""
    def value(member: str) -> np.ndarray:
        if member in aggregates:
            return np.mean(np.stack([value(m) for m in aggregates[member]]), axis=0)
        if member not in runs_by_dataset:
            raise ConfigError(f"aggregate {name!r}: no replicate results for {member!r}")
        return replicate_means(runs_by_dataset[member], metric)

    return value(name)


def replicate_spread(means: np.ndarray) -> tuple[float, float]:
    """``(mean, sample sd)`` of the replicates' means (sd NaN for a single replicate)."""
    means = np.asarray(means, dtype=np.float64)
    sd = float(np.std(means, ddof=1)) if len(means) > 1 else float("nan")
    return float(np.mean(means)), sd


def leaf_weights(name: str, aggregates: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """The weight of every benchmark in the (nested) macro average ``name``; a benchmark weighs 1 alone."""
    if name not in aggregates:
        return {name: 1.0}
    members = list(aggregates[name])
    out: dict[str, float] = {}
    for member in members:
        for leaf, weight in leaf_weights(member, aggregates).items():
            out[leaf] = out.get(leaf, 0.0) + weight / len(members)
    return out


def weighted_mean_ci(scores: Mapping[str, np.ndarray], weights: Mapping[str, float], *, level: float = 0.95,
                     resamples: int = 2000, seed: int = 0, scope: Sequence[object] = ()) -> tuple[float, float, float]:
    """``(value, low, high)``: the weighted macro mean ``sum_d w_d mean(scores_d)`` and its percentile
    bootstrap interval, queries resampled within each dataset (stratified; one dataset: the plain
    bootstrap CI of the mean).  Draws come from :func:`harness.stats.seeds.draws_rng` keyed by ``scope``,
    so the same scores always give the same interval."""
    names = list(weights)
    arrays = [np.asarray(scores[d], dtype=np.float64) for d in names]
    if any(len(a) == 0 for a in arrays):
        raise ConfigError(f"no per-query scores for {', '.join(d for d, a in zip(names, arrays) if not len(a))}")
    value = float(sum(weights[d] * a.mean() for d, a in zip(names, arrays)))
    rng = draws_rng(seed, "ci", ("mean", *scope, *names), sum(len(a) for a in arrays))
    boot = np.zeros(resamples, dtype=np.float64)
    for d, a in zip(names, arrays):
        boot += weights[d] * shared.bootstrap_means(a[None, :], resamples=resamples, rng=rng)[0]
    low, high = percentile_interval(boot, level)
    return value, float(low), float(high)
