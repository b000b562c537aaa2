"""Layout kinds sweep, curve and breakdown on a finished suite written with chosen numbers.

The finished-suite folder is written the way the runner writes it (summary.json with the cells'
axes, ``results/<cell>/<benchmark>`` result directories), so every number the tables and figures
show is checked against a direct computation.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.ablation.spec import parse_suite
from harness.data.run import Run
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.stats import StatsOptions, compare_suite
from harness.stats.replicates import average_replicates
from harness.store import write_result
from reports.markdown import render_markdown

SUITE = {
    "name": "ax", "version": 1, "baseline": "u",
    "variants": [
        {"id": "u", "label": "U", "method": "uniform", "sweep": {"param": "train.lr", "values": [0.1, 0.2]},
         "seeds": [1, 2], "checkpoints": [5]},
        {"id": "bm25", "label": "BM25", "method": "none", "model": "bm25"},
    ],
    "metrics": ["ndcg@10"],
    "stats": {"test": "ttest", "correction": "holm", "alpha": 0.05},
    "scales": {"tiny": {
        "model": "synthetic:default/tiny-bert", "data": ["synthetic:default"], "train": {"steps": 10},
        "benchmarks": [{"id": "one", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/latin_qa"},
                       {"id": "two", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/cjk_qa"},
                       {"id": "three", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/thai_sts"}],
        "aggregates": {"Pair": ["one", "two"], "All": ["Pair", "three"]}}},
}
BENCHES = ("one", "two", "three")
QIDS = [f"q{i}" for i in range(12)]
RNG = np.random.default_rng(11)
# (cell id, benchmark) -> per-query nDCG@10: lr=0.2 is better than lr=0.1 by ~0.2, seeds differ a little
SCORES: dict[tuple[str, str], np.ndarray] = {}
for bench in BENCHES:
    base = RNG.random(len(QIDS)) * 0.5
    for seed in (1, 2):
        for lr, lift in (("0.1", 0.0), ("0.2", 0.2)):
            final = np.clip(base + lift + RNG.normal(0, 0.02, len(QIDS)), 0, 1)
            SCORES[(f"u@lr={lr}@seed={seed}", bench)] = final
            SCORES[(f"u@lr={lr}@seed={seed}@step=5", bench)] = final * 0.5
    SCORES[("bm25", bench)] = np.full(len(QIDS), 0.3)


def _suite(layouts: dict):
    raw = json.loads(json.dumps(SUITE))
    raw["table"] = {"layouts": layouts}
    return parse_suite(raw, Path("ax.yaml"))


def _finished(root: Path) -> Path:
    report = report_dir(root, "ax", "tiny")
    report.mkdir(parents=True)
    cells = [{"variant": f"u@lr={lr}@seed={s}", "key": f"k{lr}{s}", "declared": "u", "system": f"u@lr={lr}",
              "seed": s, "steps": [5], "final_step": 10} for lr in ("0.1", "0.2") for s in (1, 2)]
    cells.append({"variant": "bm25", "key": "kb"})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": "ax", "cells": cells}), encoding="utf-8")
    for (cell, bench), values in SCORES.items():
        run = Run.from_arrays(QIDS[:1], ["d1"], [1.0])
        write_result(cell_result_dir(report, cell, bench), run=run,
                     evaluation=EvaluationResult(QIDS, {"ndcg@10": values}),
                     card=ProtocolCard(suite="synthetic", dataset=bench, metrics=("ndcg@10",)), manifest={})
    return root


def _value(cell: str, column: str) -> float:
    """A cell's value on a column: a benchmark, or the nested aggregate All = mean(mean(one, two), three)."""
    mean = {b: float(SCORES[(cell, b)].mean()) for b in BENCHES}
    return {"one": mean["one"], "All": ((mean["one"] + mean["two"]) / 2 + mean["three"]) / 2}[column]


def _text(mean: float, sd: float) -> str:
    return f"{mean * 100:.1f} ± {sd * 100:.1f}"


SWEEP = {"kind": "sweep", "columns": [{"benchmark": "All", "metric": "ndcg@10"},
                                      {"benchmark": "one", "metric": "ndcg@10"}]}


