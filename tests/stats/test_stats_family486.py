"""The issue's 486-comparison case: 10 systems x 18 datasets x 3 metrics, Holm over the whole table.

Synthetic per-query scores with known effects: 9 systems against one baseline, three
with no effect and six with mean shifts from clearly null to clearly significant.
With the old fixed B = 10,000 the smallest p (1/10,001) was above Holm's first
threshold alpha/486 = 1.03e-4, so decisions were made by the Monte Carlo floor and
flipped between seeds; with B raised by the rule (200,000 here) they must not.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from harness.evaluation_result import EvaluationResult
from harness.stats import StatsOptions, compare_suite
from harness.stats import paired as paired_mod
from harness.stats.correction import adjust_pvalues
from harness.stats.seeds import comparison_rng, draws_rng
from harness.stats.shared import randomization_tests

METRICS = ("ndcg@10", "recall@100", "mrr@10")
# Known mean effects of systems s0..s8 (score sd 0.2): null or clear, as in the measured case ...
CLEAR = (0.0, 0.0, 0.0, 0.0, 0.17, 0.19, 0.21, 0.25, 0.3)
# ... and a dense spread, where some true p-values sit at their Holm threshold (Monte Carlo noise decides those).
DENSE = (0.0, 0.0, 0.0, 0.03, 0.06, 0.09, 0.12, 0.16, 0.25)


def case486(sizes: list[int], seed: int = 0,
            shifts: tuple[float, ...] = CLEAR) -> dict[str, dict[str, EvaluationResult]]:
    rng = np.random.default_rng(seed)
    out = {}
    for d, n in enumerate(sizes):
        qids = [f"d{d}q{i}" for i in range(n)]
        base = {m: rng.random(n) for m in METRICS}
        per = {"base": EvaluationResult(qids, dict(base))}
        for j, shift in enumerate(shifts):
            per[f"s{j}"] = EvaluationResult(qids, {m: np.clip(base[m] + rng.normal(shift, 0.2, n), 0, 1)
                                                   for m in METRICS})
        out[f"ds{d}"] = per
    return out


def _decisions(report) -> dict[tuple, bool]:
    return {(c.dataset, c.system, c.metric): c.significant(report.alpha) for c in report.comparisons}


def reference_decisions(results, resamples: int, seed: int) -> dict[tuple, bool]:
    """Holm decisions from ``resamples`` shared sign flips per (dataset, metric), computed in blocks."""
    keys, pvals = [], []
    for dataset, per in results.items():
        base = per["base"]
        systems = [s for s in per if s != "base"]
        for metric in METRICS:
            diffs = np.stack([per[s].per_query[metric] - base.per_query[metric] for s in systems])
            rng = draws_rng(seed, "test", (dataset, metric), diffs.shape[1])
            for s, res in zip(systems, randomization_tests(diffs, resamples=resamples, rng=rng)):
                keys.append((dataset, s, metric))
                pvals.append(res.p_value)
    adjusted = adjust_pvalues(pvals, "holm")
    return {k: bool(p < 0.05) for k, p in zip(keys, adjusted)}


@pytest.mark.slow   # about 10 s alone here (2 shared cores), 30 s under load
def test_486_comparisons_decisions_stable_across_seeds():
    sizes = [int(n) for n in np.random.default_rng(1).integers(31, 61, 18)]   # Monte Carlo (> 30 non-zero)
    results = case486(sizes)
    reports = [compare_suite(results, list(METRICS), options=StatsOptions(test="randomization", seed=seed))
               for seed in (1, 2)]
    assert all(len(r.comparisons) == 486 and r.test_resamples == 200_000 for r in reports)
    used = [c.resamples for c in reports[0].comparisons]
    assert all("Monte Carlo, B=" in c.test_method for c in reports[0].comparisons)
    # decisions at their threshold were redrawn with more resamples (the rest kept B = 200,000)
    assert set(used) <= {200_000, 2_000_000} and used.count(200_000) > 400
    first, second = (_decisions(r) for r in reports)
    flips = [k for k in first if first[k] != second[k]]
    # A decision can flip only where the true p sits at its Holm threshold within the Monte Carlo error left at
    # the cap (B = 2,000,000); the report names those and its notes warn about them.
    unsettled = [{(c.dataset, c.system, c.metric) for c in r.unsettled} for r in reports]
    assert all(k in unsettled[0] or k in unsettled[1] for k in flips), flips
    assert len(unsettled[0] | unsettled[1]) <= 10
    assert all(any("within Monte Carlo error" in line for line in r.describe()) for r in reports if r.unsettled)
    significant = sum(first.values())
    # nothing with a zero effect is significant, and the large effects are (known effects)
    assert not any(v for (d, s, m), v in first.items() if CLEAR[int(s[1:])] == 0.0)
    assert all(v for (d, s, m), v in first.items() if CLEAR[int(s[1:])] >= 0.25)
    assert 108 <= significant <= 270
    note = reports[0].floor_note()
    assert note is not None and "486 comparisons" in note and "B=200000" in note


@pytest.mark.slow
def test_486_comparisons_match_a_million_permutation_reference_and_time_it():
    """Seeds 1 and 2 at the rule's B against a 1,000,000-flip reference (seed 99), on the dense spread of effects.

    Every disagreement (between the seeds, or with the reference on what it calls significant) must be a
    decision the reports flag as unsettled: p at its Holm threshold within the Monte Carlo error left at the
    cap.  Measured here: 3 flips between seeds, all flagged; 257 significant with seed 1 and in the reference.
    """
    sizes = [int(n) for n in np.random.default_rng(2).integers(100, 500, 18)]
    results = case486(sizes, seed=3, shifts=DENSE)
    timings, decisions, unsettled = {}, {}, set()
    for seed in (1, 2):
        start = time.perf_counter()
        report = compare_suite(results, list(METRICS), options=StatsOptions(test="randomization", seed=seed))
        timings[seed] = time.perf_counter() - start
        decisions[seed] = _decisions(report)
        unsettled |= {(c.dataset, c.system, c.metric) for c in report.unsettled}
    start = time.perf_counter()
    reference = reference_decisions(results, 1_000_000, seed=99)
    reference_s = time.perf_counter() - start
    # the old path: each comparison its own stream (keyed by the system), B = 10,000, test and interval
    start = time.perf_counter()
    for dataset, per in results.items():
        for s in (s for s in per if s != "base"):
            for metric in METRICS:
                key = ("test", dataset, metric, "base", s)
                b, x = per["base"].per_query[metric], per[s].per_query[metric]
                paired_mod.randomization_test(b, x, seed=comparison_rng(1, key))
                paired_mod.bootstrap_ci(b, x, seed=comparison_rng(1, ("ci", *key[1:])))
    old_s = time.perf_counter() - start
    print(f"\n486 comparisons, {sum(sizes)} queries: shared draws B=200000 {timings[1]:.1f} s and {timings[2]:.1f} s; "
          f"per-comparison B=10000 {old_s:.1f} s; 1e6 reference {reference_s:.1f} s; "
          f"significant: {sum(decisions[1].values())} (reference {sum(reference.values())})")
    flips = [k for k in decisions[1] if decisions[1][k] != decisions[2][k]]
    off_reference = [k for k in reference if not reference[k] and (decisions[1][k] or decisions[2][k])]
    print(f"flips between seeds: {flips}; significant only without the reference: {off_reference}")
    called = [k for k, v in reference.items() if v]
    missed = [k for k in called if not (decisions[1][k] and decisions[2][k])]
    print(f"reference-significant missed by a seed: {missed}; unsettled at the cap: {sorted(unsettled)}")
    assert len(called) > 100
    assert set(flips) <= unsettled and set(missed) <= unsettled and set(off_reference) <= unsettled
    assert len(unsettled) <= 12
    assert math.isfinite(old_s)
