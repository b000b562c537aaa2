"""Pairing by query id, the missing-query policy, families, aggregates and stable per-comparison seeds."""
from __future__ import annotations

import json

import numpy as np
import pytest
from optional_extras import require_extra
from scipy import stats

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats import (
    MissingQueriesError,
    StatisticsError,
    StatsOptions,
    align,
    bootstrap_ci,
    compare_suite,
    compare_systems,
    paired_ttest,
)

multipletests = require_extra("statsmodels.stats.multitest").multipletests


def make_eval(qids, **metrics) -> EvaluationResult:
    return EvaluationResult(list(qids), {m: np.asarray(v, dtype=float) for m, v in metrics.items()})


def random_systems(n=60, systems=("base", "a", "b"), seed=0, qprefix="q"):
    rng = np.random.default_rng(seed)
    qids = [f"{qprefix}{i}" for i in range(n)]
    base = rng.random(n)
    out = {}
    for k, name in enumerate(systems):
        shift = 0.0 if k == 0 else 0.03 * k
        out[name] = make_eval(qids, **{"ndcg@10": np.clip(base + rng.normal(shift, 0.15, n), 0, 1),
                                       "recall@100": np.clip(base + rng.normal(shift, 0.1, n), 0, 1)})
    return out


# ---------------------------------------------------------------- alignment and missing queries

def test_align_pairs_by_query_id_not_position():
    base = {"q1": 0.1, "q2": 0.2, "q3": 0.3}
    system = {"q3": 0.6, "q1": 0.5, "q2": 0.2}
    paired = align(base, system)
    assert paired.query_ids.tolist() == ["q1", "q2", "q3"]
    np.testing.assert_allclose(paired.diff, [0.4, 0.0, 0.3])


def test_missing_queries_are_an_error_by_default():
    base = {f"q{i}": 0.5 for i in range(10)}
    system = {f"q{i}": 0.5 for i in range(3, 12)}
    with pytest.raises(MissingQueriesError) as err:
        align(base, system, metric="ndcg@10", base_name="bm25", system_name="dense")
    message = str(err.value)
    assert "3 queries scored for bm25 but not for dense" in message
    assert "'q0', 'q1', 'q2'" in message
    assert "2 queries scored for dense but not for bm25" in message and "'q10', 'q11'" in message
    assert "missing='zero'" in message


def test_missing_zero_scores_absent_queries_as_zero_and_counts_them():
    base = {"q1": 1.0, "q2": 0.5, "q3": 0.25}
    system = {"q1": 0.5, "q2": 1.0, "q4": 1.0}
    paired = align(base, system, missing="zero")
    assert paired.query_ids.tolist() == ["q1", "q2", "q3", "q4"]
    np.testing.assert_allclose(paired.base, [1.0, 0.5, 0.25, 0.0])
    np.testing.assert_allclose(paired.system, [0.5, 1.0, 0.0, 1.0])
    assert (paired.missing_in_base, paired.missing_in_system) == (1, 1)
    report = compare_systems({"b": make_eval(base, m=list(base.values())),
                              "s": make_eval(system, m=list(system.values()))}, ["m"],
                             options=StatsOptions(missing="zero"))
    c = report.get("s", "m")
    assert c.n == 4 and c.mean_base == pytest.approx(1.75 / 4) and c.mean == pytest.approx(2.5 / 4)
    assert (c.missing_in_base, c.missing_in_system) == (1, 1)
    assert any("scored as 0" in line for line in report.describe())


def test_unknown_metric_is_named():
    with pytest.raises(ConfigError, match="'map'.*available: ndcg@10"):
        align(make_eval(["q"], **{"ndcg@10": [1.0]}), make_eval(["q"], **{"ndcg@10": [1.0]}), metric="map")


# ---------------------------------------------------------------- one table

def test_report_fields_equal_direct_computations():
    results = random_systems()
    report = compare_systems(results, ["ndcg@10", "recall@100"], options=StatsOptions(seed=3),
                             correction="holm")
    assert report.baseline == "base" and report.systems == ["base", "a", "b"]
    assert len(report.comparisons) == 4
    raw = [c.p_value for c in report.comparisons]
    np.testing.assert_allclose([c.p_adjusted for c in report.comparisons],
                               multipletests(raw, method="holm")[1], atol=1e-15)
    c = report.get("b", "ndcg@10")
    base, system = results["base"].per_query["ndcg@10"], results["b"].per_query["ndcg@10"]
    assert c.mean_base == pytest.approx(base.mean()) and c.mean == pytest.approx(system.mean())
    assert c.delta == pytest.approx(system.mean() - base.mean())
    assert c.p_value == pytest.approx(stats.ttest_rel(system, base).pvalue, abs=1e-12)
    assert c.ci_low < c.delta < c.ci_high
    assert c.wins + c.ties + c.losses == c.n == 60
    assert (c.correction, c.family, c.family_size) == ("holm", "all", 4)
    d = c.to_dict()
    for key in ("mean_base", "mean", "delta", "p_value", "p_adjusted", "ci_low", "ci_high", "effect_size", "n",
                "wins", "ties", "losses", "test", "metric", "system", "baseline"):
        assert key in d
    json.dumps(report.to_dict(), allow_nan=False)


