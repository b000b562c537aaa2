"""The seeds axis: replicates averaged per query, their spread, the test on them; nested aggregates."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats import StatsOptions, compare_suite
from harness.stats.replicates import (
    aggregate_replicate_means,
    average_replicates,
    leaf_weights,
    replicate_means,
    replicate_spread,
    weighted_mean_ci,
)
from harness.stats.suite import nested_scores


def _run(ids, values, metric="ndcg@10"):
    return EvaluationResult(list(ids), {metric: np.asarray(values, dtype=float)})


def test_average_replicates_is_the_per_query_mean_whatever_the_order():
    a = _run(["q1", "q2", "q3"], [0.0, 0.5, 1.0])
    b = _run(["q3", "q1", "q2"], [0.0, 1.0, 0.25])          # same queries, another order
    avg = average_replicates([a, b])
    assert avg.query_ids == ["q1", "q2", "q3"]
    np.testing.assert_allclose(avg.per_query["ndcg@10"], [0.5, 0.375, 0.5])
    assert avg.aggregate["ndcg@10"] == pytest.approx((0.5 + 0.375 + 0.5) / 3)
    assert avg.options["replicates"] == 2
    with pytest.raises(ConfigError, match="replicate 2 scored other queries"):
        average_replicates([a, _run(["q1", "q2"], [0.0, 0.0])])


def test_spread_is_mean_and_sample_sd_of_the_replicate_means():
    runs = [_run(["a", "b"], v) for v in ([0.2, 0.4], [0.5, 0.5], [0.1, 0.3])]
    means = replicate_means(runs, "ndcg@10")
    np.testing.assert_allclose(means, [0.3, 0.5, 0.2])
    mean, sd = replicate_spread(means)
    assert mean == pytest.approx(1 / 3)
    assert sd == pytest.approx(np.std([0.3, 0.5, 0.2], ddof=1))
    assert np.isnan(replicate_spread(np.array([0.4]))[1])


def test_the_replicate_test_equals_scipy_on_seed_averaged_scores():
    rng = np.random.default_rng(3)
    ids = [f"q{i}" for i in range(80)]
    base_runs = [_run(ids, rng.random(80)) for _ in range(3)]
    shift = rng.normal(0.03, 0.1, 80)
    sys_runs = [_run(ids, np.clip(r.per_query["ndcg@10"] + shift + rng.normal(0, 0.05, 80), 0, 1))
                for r in base_runs]
    base, system = average_replicates(base_runs), average_replicates(sys_runs)
    report = compare_suite({"d": {"B": base, "S": system}}, ["ndcg@10"], baseline="B",
                           options=StatsOptions(test="ttest"), correction="none")
    c = report.get("S", "ndcg@10", "d")
    b_avg = np.mean([r.per_query["ndcg@10"] for r in base_runs], axis=0)
    s_avg = np.mean([r.per_query["ndcg@10"] for r in sys_runs], axis=0)
    assert c.p_value == pytest.approx(scipy_stats.ttest_rel(s_avg, b_avg).pvalue, rel=1e-9)
    assert c.mean == pytest.approx(np.mean(replicate_means(sys_runs, "ndcg@10")))
    assert c.n == 80


def test_nested_aggregate_values_and_tests_match_a_direct_computation():
    rng = np.random.default_rng(0)
    sizes = {"a": 30, "b": 50, "f1": 10, "f2": 40, "f3": 25}
    results = {}
    for d, n in sizes.items():
        ids = [f"q{i}" for i in range(n)]
        base = rng.random(n)
        results[d] = {"B": _run(ids, base), "S": _run(ids, np.clip(base + rng.normal(0.05, 0.1, n), 0, 1))}
    aggregates = {"CQA": ["f1", "f2", "f3"], "ALL": ["a", "b", "CQA"]}

    def mean(d, s):
        return float(results[d][s].per_query["ndcg@10"].mean())

    cqa = {s: np.mean([mean(f, s) for f in ("f1", "f2", "f3")]) for s in "BS"}
    macro = compare_suite(results, ["ndcg@10"], baseline="B", aggregates=aggregates, aggregate_method="macro",
                          options=StatsOptions(test="ttest"))
    top = macro.get("S", "ndcg@10", "ALL")
    assert top.mean_base == pytest.approx(np.mean([mean("a", "B"), mean("b", "B"), cqa["B"]]), abs=1e-12)
    assert top.mean == pytest.approx(np.mean([mean("a", "S"), mean("b", "S"), cqa["S"]]), abs=1e-12)
    assert top.n == 3          # macro: the members' means, CQA counted once
    expected = scipy_stats.ttest_rel([mean("a", "S"), mean("b", "S"), cqa["S"]],
                                     [mean("a", "B"), mean("b", "B"), cqa["B"]]).pvalue
    assert top.p_value == pytest.approx(expected, rel=1e-9)
    assert macro.get("S", "ndcg@10", "CQA").mean == pytest.approx(cqa["S"], abs=1e-12)
    assert any("Nested aggregates (CQA in ALL)" in line for line in macro.describe())
    pooled = compare_suite(results, ["ndcg@10"], baseline="B", aggregates=aggregates, aggregate_method="pooled",
                           options=StatsOptions(test="ttest"))
    top = pooled.get("S", "ndcg@10", "ALL")
    assert top.n == 30 + 50 + 75 and top.delta == pytest.approx(macro.get("S", "ndcg@10", "ALL").delta, abs=1e-12)
    with pytest.raises(ConfigError, match="contain each other"):
        compare_suite(results, ["ndcg@10"], baseline="B", aggregates={"X": ["a", "Y"], "Y": ["X"]})


def test_nested_scores_weight_each_member_so_the_mean_is_the_macro_average():
    from harness.stats.align import PairedScores

    members = {"x": PairedScores(np.array(["1", "2"]), np.array([0.0, 1.0]), np.array([1.0, 1.0])),
               "y": PairedScores(np.array(["1"]), np.array([0.2]), np.array([0.6]))}
    nested = nested_scores(members, "Z")
    assert nested.n == 3 and len(set(nested.query_ids.tolist())) == 3
    assert nested.base.mean() == pytest.approx((0.5 + 0.2) / 2)
    assert nested.system.mean() == pytest.approx((1.0 + 0.6) / 2)


BEIR_15 = ["trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "quora",
           "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact", "msmarco", "CQADupStack"]
BEIR_18 = ["trec-covid", "nfcorpus", "bioasq", "nq", "hotpotqa", "fiqa", "signal1m", "trec-news", "robust04",
           "arguana", "webis-touche2020", "CQADupStack", "quora", "dbpedia-entity", "scidocs", "fever",
           "climate-fever", "scifact"]
FORUMS = ["android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats", "tex", "unix",
          "webmasters", "wordpress"]


def test_beir_15_and_18_with_cqadupstack_averaged_over_its_forums_first():
    """BEIR-15 (paper 000 Table 11: 14 sets + CQADupStack) and BEIR-18: CQADupStack counts once, as the mean
    of its 12 forums, not 12 times."""
    aggregates = {"CQADupStack": [f"cqadupstack-{f}" for f in FORUMS], "BEIR-15": BEIR_15, "BEIR-18": BEIR_18}
    leaves = sorted({*[d for d in BEIR_15 + BEIR_18 if d != "CQADupStack"], *aggregates["CQADupStack"]})
    # every set's scores: a constant per set (so its mean is known exactly), varying query counts
    value = {d: (i + 1) / 100 for i, d in enumerate(leaves)}
    results = {}
    for i, d in enumerate(leaves):
        n = 5 + i % 7
        results[d] = {"B": _run([f"q{j}" for j in range(n)], [value[d]] * n),
                      "S": _run([f"q{j}" for j in range(n)], [value[d] + 0.01 * (j % 3) for j in range(n)])}
    report = compare_suite(results, ["ndcg@10"], baseline="B", aggregates=aggregates, aggregate_method="macro",
                           options=StatsOptions(test="ttest"))
    cqa = np.mean([value[f"cqadupstack-{f}"] for f in FORUMS])
    for name, members in (("BEIR-15", BEIR_15), ("BEIR-18", BEIR_18)):
        expected = np.mean([cqa if m == "CQADupStack" else value[m] for m in members])
        flat = np.mean([value[m] for m in [*members, *aggregates["CQADupStack"]] if m != "CQADupStack"])
        c = report.get("S", "ndcg@10", name)
        assert c.mean_base == pytest.approx(expected, abs=1e-12)
        assert c.n == len(members)
        assert abs(expected - flat) > 1e-3           # averaging the forums flat would give another number
    weights = leaf_weights("BEIR-15", aggregates)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert weights["cqadupstack-tex"] == pytest.approx(1 / 15 / 12) and weights["nq"] == pytest.approx(1 / 15)
    per_rep = aggregate_replicate_means({d: [results[d]["B"]] for d in leaves}, "ndcg@10", aggregates, "BEIR-15")
    assert per_rep[0] == pytest.approx(report.get("S", "ndcg@10", "BEIR-15").mean_base, abs=1e-12)


def test_weighted_mean_ci_is_the_bootstrap_ci_of_the_mean():
    rng = np.random.default_rng(5)
    x = rng.random(400)
    value, low, high = weighted_mean_ci({"d": x}, {"d": 1.0}, resamples=4000, seed=1, scope=("t",))
    assert value == pytest.approx(x.mean())
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))
    assert low == pytest.approx(x.mean() - half, abs=0.006) and high == pytest.approx(x.mean() + half, abs=0.006)
    assert weighted_mean_ci({"d": x}, {"d": 1.0}, resamples=4000, seed=1, scope=("t",)) == (value, low, high)
    y = rng.random(100)
    value2, low2, high2 = weighted_mean_ci({"d": x, "e": y}, {"d": 0.5, "e": 0.5}, resamples=2000, scope=("t",))
    assert value2 == pytest.approx((x.mean() + y.mean()) / 2) and low2 < value2 < high2
