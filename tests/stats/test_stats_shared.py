"""Shared Monte Carlo draws across systems and the family-size floor on B (issue 15, item 1)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.cli import main
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats import StatsOptions, apply_correction, compare_suite, compare_systems
from harness.stats.draws import bootstrap_index_blocks, sign_flip_blocks, sign_flip_counts
from harness.stats.floor import floor_note, resamples_for_family, round_up_one_digit
from harness.stats.suite import ComparisonReport
from reports.comparison import comparison_table
from reports.markdown import render_markdown


def _eval(qids, **metrics) -> EvaluationResult:
    return EvaluationResult(list(qids), {m: np.asarray(v, dtype=float) for m, v in metrics.items()})


def _systems(n=200, seed=0, shifts=(0.0, 0.01, 0.03)) -> dict[str, EvaluationResult]:
    rng = np.random.default_rng(seed)
    qids = [f"q{i}" for i in range(n)]
    base = rng.random(n)
    out = {"base": _eval(qids, m=base)}
    for k, shift in enumerate(shifts):
        out[f"s{k}"] = _eval(qids, m=np.clip(base + rng.normal(shift, 0.2, n), 0, 1))
    return out


# ---------------------------------------------------------------- identical inputs, identical verdicts

@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_identical_scores_get_identical_p_values_ci_and_markers(test):
    systems = _systems()
    # the tiny tdro case: two variants that keep the same domains have byte-identical per-query files
    systems["Top-70%"] = systems["s1"]
    systems["Top-80%"] = _eval(systems["s1"].query_ids, m=systems["s1"].per_query["m"].copy())
    report = compare_systems(systems, ["m"], options=StatsOptions(test=test, seed=3, resamples=4000))
    a, b, s1 = (report.get(s, "m") for s in ("Top-70%", "Top-80%", "s1"))
    assert "Monte Carlo" in a.test_method or "bootstrap" in a.test_method
    assert (a.p_value, a.p_adjusted, a.ci_low, a.ci_high) == (b.p_value, b.p_adjusted, b.ci_low, b.ci_high)
    assert (a.p_value, a.ci_low, a.ci_high) == (s1.p_value, s1.ci_low, s1.ci_high)
    row = {r.label: r for r in comparison_table(report).rows}
    assert row["Top-70%"].cells["m"].marks == row["Top-80%"].cells["m"].marks


def test_harness_compare_on_a_baseline_and_two_identical_runs(tmp_path, capsys):
    rng = np.random.default_rng(7)
    qrels = tmp_path / "qrels.trec"
    qrels.write_text("".join(f"q{q} 0 d{q}_{j} 1\n" for q in range(60) for j in range(3)))

    def write(name: str, scores: np.ndarray):
        lines = [f"q{q} Q0 d{q}_{j} {1 + j} {scores[q, j]:.6f} {name}\n" for q in range(60) for j in range(20)]
        (tmp_path / f"{name}.trec").write_text("".join(lines))

    base = rng.random((60, 20))
    better = base + rng.normal(0, 0.3, (60, 20))
    write("base", base)
    write("a", better)
    write("b", better)
    assert main(["compare", "--qrels", str(qrels), "--run", str(tmp_path / "base.trec"), "--run",
                 str(tmp_path / "a.trec"), "--run", str(tmp_path / "b.trec"), "-m", "ndcg@10", "-m", "mrr",
                 "--test", "randomization", "--exact-max-n", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {(c["system"], c["metric"]): c for c in out["comparisons"]}
    for metric in ("ndcg@10", "mrr"):
        a, b = by[("a", metric)], by[("b", metric)]
        assert "Monte Carlo" in a["test_method"]
        assert (a["p_value"], a["p_adjusted"], a["ci_low"], a["ci_high"]) == \
            (b["p_value"], b["p_adjusted"], b["ci_low"], b["ci_high"])


# ---------------------------------------------------------------- adding systems

@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_adding_a_system_never_changes_another_p_value(test):
    options = StatsOptions(test=test, seed=5, resamples=2000)   # 20 * 4 / 0.05 = 1600 <= 2000: B stays
    full = _systems(shifts=(0.0, 0.01, 0.03, 0.05))
    two = compare_systems({k: full[k] for k in ("base", "s1")}, ["m"], options=options)
    four = compare_systems(full, ["m"], options=options)
    assert two.test_resamples == four.test_resamples == 2000
    a, b = two.get("s1", "m"), four.get("s1", "m")
    assert (a.p_value, a.ci_low, a.ci_high, a.statistic) == (b.p_value, b.ci_low, b.ci_high, b.statistic)


def test_draw_streams_extend_each_other():
    """The first B rows do not depend on how many are drawn (a raised B refines, never reshuffles)."""
    def rows(gen, n, b):
        return np.concatenate(list(gen(np.random.default_rng(1), n, b)))

    for gen in (sign_flip_blocks, bootstrap_index_blocks):
        small, large = rows(gen, 37, 1000), rows(gen, 37, 70_000)
        assert small.shape == (1000, 37) and large.shape == (70_000, 37)
        np.testing.assert_array_equal(small, large[:1000])
    flips = rows(sign_flip_blocks, 37, 20_000)
    assert set(np.unique(flips)) == {0.0, 1.0} and abs(flips.mean() - 0.5) < 0.005


def test_byte_table_counts_equal_unpacked_matrix_counts_and_do_not_depend_on_other_rows():
    """sign_flip_counts reads per-byte tables; the counts are those of the unpacked bits times the differences."""
    rng = np.random.default_rng(4)
    for n in (5, 37, 301):
        diffs = rng.normal(0.05, 0.3, (6, n))
        diffs[:, ::4] = np.round(diffs[:, ::4], 1)                  # ties among the statistics
        thresholds = np.abs(diffs.sum(axis=1)) - 1e-9 * np.abs(diffs).sum(axis=1)
        expected = np.zeros(6, dtype=np.int64)
        for flips in sign_flip_blocks(np.random.default_rng(2), n, 5000):
            expected += np.count_nonzero(np.abs(diffs.sum(axis=1) - 2 * flips @ diffs.T) >= thresholds, axis=0)
        got = sign_flip_counts(diffs, thresholds, 5000, np.random.default_rng(2))
        np.testing.assert_array_equal(got, expected)
        alone = [sign_flip_counts(diffs[i:i + 1], thresholds[i:i + 1], 5000, np.random.default_rng(2))[0]
                 for i in range(6)]
        np.testing.assert_array_equal(alone, got)


# ---------------------------------------------------------------- the Monte Carlo floor

def test_resamples_rule_and_refusal():
    assert round_up_one_digit(194_400) == 200_000 and round_up_one_digit(4000) == 4000
    assert resamples_for_family(10, 0.05, 10_000) == 10_000          # 20 * 10 / 0.05 = 4000
    assert resamples_for_family(486, 0.05, 10_000) == 200_000         # 194,400 rounded up
    assert resamples_for_family(513, 0.05, 10_000) == 300_000         # 205,200 rounded up
    with pytest.raises(ConfigError, match=r"m=486 comparisons at alpha=0.05 .* B >= 20\*m/alpha = 194400 .* "
                                          r"cap of B=100000"):
        resamples_for_family(486, 0.05, 10_000, max_resamples=100_000)


def test_small_families_say_nothing_large_ones_state_m_and_b():
    assert floor_note(10, 0.05, 10_000, "Holm") is None
    note = floor_note(486, 0.05, 200_000, "Holm")
    assert note is not None and "486 comparisons" in note and "B=200000" in note and "1.03e-04" not in note
    assert "0.000103" in note
    warning = floor_note(486, 0.05, 10_000, "Holm")
    assert warning is not None and warning.startswith("Warning") and "B=10000" in warning and "194400" in warning


def _wide(n_datasets=6, n_systems=6, n=60, seed=0) -> dict[str, dict[str, EvaluationResult]]:
    rng = np.random.default_rng(seed)
    out = {}
    for d in range(n_datasets):
        qids = [f"d{d}q{i}" for i in range(n)]
        base = rng.random(n)
        out[f"ds{d}"] = {"base": _eval(qids, m=base), **{
            f"s{k}": _eval(qids, m=np.clip(base + rng.normal(0.02 * k, 0.2, n), 0, 1)) for k in range(n_systems)}}
    return out


def test_large_family_raises_b_and_the_table_says_so():
    results = _wide()                       # 6 datasets x 6 systems = 36 comparisons: 20 * 36 / 0.05 = 14,400
    options = StatsOptions(test="randomization", seed=1, resamples=2000)
    report = compare_suite(results, ["m"], options=options)
    assert report.test_resamples == 20_000
    # B = 20,000 everywhere; decisions too close to their threshold are decided from their data alone
    # (exact p or exact bounds, harness.stats.resolve) and say so
    assert min(c.resamples for c in report.comparisons) == 20_000 and not report.unsettled
    assert {c.resamples for c in report.comparisons} <= {20_000, 200_000}
    resolved = {id(r.comparison) for r in report.resolved}
    assert all(f"B={c.resamples})" in c.test_method for c in report.comparisons if id(c) not in resolved)
    assert all(r.comparison.test_method.startswith("randomization (exact") for r in report.resolved)
    assert all(r.p_low <= r.comparison.p_value <= r.p_high for r in report.resolved)
    text = render_markdown(comparison_table(report))
    assert "Large family: 36 comparisons" in text and "B=20000" in text
    # per-dataset families of 6 need only 2400: B is raised to 3000 and no note is printed
    per_dataset = compare_suite(results, ["m"], options=options, family="dataset")
    assert per_dataset.test_resamples == 3000 and per_dataset.floor_note() is None
    with pytest.raises(ConfigError, match="m=36 comparisons at alpha=0.05"):
        compare_suite(results, ["m"], options=StatsOptions(test="randomization", resamples=2000, max_resamples=5000))


def test_comparisons_corrected_together_afterwards_get_a_warning():
    """Comparisons computed in small reports, then corrected as one family (as a layout table does)."""
    results = _wide()
    options = StatsOptions(test="randomization", seed=1, resamples=2000)
    comparisons = [c for d in results for c in
                   compare_suite({d: results[d]}, ["m"], options=options, correction="none").comparisons]
    apply_correction(comparisons, "holm", "all")
    report = ComparisonReport(comparisons, "base", list(results["ds0"]), ["m"], [], options=options)
    assert report.floor_note() is not None and report.floor_note().startswith("Warning: large family of 36")