def test_families_group_the_correction():
    report = compare_systems(random_systems(), ["ndcg@10", "recall@100"], correction="bonferroni", family="metric")
    for c in report.comparisons:
        assert c.family == f"metric={c.metric}" and c.family_size == 2
        assert c.p_adjusted == pytest.approx(min(1.0, 2 * c.p_value))
    with pytest.raises(ConfigError, match="unknown family"):
        compare_systems(random_systems(), ["ndcg@10"], family="everything")


@pytest.mark.parametrize("test", ["randomization", "bootstrap"])
def test_adding_a_comparison_leaves_the_others_unchanged(test):
    # B=3000 already meets the floor rule for the largest family here (6 comparisons: 20*6/0.05 = 2400),
    # so B is the same in every call; a family past the rule would raise B (tested in test_stats_shared).
    options = StatsOptions(test=test, seed=11, resamples=3000, exact_max_n=10)
    full = random_systems(systems=("base", "a", "b", "c"))
    small = compare_systems({k: full[k] for k in ("base", "a")}, ["ndcg@10"], options=options)
    large = compare_systems(full, ["ndcg@10", "recall@100"], options=options)
    reordered = compare_systems({k: full[k] for k in ("base", "c", "b", "a")}, ["recall@100", "ndcg@10"],
                                options=options)
    a_small = small.get("a", "ndcg@10")
    for other in (large, reordered):
        a = other.get("a", "ndcg@10")
        assert (a.p_value, a.ci_low, a.ci_high) == (a_small.p_value, a_small.ci_low, a_small.ci_high)
    assert "Monte Carlo" in a_small.test_method or "bootstrap" in a_small.test_method
    # ...and repeated calls give identical p-values.
    again = compare_systems(full, ["ndcg@10", "recall@100"], options=options)
    assert [c.p_value for c in again.comparisons] == [c.p_value for c in large.comparisons]


def test_statistics_errors_name_the_comparison():
    one = {"base": make_eval(["q1"], m=[0.5]), "sys": make_eval(["q1"], m=[0.7])}
    with pytest.raises(StatisticsError, match="sys vs base, m: the paired t-test needs at least 2 queries"):
        compare_systems(one, ["m"])
    assert compare_systems(one, ["m"], options=StatsOptions(test="randomization")).get("sys", "m").p_value == 1.0
    two = {"d1": random_systems(n=5, seed=1), "d2": random_systems(n=5, seed=2, qprefix="x")}
    with pytest.raises(StatisticsError, match=r"a vs base, ndcg@10 on avg \(macro aggregate\)"):
        compare_suite(two, ["ndcg@10"], aggregates={"avg": ["d1"]}, aggregate_method="macro")


def test_options_are_validated():
    with pytest.raises(ConfigError, match="unknown test"):
        StatsOptions(test="wilcoxon")
    with pytest.raises(ConfigError, match="missing-query policy"):
        StatsOptions(missing="drop")
    with pytest.raises(ConfigError, match="only the baseline"):
        compare_systems({"base": random_systems()["base"]}, ["ndcg@10"])
    with pytest.raises(ConfigError, match="baseline 'x'"):
        compare_systems(random_systems(), ["ndcg@10"], baseline="x")


# ---------------------------------------------------------------- aggregates over datasets

def suite_results():
    return {
        "scifact": random_systems(n=30, seed=1, qprefix="s"),
        "nfcorpus": random_systems(n=80, seed=2, qprefix="n"),
        "fiqa": random_systems(n=50, seed=3, qprefix="f"),
    }


def test_aggregate_pooled_is_the_test_on_concatenated_differences():
    results = suite_results()
    members = ["scifact", "nfcorpus", "fiqa"]
    report = compare_suite(results, ["ndcg@10"], aggregates={"BEIR avg": members}, correction="none",
                           options=StatsOptions(seed=5, resamples=4000))
    agg = report.get("a", "ndcg@10", "BEIR avg")
    per_ds = [report.get("a", "ndcg@10", d) for d in members]
    assert agg.mean_base == pytest.approx(np.mean([c.mean_base for c in per_ds]))
    assert agg.mean == pytest.approx(np.mean([c.mean for c in per_ds]))
    assert agg.delta == pytest.approx(np.mean([c.delta for c in per_ds]))
    base = np.concatenate([results[d]["base"].per_query["ndcg@10"] for d in members])
    system = np.concatenate([results[d]["a"].per_query["ndcg@10"] for d in members])
    assert agg.n == 160 and agg.aggregate == "pooled" and agg.datasets == tuple(members)
    assert agg.p_value == pytest.approx(paired_ttest(base, system).p_value, abs=1e-12)
    assert agg.ci_low < agg.delta < agg.ci_high and agg.ci_method.startswith("stratified")
    # The stratified interval is narrower than one over the 3 dataset means would be, wider than 0.
    assert 0 < agg.ci_high - agg.ci_low < 0.2
    assert report.get("a", "ndcg@10", "BEIR avg") is not None
    assert any("pooled" in line for line in report.describe())


