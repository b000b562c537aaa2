"""Layout kind ``tradeoff`` (harness/ablation/layouts/tradeoff.py): a metric against a stored sparsity statistic.

These tests write finished-suite folders the way the runner does (summary.json and result
directories through harness.store.write_result) with chosen numbers, so every value the table
and the figure show can be checked exactly; tests/reports/test_tradeoff_tiny_suite.py does the
same on the real tiny `splade` suite.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.ablation.spec import parse_suite
from harness.data.run import Run
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result
from reports.markdown import render_markdown

SUITE = {
    "name": "lsr", "version": 1, "baseline": "base",
    "variants": [
        {"id": "base", "label": "SPLADE", "method": "splade"},
        {"id": "lam-a", "label": "lambda a", "method": "splade", "options": {"lambda_q": 0.01, "lambda_d": 0.01}},
        {"id": "lam-b", "label": "lambda b", "method": "splade", "options": {"lambda_q": 0.1, "lambda_d": 0.1}},
        {"id": "bm25", "label": "BM25", "method": "none", "model": "bm25"},
    ],
    "metrics": ["ndcg@10"],
    "scales": {"tiny": {
        "model": "splade-tiny", "data": ["synthetic:default"],
        "benchmarks": [{"id": "one", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/latin_qa"},
                       {"id": "two", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/cjk_qa"}],
        "aggregates": {"Avg": ["one", "two"]}}},
}
# Per (variant, benchmark): per-query nDCG@10 and the sparsity section of the manifest (None: not sparse).
NDCG = {("base", "one"): [0.5, 0.7], ("base", "two"): [0.4, 0.4],
        ("lam-a", "one"): [0.5, 0.6], ("lam-a", "two"): [0.2, 0.4],
        ("lam-b", "one"): [0.1, 0.2], ("lam-b", "two"): [0.0, 0.2],
        ("bm25", "one"): [0.9, 0.9], ("bm25", "two"): [0.8, 0.8]}


def _sparsity(flops: float, q: float, d: float) -> dict:
    nnz = {"mean": q, "max": int(q * 2), "p50": q, "p90": q * 1.5, "p99": q * 1.9}
    return {"query_nnz": nnz, "doc_nnz": {**nnz, "mean": d, "p90": d * 1.5}, "expected_flops": flops,
            "vocab_size": 30522, "index_bytes": int(d * 1000)}


SPARSITY = {("base", "one"): _sparsity(12.0, 20.0, 80.0), ("base", "two"): _sparsity(8.0, 10.0, 60.0),
            ("lam-a", "one"): _sparsity(3.0, 9.0, 40.0), ("lam-a", "two"): _sparsity(1.0, 7.0, 20.0),
            ("lam-b", "one"): _sparsity(0.25, 2.0, 5.0), ("lam-b", "two"): _sparsity(0.05, 1.0, 3.0),
            ("bm25", "one"): None, ("bm25", "two"): None}


def _suite(layout: dict, columns_at: str | None = None):
    raw = json.loads(json.dumps(SUITE))
    raw["table"] = {"layouts": {"lambda": layout}}
    return parse_suite(raw, Path("lsr.yaml"))


def _finished(root: Path) -> Path:
    """A results root holding what a finished suite ``lsr`` (tiny) exposes to its layouts."""
    report = report_dir(root, "lsr", "tiny")
    report.mkdir(parents=True)
    cells = [{"variant": v["id"], "key": f"k-{v['id']}"} for v in SUITE["variants"]]
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": "lsr", "cells": cells}), encoding="utf-8")
    for (variant, bench), values in NDCG.items():
        qids = ["q1", "q2"]
        run = Run.from_arrays(qids, ["d1", "d2"], [1.0, 0.5])
        evaluation = EvaluationResult(qids, {"ndcg@10": np.array(values)})
        manifest: dict = {"model": variant}
        if SPARSITY[(variant, bench)] is not None:
            manifest["sparse"] = {"backend": "exact", "sparsity": SPARSITY[(variant, bench)]}
        write_result(cell_result_dir(report, variant, bench), run=run, evaluation=evaluation,
                     card=ProtocolCard(suite="synthetic", dataset=bench, metrics=("ndcg@10",)), manifest=manifest)
    return root


LAYOUT = {"kind": "tradeoff", "columns": [{"benchmark": "one", "metric": "ndcg@10"}],
          "options": {"variants": ["lam-b", "lam-a", "base"], "line": ["lam-b", "lam-a"]}}


def test_table_rows_are_the_variants_with_their_stored_statistics_and_metric(tmp_path):
    root = _finished(tmp_path)
    table = render_layout(_suite(LAYOUT), "tiny", root, "lambda")
    assert [r.label for r in table.rows] == ["lambda b", "lambda a", "SPLADE"]
    assert [c.key for c in table.columns] == ["expected_flops", "query_nnz", "doc_nnz", "one/ndcg@10"]
    values = [[row.cells[c.key].value for c in table.columns] for row in table.rows]
    assert values == [[0.25, 2.0, 5.0, pytest.approx(15.0)], [3.0, 9.0, 40.0, pytest.approx(55.0)],
                      [12.0, 20.0, 80.0, pytest.approx(60.0)]]
    assert table.rows[2].kind == "baseline" and not table.columns[0].higher_is_better
    text = render_markdown(table)
    assert "| lambda b | **0.25** | **2.0** | **5.0** | 15.0 |" in text
    assert "| SPLADE | 12.00 | 20.0 | 80.0 | **60.0** |" in text


def test_an_aggregate_column_macro_averages_metric_and_statistics(tmp_path):
    root = _finished(tmp_path)
    layout = {**LAYOUT, "columns": [{"benchmark": "Avg", "metric": "ndcg@10"}],
              "options": {"x": "doc_nnz.p90"}}
    table = render_layout(_suite(layout), "tiny", root, "lambda")
    # Default points: every variant with statistics, in suite order; BM25 is named in the notes.
    assert [r.label for r in table.rows] == ["SPLADE", "lambda a", "lambda b"]
    base = {c.key: cell.value for c, cell in zip(table.columns, table.rows[0].cells.values())}
    assert table.columns[0].key == "doc_nnz.p90"
    assert base == {"doc_nnz.p90": pytest.approx((120.0 + 90.0) / 2), "expected_flops": pytest.approx(10.0),
                    "query_nnz": pytest.approx(15.0), "doc_nnz": pytest.approx(70.0),
                    "Avg/ndcg@10": pytest.approx((0.6 + 0.4) / 2 * 100)}
    assert any("Not sparse" in n and "BM25" in n for n in table.notes)
    assert any(n.startswith("Avg: mean over its benchmarks") for n in table.notes)


def test_figure_plots_one_labelled_point_per_variant_and_the_line(tmp_path):
    root = _finished(tmp_path)
    fig = layout_figure(_suite(LAYOUT), "tiny", root, "lambda")
    ax = fig.axes[0]
    line = ax.lines[0]
    assert list(line.get_xdata()) == [0.25, 3.0] and list(line.get_ydata()) == pytest.approx([0.15, 0.55])
    points = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert points == [(0.25, pytest.approx(0.15)), (3.0, pytest.approx(0.55)), (12.0, pytest.approx(0.6))]
    assert [t.get_text() for t in ax.texts] == ["lambda b", "lambda a", "SPLADE"]
    assert ax.get_xscale() == "log"         # auto: 12 / 0.25 > 20
    assert ax.get_xlabel() == "Expected FLOPs per query-document pair" and ax.get_ylabel() == "nDCG@10 (one)"
    linear = {**LAYOUT, "options": {**LAYOUT["options"], "log_x": False}}
    assert layout_figure(_suite(linear), "tiny", root, "lambda").axes[0].get_xscale() == "linear"


@pytest.mark.parametrize("options, columns, message", [
    ({"colour": "red"}, None, "unknown option.*colour.*known: x, variants, line, log_x"),
    ({"x": "flops"}, None, "option x 'flops' is not a sparsity statistic; choose one of expected_flops"),
    ({"variants": ["base", "nope"]}, None, "option 'variants' names unknown variant.*nope"),
    ({"variants": "base"}, None, "'variants' must be a non-empty list of variant ids"),
    ({"variants": ["base"], "line": ["lam-a"]}, None, "'line' names variant.*not points.*lam-a"),
    ({"log_x": "yes"}, None, "log_x must be true, false or auto"),
    ({}, [{"benchmark": "one", "metric": "ndcg@10"}, {"benchmark": "two", "metric": "ndcg@10"}],
     "exactly one column"),
    ({}, [{"benchmark": "three", "metric": "ndcg@10"}], "'three' is neither a benchmark nor an aggregate"),
])
def test_bad_options_are_refused_when_the_layout_loads(options, columns, message):
    layout = {"kind": "tradeoff", "columns": columns or LAYOUT["columns"], "options": options}
    with pytest.raises(ConfigError, match=message):
        load_layout(_suite(layout), "tiny", "lambda")


def test_a_named_variant_without_statistics_or_a_broken_statistic_is_an_error(tmp_path):
    root = _finished(tmp_path)
    layout = {**LAYOUT, "options": {"variants": ["base", "bm25"]}}
    with pytest.raises(ConfigError, match="variant 'bm25' has no sparsity statistics in .*results/bm25/one"):
        render_layout(_suite(layout), "tiny", root, "lambda")
    manifest = cell_result_dir(report_dir(root, "lsr", "tiny"), "lam-a", "one") / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["sparse"]["sparsity"]["expected_flops"] = "many"
    manifest.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="'expected_flops' must be a finite number, got 'many'"):
        render_layout(_suite(LAYOUT), "tiny", root, "lambda")


def test_the_splade_suite_declares_a_valid_tradeoff_layout_at_every_scale():
    from harness.ablation.spec import load_suite

    suite = load_suite("splade")
    raw = yaml.safe_load(Path(suite.path).read_text(encoding="utf-8"))
    assert raw["table"]["layouts"]["lambda"]["kind"] == "tradeoff"
    for scale in (s for s in suite.scales if suite.scale(s).recipe is None):     # not the smoke scale
        layout = load_layout(suite, scale, "lambda")
        assert len(layout.columns) == 1 and layout.columns[0].metric == "ndcg@10"
        assert set(layout.options["line"]) <= set(layout.options["variants"])


def test_points_that_coincide_share_one_label(tmp_path):
    root = _finished(tmp_path)
    # lambda a's result on "one" rewritten with the baseline's numbers: the two points coincide.
    target = cell_result_dir(report_dir(root, "lsr", "tiny"), "lam-a", "one")
    write_result(target, run=Run.from_arrays(["q1", "q2"], ["d1", "d2"], [1.0, 0.5]),
                 evaluation=EvaluationResult(["q1", "q2"], {"ndcg@10": np.array(NDCG[("base", "one")])}),
                 card=ProtocolCard(suite="synthetic", dataset="one", metrics=("ndcg@10",)),
                 manifest={"model": "lam-a", "sparse": {"sparsity": SPARSITY[("base", "one")]}})
    ax = layout_figure(_suite(LAYOUT), "tiny", root, "lambda").axes[0]
    assert len(ax.collections) == 3                                   # every point is drawn
    assert [t.get_text() for t in ax.texts] == ["lambda b", "lambda a\nSPLADE"]
