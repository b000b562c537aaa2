"""Speed of the resampling tests, each against a reference measured in the same run.

References: scipy.stats.permutation_test (sign flips, ``permutation_type="samples"``)
and scipy.stats.bootstrap (percentile), and a vectorised brute-force enumeration
for the exact test.  Each benchmark also checks that the two agree.

Timing (tests/train/benchutil.py): rounds interleaved (the reference in pedantic's untimed ``setup``),
both sides in process CPU seconds with BLAS on one thread, and the bound is on the median of the
per-round ratios ours / reference, so other processes' load neither slows one side alone nor adds
to either side's time.  The bounds and the spread they leave are in each test's comment.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from benchutil import one_thread_each, paired_rounds
from scipy import stats

from harness.stats import bootstrap_ci, randomization_test

pytestmark = pytest.mark.benchmark
ROUNDS = 7
# Cost bounds, ours / reference (median round).  See the report for the measured medians and spreads.
BOUND_EXACT = 0.1
BOUND_MONTE_CARLO = 0.1
BOUND_BOOTSTRAP = 1.0


def _paired(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.random(n)
    return base, np.clip(base + rng.normal(0.01, 0.2, n), 0, 1)


def test_exact_randomization_vs_brute_force(benchmark):
    n = 18
    base, system = _paired(n)
    d = system - base

    def brute():
        signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
        return float(np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-9 * np.abs(d).sum()))

    with one_thread_each():
        times = paired_rounds(benchmark, brute, lambda: randomization_test(base, system, exact=True).p_value,
                              ROUNDS)
    times.report(benchmark, "exact randomization test vs brute-force enumeration (n=18)")
    assert times.result == brute()
    times.assert_at_most(BOUND_EXACT, "exact test / brute force")


def test_monte_carlo_randomization_vs_scipy(benchmark):
    base, system = _paired(300)
    resamples = 10_000

    def scipy_p():
        return stats.permutation_test((system - base,), lambda x, axis: np.mean(x, axis=axis),
                                      permutation_type="samples", n_resamples=resamples,
                                      alternative="two-sided", random_state=1).pvalue

    with one_thread_each():
        times = paired_rounds(benchmark, scipy_p,
                              lambda: randomization_test(base, system, resamples=resamples, seed=1).p_value, ROUNDS)
    times.report(benchmark, "Monte Carlo randomization test vs scipy.stats.permutation_test (n=300, 10k)")
    ours, ref_p = times.result, scipy_p()
    benchmark.extra_info["scipy_p"] = float(ref_p)
    se = math.sqrt(2 * ours * (1 - ours) / resamples)      # two independent Monte Carlo estimates
    assert abs(ours - ref_p) <= 4 * se
    times.assert_at_most(BOUND_MONTE_CARLO, "randomization test / scipy permutation_test")


def test_bootstrap_ci_vs_scipy(benchmark):
    base, system = _paired(300)

    def scipy_ci():
        res = stats.bootstrap((system - base,), np.mean, n_resamples=10_000, method="percentile", random_state=1)
        return res.confidence_interval.low, res.confidence_interval.high

    with one_thread_each():
        times = paired_rounds(benchmark, scipy_ci, lambda: bootstrap_ci(base, system, resamples=10_000, seed=1),
                              ROUNDS)
    times.report(benchmark, "bootstrap CI vs scipy.stats.bootstrap (n=300, 10k)")
    assert times.result == pytest.approx(scipy_ci(), abs=0.002)  # two Monte Carlo estimates of the same interval
    times.assert_at_most(BOUND_BOOTSTRAP, "bootstrap_ci / scipy bootstrap")

