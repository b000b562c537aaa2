"""``compare_suite(cells=...)``: a table that shows some cells is one family of exactly those cells.

Layout tables (harness/ablation/layout.py, harness/ablation/layouts/breakdown.py) compare their cells in one
pass this way, so Holm's family, the draw count the family needs and the exact resolution of
decisions at their threshold are the table's own (before, each column was compared alone at the
default B and corrected afterwards, so a large layout got only the floor warning).
"""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats import StatsOptions
from harness.stats.suite import compare_suite


def _results(n_datasets: int = 3, n_systems: int = 4, n: int = 40):
    rng = np.random.default_rng(7)
    out = {}
    for d in range(n_datasets):
        qids = [f"d{d}q{i}" for i in range(n)]
        base = {m: rng.random(n) for m in ("ndcg@10", "recall@100")}
        per = {"base": EvaluationResult(qids, dict(base))}
        for s in range(n_systems):
            per[f"s{s}"] = EvaluationResult(qids, {m: np.clip(v + rng.normal(0.05 * s, 0.2, n), 0, 1)
                                                   for m, v in base.items()})
        out[f"ds{d}"] = per
    return out


def test_cells_restrict_the_family_and_keep_the_p_values_of_the_full_comparison():
    results = _results()
    options = StatsOptions(test="randomization", resamples=20000)     # above both families' rule: one B
    full = compare_suite(results, ["ndcg@10", "recall@100"], baseline="base", aggregates={"avg": ["ds0", "ds1"]},
                         options=options, correction="none")
    cells = {("ds0", "ndcg@10"), ("ds2", "recall@100"), ("avg", "ndcg@10")}
    part = compare_suite(results, ["ndcg@10", "recall@100"], baseline="base", aggregates={"avg": ["ds0", "ds1"]},
                         options=options, correction="holm", cells=cells)
    assert {(c.dataset, c.metric) for c in part.comparisons} == cells
    assert {c.family_size for c in part.comparisons} == {3 * 4}        # 3 shown cells x 4 systems
    assert part.test_resamples == 20000
    resolved = {id(r.comparison) for r in part.resolved}
    for c in part.comparisons:                                        # draws are per (dataset, metric): same p
        if id(c) in resolved:
            continue
        assert c.p_value == pytest.approx(full.get(c.system, c.metric, c.dataset).p_value, rel=0, abs=0)


def test_a_large_table_of_cells_raises_the_draw_count_for_its_own_family():
    results = _results(n_datasets=6, n_systems=9)
    cells = {(f"ds{d}", m) for d in range(6) for m in ("ndcg@10", "recall@100")}
    report = compare_suite(results, ["ndcg@10", "recall@100"], baseline="base",
                           options=StatsOptions(test="randomization", resamples=1000), correction="holm", cells=cells)
    m = len(report.comparisons)
    assert m == 6 * 2 * 9
    assert report.test_resamples is not None and report.test_resamples >= 20 * m / 0.05


def test_a_cell_that_is_not_compared_is_an_error():
    with pytest.raises(ConfigError, match="no comparison for ds0/mrr@10"):
        compare_suite(_results(), ["ndcg@10"], baseline="base", cells={("ds0", "mrr@10")})
    with pytest.raises(ConfigError, match="no comparison for nowhere/ndcg@10"):
        compare_suite(_results(), ["ndcg@10"], baseline="base", cells={("nowhere", "ndcg@10")})