def test_aggregate_macro_tests_dataset_means():
    results = suite_results()
    members = ["scifact", "nfcorpus", "fiqa"]
    report = compare_suite(results, ["ndcg@10"], aggregates={"avg": members}, aggregate_method="macro",
                           correction="none")
    agg = report.get("b", "ndcg@10", "avg")
    base_means = [results[d]["base"].per_query["ndcg@10"].mean() for d in members]
    sys_means = [results[d]["b"].per_query["ndcg@10"].mean() for d in members]
    assert agg.n == 3 and agg.aggregate == "macro"
    assert agg.p_value == pytest.approx(stats.ttest_rel(sys_means, base_means).pvalue, abs=1e-12)
    assert agg.wins + agg.ties + agg.losses == 3


def test_aggregates_join_the_correction_family():
    report = compare_suite(suite_results(), ["ndcg@10"], aggregates={"avg": ["scifact", "fiqa"]},
                           correction="bonferroni")
    assert len(report.comparisons) == 2 * (3 + 1)
    assert {c.family_size for c in report.comparisons} == {8}


def test_aggregate_errors():
    with pytest.raises(ConfigError, match="without results: msmarco"):
        compare_suite(suite_results(), ["ndcg@10"], aggregates={"avg": ["scifact", "msmarco"]})
    results = suite_results()
    del results["fiqa"]["b"]
    with pytest.raises(ConfigError, match="'fiqa' has no result for b"):
        compare_suite(results, ["ndcg@10"])


def test_stratified_ci_of_a_single_dataset_equals_plain_bootstrap_distribution_shape():
    # One dataset in a pooled aggregate: the macro delta is that dataset's delta.
    results = {"scifact": random_systems(n=40, seed=9)}
    report = compare_suite(results, ["ndcg@10"], aggregates={"one": ["scifact"]}, correction="none",
                           options=StatsOptions(resamples=5000))
    agg, single = report.get("a", "ndcg@10", "one"), report.get("a", "ndcg@10", "scifact")
    assert agg.delta == pytest.approx(single.delta) and agg.p_value == pytest.approx(single.p_value)
    width = bootstrap_ci(results["scifact"]["base"].per_query["ndcg@10"],
                         results["scifact"]["a"].per_query["ndcg@10"], resamples=5000, seed=1)
    assert agg.ci_high - agg.ci_low == pytest.approx(width[1] - width[0], rel=0.1)


# ---------------------------------------------------------------- table model

def test_comparison_table_rows_columns_and_markers():
    from reports.comparison import GAIN_MARK, LOSS_MARK, comparison_table, metric_label

    n = 50
    qids = [f"q{i}" for i in range(n)]
    rng = np.random.default_rng(3)
    base = rng.random(n)
    results = {"base": make_eval(qids, m=base), "up": make_eval(qids, m=base + 0.1 + rng.normal(0, 0.01, n)),
               "down": make_eval(qids, m=base - 0.1 + rng.normal(0, 0.01, n)),
               "same": make_eval(qids, m=base + rng.normal(0, 0.01, n))}
    report = compare_systems(results, ["m"], correction="holm")
    table = comparison_table(report, caption="Test table")
    assert [r.label for r in table.rows] == ["base", "up", "down", "same"]
    assert table.rows[0].kind == "baseline" and table.rows[0].cells["m"].value == pytest.approx(base.mean())
    cells = {r.label: r.cells["m"] for r in table.rows}
    assert cells["up"].marks == (GAIN_MARK,) and cells["down"].marks == (LOSS_MARK,) and cells["same"].marks == ()
    assert cells["up"].delta == pytest.approx(report.get("up", "m").delta)
    assert set(table.legend) == {GAIN_MARK, LOSS_MARK}
    assert "Holm-adjusted p over 3 comparisons" in table.legend[GAIN_MARK]
    assert any("Correction: Holm" in note for note in table.notes)
    grouped = comparison_table(compare_suite(suite_results(), ["ndcg@10"], aggregates={"avg": ["scifact", "fiqa"]}))
    assert [(c.group, c.label) for c in grouped.columns] == [
        ("scifact", "nDCG@10"), ("nfcorpus", "nDCG@10"), ("fiqa", "nDCG@10"), ("avg", "nDCG@10")]
    assert metric_label("recall@100") == "R@100" and metric_label("mrr") == "MRR"


def test_comparison_table_latex_compiles_with_pdflatex(tmp_path):
    import shutil
    import subprocess

    from reports.comparison import comparison_table
    from reports.latex import render_latex

    exe = shutil.which("pdflatex")
    if exe is None:
        pytest.fail("pdflatex not found on PATH (the dev set-up installs TeX)")
    report = compare_suite(suite_results(), ["ndcg@10", "recall@100"],
                           aggregates={"BEIR avg": ["scifact", "nfcorpus", "fiqa"]}, correction="bh")
    tex = render_latex(comparison_table(report, caption="Dense_v2 vs BM25 & co (100% real)", label="tab:cmp"))
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
                                      + tex + "\n\\end{document}\n", encoding="utf-8")
    proc = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and (tmp_path / "doc.pdf").exists(), proc.stdout[-2000:]
