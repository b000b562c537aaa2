"""Resampling tests of many systems against one baseline from one shared set of draws.

Every system compared with the same baseline on the same queries (one dataset
and metric, or one aggregate) is tested with the **same** sign vectors and the
same bootstrap resamples: the draws come from a stream keyed by
``(seed, purpose, dataset, metric, number of queries)`` only
(:func:`harness.stats.seeds.draws_rng`), never by the system's name.  Hence

* two systems with identical per-query scores get identical p-values, intervals
  and markers (identical difference vectors are even computed once);
* adding or removing a system never changes another system's numbers (the
  draws consumed depend only on ``n`` and ``B``, :mod:`harness.stats.draws`);
* the cost is one ``(B x n) @ (n x k)`` product per block for all ``k`` systems
  instead of ``k`` separate draws.

Exact enumeration of the randomization test is kept per system when it has at
most ``exact_max_n`` non-zero differences (no draws needed).
"""
from __future__ import annotations

import numpy as np

from harness.stats import draws, paired
from harness.stats.paired import TestResult


def _unique_rows(diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inverse = np.unique(diffs, axis=0, return_inverse=True)
    return uniq, np.asarray(inverse).reshape(-1)


def randomization_tests(diffs: np.ndarray, *, resamples: int, rng: np.random.Generator,
                        exact_max_n: int = paired.DEFAULT_EXACT_MAX_N) -> list[TestResult]:
    """Two-sided sign-flip test of each row of ``diffs`` (k x n), Monte Carlo rows sharing one set of signs."""
    uniq, inverse = _unique_rows(np.asarray(diffs, dtype=np.float64))
    out: list[TestResult | None] = [None] * len(uniq)
    monte_carlo: list[int] = []
    for i, d in enumerate(uniq):
        if np.count_nonzero(d) <= exact_max_n:
            out[i] = paired.randomization_test(np.zeros_like(d), d, exact=True)
        else:
            monte_carlo.append(i)
    if monte_carlo:
        rows = uniq[monte_carlo]
        thresholds = np.array([abs(float(d.sum())) - paired.tolerance(d) for d in rows])
        counts = draws.sign_flip_counts(rows, thresholds, resamples, rng)
        method = f"randomization (Monte Carlo, B={resamples})"
        for i, count in zip(monte_carlo, counts.tolist()):
            out[i] = TestResult(float(uniq[i].mean()), (count + 1) / (resamples + 1), method, exact=False,
                                resamples=resamples)
    return [_present(out[j]) for j in inverse]


def _present(result: TestResult | None) -> TestResult:
    assert result is not None   # every unique row was filled above
    return result


def bootstrap_means(diffs: np.ndarray, *, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap resample means (k x resamples) of each row of ``diffs`` from shared resamples."""
    uniq, inverse = _unique_rows(np.asarray(diffs, dtype=np.float64))
    return draws.bootstrap_means(uniq, resamples, rng)[inverse]


def bootstrap_tests(diffs: np.ndarray, *, resamples: int, rng: np.random.Generator) -> list[TestResult]:
    """Two-sided bootstrap test (shift method) of each row of ``diffs``, from shared resamples."""
    diffs = np.asarray(diffs, dtype=np.float64)
    means = bootstrap_means(diffs, resamples=resamples, rng=rng)
    out = []
    for d, boot in zip(diffs, means):
        observed = float(d.mean())
        threshold = abs(observed) - paired.tolerance(d) / len(d)
        count = int(np.count_nonzero(np.abs(boot - observed) >= threshold))
        out.append(TestResult(observed, (count + 1) / (resamples + 1), f"bootstrap (shift method, B={resamples})",
                              exact=False, resamples=resamples))
    return out