def test_sweep_table_shows_mean_sd_over_seeds_deltas_and_the_replicate_test(tmp_path):
    root = _finished(tmp_path)
    table = render_layout(_suite({"s": SWEEP}), "tiny", root, "s")
    assert [(r.label, r.group) for r in table.rows] == [("lr=0.1", "U"), ("lr=0.2", "U")]
    for row, lr in zip(table.rows, ("0.1", "0.2")):
        for column in ("All", "one"):
            values = [_value(f"u@lr={lr}@seed={s}", column) for s in (1, 2)]
            assert row.cells[f"{column}/ndcg@10"].value == _text(np.mean(values), np.std(values, ddof=1))
    # the delta and the test: lr=0.2 vs lr=0.1 on per-query scores averaged over the seeds
    avg = {lr: {b: average_replicates([EvaluationResult(QIDS, {"ndcg@10": SCORES[(f"u@lr={lr}@seed={s}", b)]})
                                       for s in (1, 2)]) for b in BENCHES} for lr in ("0.1", "0.2")}
    direct = compare_suite({b: {"a": avg["0.1"][b], "b": avg["0.2"][b]} for b in BENCHES}, ["ndcg@10"],
                           baseline="a", aggregates={"Pair": ["one", "two"], "All": ["Pair", "three"]},
                           options=StatsOptions(test="ttest"), correction="none")
    cell = table.rows[1].cells["All/ndcg@10"]
    assert cell.delta == pytest.approx(direct.get("b", "ndcg@10", "All").delta, abs=1e-12)
    assert cell.marks == ("†",)
    assert table.rows[0].cells["All/ndcg@10"].delta is None
    assert table.rows[1].cells["All/ndcg@10"].bold and not table.rows[0].cells["All/ndcg@10"].bold
    text = render_markdown(table)
    assert "mean ± sd (ddof 1) over the seeds" in text and "averaged over the seeds" in text
    assert "over the 2 comparisons of this table" in text


def test_sweep_reference_baseline_adds_the_baseline_row_and_the_figure_plots_means(tmp_path):
    root = _finished(tmp_path)
    layout = {**SWEEP, "options": {"reference": "baseline", "log_x": True}}
    suite = _suite({"s": layout})
    table = render_layout(suite, "tiny", root, "s")
    assert [r.kind for r in table.rows] == ["baseline", "data", "data"]
    assert table.rows[0].label == "U (lr=0.1)"
    figure = layout_figure(suite, "tiny", root, "s")
    ax = figure.axes[0]
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [0.1, 0.2])
    expected = [np.mean([_value(f"u@lr={lr}@seed={s}", "All") for s in (1, 2)]) * 100 for lr in ("0.1", "0.2")]
    np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-12)
    assert ax.get_xscale() == "log" and len(figure.axes) == 2


def test_curve_table_and_figure_read_the_checkpoints(tmp_path):
    root = _finished(tmp_path)
    layout = {"kind": "curve", "columns": [{"benchmark": "one", "metric": "ndcg@10"}]}
    suite = _suite({"c": layout})
    table = render_layout(suite, "tiny", root, "c")
    assert [(r.group, r.label) for r in table.rows] == [("U (lr=0.1)", "step 5"), ("U (lr=0.1)", "step 10 (final)"),
                                                        ("U (lr=0.2)", "step 5"), ("U (lr=0.2)", "step 10 (final)")]
    early = [_value(f"u@lr=0.2@seed={s}@step=5", "one") for s in (1, 2)]
    assert table.rows[2].cells["one/ndcg@10"].value == _text(np.mean(early), np.std(early, ddof=1))
    figure = layout_figure(suite, "tiny", root, "c")
    lines = figure.axes[0].get_lines()
    assert [list(ln.get_xdata()) for ln in lines] == [[5.0, 10.0], [5.0, 10.0]]
    final = [_value(f"u@lr=0.1@seed={s}", "one") for s in (1, 2)]
    assert lines[0].get_ydata()[1] == pytest.approx(np.mean(final) * 100)
    # the points may carry names (a paper's Epi-2, Epi-3 ...), in step order, the finished run last
    named = _suite({"c": {**layout, "options": {"labels": ["Epi-2", "Epi-3"]}}})
    assert [r.label for r in render_layout(named, "tiny", root, "c").rows][:2] == ["Epi-2 (step 5)", "Epi-3 (step 10)"]
    with pytest.raises(ConfigError, match="1 labels for the 2 points"):
        render_layout(_suite({"c": {**layout, "options": {"labels": ["Epi-2"]}}}), "tiny", root, "c")


