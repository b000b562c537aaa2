"""Paired tests against scipy, brute-force enumeration, hand-computed values and simulation."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from harness.stats import bootstrap_ci, bootstrap_test, effect_size, paired_ttest, randomization_test, win_tie_loss


def brute_force_sign_flip_p(diff: np.ndarray) -> float:
    """Two-sided sign-flip p-value by listing every sign vector with itertools."""
    observed = abs(sum(diff))
    tol = 1e-9 * sum(abs(x) for x in diff)
    hits = 0
    for signs in itertools.product((1.0, -1.0), repeat=len(diff)):
        if abs(sum(s * x for s, x in zip(signs, diff))) >= observed - tol:
            hits += 1
    return hits / 2 ** len(diff)


# ---------------------------------------------------------------- t-test

@pytest.mark.parametrize("n", [2, 3, 10, 50, 300])
def test_ttest_equals_scipy(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        base = rng.random(n)
        system = np.clip(base + rng.normal(rng.normal(0, 0.05), 0.2, n), 0, 1)
        ours = paired_ttest(base, system)
        ref = stats.ttest_rel(system, base)
        assert abs(ours.p_value - ref.pvalue) <= 1e-12
        assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)


def test_ttest_hand_value():
    # d = (1, 2, 3): mean 2, sd 1, t = 2*sqrt(3); for df = 2 the two-sided p is 1 - t/sqrt(t^2 + 2).
    res = paired_ttest([0, 0, 0], [1, 2, 3])
    t = 2 * math.sqrt(3)
    assert res.statistic == pytest.approx(t, abs=1e-12)
    assert res.p_value == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-12)  # 0.0741799...


def test_ttest_degenerate_cases_are_explicit():
    same = paired_ttest([0.2, 0.5, 0.7], [0.2, 0.5, 0.7])
    assert (same.statistic, same.p_value) == (0.0, 1.0)
    assert "all differences zero" in same.method
    shifted = paired_ttest([0.0, 0.25, 0.5], [0.5, 0.75, 1.0])
    assert shifted.statistic == math.inf and shifted.p_value == 0.0
    down = paired_ttest([0.5, 0.75, 1.0], [0.0, 0.25, 0.5])
    assert down.statistic == -math.inf and down.p_value == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        paired_ttest([0.1], [0.2])


def test_length_mismatch_and_nonfinite_are_errors():
    with pytest.raises(ValueError, match="differ in length"):
        paired_ttest([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="finite"):
        paired_ttest([0.1, float("nan")], [0.1, 0.2])


# ---------------------------------------------------------------- randomization

def test_randomization_hand_values():
    # d = (1, 2, 3): signed sums are +-6, +-4, +-2, 0, 0; only +-6 reach |6|: p = 2/8.
    assert randomization_test([0, 0, 0], [1, 2, 3]).p_value == 0.25
    # d = (1, 1, 1, 1): only all-plus and all-minus reach |4|: p = 2/16.
    assert randomization_test(np.zeros(4), np.ones(4)).p_value == 0.125
    # All differences zero: every assignment is as extreme: p = 1.
    assert randomization_test([0.3, 0.4], [0.3, 0.4]).p_value == 1.0


@pytest.mark.parametrize("n", range(1, 17))
def test_exact_equals_brute_force(n):
    rng = np.random.default_rng(100 + n)
    base = rng.random(n)
    system = base + rng.normal(0.1, 0.3, n)
    res = randomization_test(base, system, exact=True)
    assert res.exact
    assert res.p_value == brute_force_sign_flip_p(system - base)


@pytest.mark.parametrize("n", [6, 11, 16])
def test_exact_equals_brute_force_with_ties_and_zeros(n):
    # Per-query metric values come from a small set (ties, zero differences are common).
    rng = np.random.default_rng(7 * n)
    levels = np.array([0.0, 1 / math.log2(3), 0.5, 1 / math.log2(5), 1.0])
    base, system = rng.choice(levels, n), rng.choice(levels, n)
    system[: n // 3] = base[: n // 3]
    res = randomization_test(base, system, exact=True)
    assert res.p_value == pytest.approx(brute_force_sign_flip_p(system - base), abs=1e-15)


@pytest.mark.parametrize("n", [5, 10])
def test_exact_equals_scipy_permutation_test(n):
    rng = np.random.default_rng(n)
    base, system = rng.random(n), rng.random(n)
    ref = stats.permutation_test((system - base,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                                 n_resamples=np.inf, alternative="two-sided")
    assert randomization_test(base, system, exact=True).p_value == pytest.approx(ref.pvalue, abs=1e-12)


def test_monte_carlo_within_three_standard_errors_of_exact():
    n, resamples = 20, 20_000
    for seed, shift in [(1, 0.05), (2, 0.1), (3, 0.15)]:
        rng = np.random.default_rng(seed)
        base = rng.random(n)
        system = base + rng.normal(shift, 0.3, n)
        exact = randomization_test(base, system, exact=True).p_value
        mc = randomization_test(base, system, exact=False, resamples=resamples, seed=seed)
        assert not mc.exact and mc.resamples == resamples
        se = math.sqrt(exact * (1 - exact) / resamples)
        assert abs(mc.p_value - exact) <= 3 * se, (exact, mc.p_value, se)


def test_monte_carlo_is_deterministic_for_a_seed():
    rng = np.random.default_rng(0)
    base, system = rng.random(200), rng.random(200)
    first = randomization_test(base, system, seed=42, resamples=5000)
    assert not first.exact
    for _ in range(3):
        assert randomization_test(base, system, seed=42, resamples=5000).p_value == first.p_value
    others = {randomization_test(base, system, seed=s, resamples=5000).p_value for s in range(5)}
    assert len(others) > 1  # the seed matters


def test_monte_carlo_p_is_never_zero():
    base, system = np.zeros(100), np.ones(100)
    res = randomization_test(base, system, resamples=999, seed=0)
    assert res.p_value == 1 / 1000


def test_auto_mode_counts_only_nonzero_differences():
    base = np.zeros(200)
    system = np.zeros(200)
    system[:5] = [0.1, 0.2, 0.3, 0.4, 0.5]
    res = randomization_test(base, system)
    assert res.exact and "2^5" in res.method
    assert res.p_value == 2 / 32


# ---------------------------------------------------------------- bootstrap

def test_bootstrap_ci_coverage_by_simulation():
    """Normal data with a known mean difference: the 95% interval covers in 93-97% of 1000 runs."""
    true_delta, n, reps = 0.03, 100, 1000
    rng = np.random.default_rng(2024)
    covered = 0
    for rep in range(reps):
        base = rng.normal(0.5, 0.2, n)
        system = base + rng.normal(true_delta, 0.1, n)
        low, high = bootstrap_ci(base, system, level=0.95, resamples=2000, seed=rep)
        covered += low <= true_delta <= high
    assert 0.93 * reps <= covered <= 0.97 * reps, covered


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean():
    rng = np.random.default_rng(5)
    base, system = rng.random(80), rng.random(80)
    a = bootstrap_ci(base, system, seed=3)
    assert a == bootstrap_ci(base, system, seed=3)
    assert a[0] < (system - base).mean() < a[1]


def test_bootstrap_ci_of_identical_scores_is_zero_width():
    assert bootstrap_ci([0.2, 0.4, 0.6], [0.2, 0.4, 0.6], resamples=100) == (0.0, 0.0)


def test_bootstrap_test_p_values():
    rng = np.random.default_rng(9)
    base = rng.random(300)
    strong = bootstrap_test(base, base + 0.2, resamples=999, seed=1)
    assert strong.p_value == 1 / 1000
    assert bootstrap_test(base, base, resamples=999).p_value == 1.0
    noisy = base + rng.normal(0, 0.3, 300)
    boot = bootstrap_test(base, noisy, resamples=20_000, seed=2).p_value
    # With 300 queries the shift bootstrap agrees with the t-test to about 0.02.
    assert boot == pytest.approx(paired_ttest(base, noisy).p_value, abs=0.02)


# ---------------------------------------------------------------- effect size, win/tie/loss

def test_effect_size_hand_values():
    assert effect_size([0, 0, 0], [1, 2, 3]) == 2.0           # mean 2, sd 1
    assert effect_size([1, 2, 3], [0, 0, 0]) == -2.0
    assert effect_size([0.1, 0.2], [0.1, 0.2]) == 0.0
    assert effect_size([0.0, 0.5], [0.5, 1.0]) == math.inf
    assert math.isnan(effect_size([0.1], [0.3]))
    rng = np.random.default_rng(1)
    base, system = rng.random(50), rng.random(50)
    d = system - base
    assert effect_size(base, system) == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12)


def test_win_tie_loss():
    assert win_tie_loss([0.1, 0.5, 0.3, 0.0], [0.2, 0.5, 0.1, 0.0]) == (1, 2, 1)
