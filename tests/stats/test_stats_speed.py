"""Speed of the resampling tests, each against a reference measured in the same run.

References: scipy.stats.permutation_test (sign flips, ``permutation_type="samples"``)
and scipy.stats.bootstrap (percentile), and a vectorised brute-force enumeration
for the exact test.  Each benchmark also checks that the two agree.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from harness.stats import bootstrap_ci, randomization_test

pytestmark = pytest.mark.benchmark


def _paired(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.random(n)
    return base, np.clip(base + rng.normal(0.01, 0.2, n), 0, 1)


def _best_time(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def test_exact_randomization_vs_brute_force(benchmark):
    n = 18
    base, system = _paired(n)
    d = system - base

    def brute():
        signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
        return float(np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-9 * np.abs(d).sum()))

    ref_time, ref_p = _best_time(brute, repeat=1)
    ours = benchmark(lambda: randomization_test(base, system, exact=True).p_value)
    ours_time, _ = _best_time(lambda: randomization_test(base, system, exact=True))
    benchmark.extra_info.update(reference_s=ref_time, speedup=ref_time / ours_time)
    assert ours == ref_p
    assert ours_time < ref_time


def test_monte_carlo_randomization_vs_scipy(benchmark):
    base, system = _paired(300)
    resamples = 10_000

    def scipy_p():
        return stats.permutation_test((system - base,), lambda x, axis: np.mean(x, axis=axis),
                                      permutation_type="samples", n_resamples=resamples,
                                      alternative="two-sided", random_state=1).pvalue

    ref_time, ref_p = _best_time(scipy_p, repeat=1)
    ours = benchmark(lambda: randomization_test(base, system, resamples=resamples, seed=1).p_value)
    ours_time, _ = _best_time(lambda: randomization_test(base, system, resamples=resamples, seed=1))
    benchmark.extra_info.update(reference_s=ref_time, speedup=ref_time / ours_time, scipy_p=float(ref_p))
    se = math.sqrt(2 * ours * (1 - ours) / resamples)      # two independent Monte Carlo estimates
    assert abs(ours - ref_p) <= 4 * se
    assert ours_time < ref_time


def test_bootstrap_ci_vs_scipy(benchmark):
    base, system = _paired(300)

    def scipy_ci():
        res = stats.bootstrap((system - base,), np.mean, n_resamples=10_000, method="percentile", random_state=1)
        return res.confidence_interval.low, res.confidence_interval.high

    ref_time, ref_ci = _best_time(scipy_ci, repeat=1)
    ours = benchmark(lambda: bootstrap_ci(base, system, resamples=10_000, seed=1))
    ours_time, _ = _best_time(lambda: bootstrap_ci(base, system, resamples=10_000, seed=1))
    benchmark.extra_info.update(reference_s=ref_time, speedup=ref_time / ours_time)
    assert ours == pytest.approx(ref_ci, abs=0.002)  # two Monte Carlo estimates of the same interval