def test_breakdown_rows_are_benchmarks_grouped_with_best_per_row(tmp_path):
    root = _finished(tmp_path)
    layout = {"kind": "breakdown", "columns": ["u", "bm25"],
              "options": {"groups": {"Latin": ["one"], "Other": ["two", "three"]}}}
    table = render_layout(_suite({"b": layout}), "tiny", root, "b")
    assert [c.key for c in table.columns] == ["u@lr=0.1", "u@lr=0.2", "bm25"]
    assert [(r.group, r.label, r.kind) for r in table.rows] == [
        ("Latin", "one", "data"), ("Other", "two", "data"), ("Other", "three", "data"),
        ("Other", "Other avg (2)", "average")]
    for row in table.rows:
        shown = {}
        for key, cell in row.cells.items():
            shown[key] = float(str(cell.value).split(" ")[0]) if isinstance(cell.value, str) else cell.value * 100
        best = max(shown.values())
        assert {k for k, c in row.cells.items() if c.bold} == {k for k, v in shown.items() if v == best}
    assert table.rows[0].cells["bm25"].value == pytest.approx(0.3)
    assert "BM25" in [c.label for c in table.columns]


def test_layout_options_are_checked():
    with pytest.raises(ConfigError, match="unknown option.*colour"):
        load_layout(_suite({"s": {**SWEEP, "options": {"colour": 1}}}), "tiny", "s")
    with pytest.raises(ConfigError, match="variant 'bm25' has no 'sweep'"):
        load_layout(_suite({"s": {**SWEEP, "options": {"variants": ["bm25"]}}}), "tiny", "s")
    with pytest.raises(ConfigError, match="reference must be one of first, baseline"):
        load_layout(_suite({"s": {**SWEEP, "options": {"reference": "last"}}}), "tiny", "s")
    with pytest.raises(ConfigError, match="'labels' must be a non-empty list"):
        load_layout(_suite({"c": {"kind": "curve", "columns": SWEEP["columns"], "options": {"labels": "Epi"}}}),
                    "tiny", "c")
    with pytest.raises(ConfigError, match="no 'checkpoints'"):
        load_layout(_suite({"c": {"kind": "curve", "columns": SWEEP["columns"], "options": {"variants": ["bm25"]}}}),
                    "tiny", "c")
    with pytest.raises(ConfigError, match="group_by must be one of"):
        load_layout(_suite({"b": {"kind": "breakdown", "columns": ["u"], "options": {"group_by": "colour"}}}),
                    "tiny", "b")
    with pytest.raises(ConfigError, match="unknown benchmark"):
        load_layout(_suite({"b": {"kind": "breakdown", "columns": ["u"], "options": {"groups": {"x": ["four"]}}}}),
                    "tiny", "b")


def test_results_layout_rows_expand_to_sweep_points_with_mean_sd(tmp_path):
    root = _finished(tmp_path)
    layout = {"rows": ["u", "bm25"], "columns": [{"benchmark": "All", "metric": "ndcg@10"}]}
    table = render_layout(_suite({"r": layout}), "tiny", root, "r")
    assert [(r.label, r.kind) for r in table.rows] == [("U (lr=0.1)", "baseline"), ("U (lr=0.2)", "data"),
                                                       ("BM25", "data")]
    values = [_value(f"u@lr=0.2@seed={s}", "All") for s in (1, 2)]
    cell = table.rows[1].cells["All/ndcg@10"]
    assert cell.value == _text(np.mean(values), np.std(values, ddof=1)) and cell.marks == ("†",)
    assert table.rows[2].cells["All/ndcg@10"].value == pytest.approx(0.3)     # BM25: one run, a number
    assert cell.bold and "averaged over the seeds" in render_markdown(table)


def test_results_layout_rows_may_name_one_sweep_point(tmp_path):
    root = _finished(tmp_path)
    layout = {"rows": ["u@lr=0.2"], "columns": [{"benchmark": "one", "metric": "ndcg@10"}]}
    table = render_layout(_suite({"r": layout}), "tiny", root, "r")
    assert [r.label for r in table.rows] == ["U (lr=0.1)", "U (lr=0.2)"]     # the baseline row is added
    with pytest.raises(ConfigError, match="unknown variant"):
        load_layout(_suite({"r": {**layout, "rows": ["u@lr=0.3"]}}), "tiny", "r")
