"""The ``Worst Δ`` column of the dro-results layout (paper 001's worst-dataset delta) with two benchmarks and
two metrics: the lowest delta over the datasets on the suite's reported metric, never a Recall column."""
from __future__ import annotations

import pytest

from harness.ablation.layouts.dro import WORST, add_worst_delta
from reports.markdown import render_markdown
from reports.table import Cell, Column, Row, Table

COLUMNS = [("scifact", "ndcg@10"), ("scifact", "recall@100"), ("xquad-en", "ndcg@10"), ("xquad-en", "recall@100"),
           ("avg", "ndcg@10")]


def table() -> Table:
    def row(label, kind, deltas):
        return Row(label, {f"{b}/{m}": Cell(0.5, d) for (b, m), d in zip(COLUMNS, deltas)}, kind=kind)

    return Table(columns=[Column(f"{b}/{m}", m, group=b) for b, m in COLUMNS],
                 rows=[row("Baseline", "baseline", [None] * 5),
                       # worst nDCG on XQuAD-en; its Recall@100 and the aggregate are lower still but not counted
                       row("+COCO", "data", [0.02, -0.09, -0.01, -0.2, -0.3]),
                       row("+iDRO", "data", [-0.03, 0.0, 0.01, 0.01, 0.0]),
                       row("no deltas", "data", [None] * 5)])


def test_worst_delta_is_over_the_datasets_of_the_reported_metric():
    out = add_worst_delta(table(), COLUMNS, {"avg"}, "ndcg@10", {"xquad-en": "XQuAD-en", "scifact": "SciFact"})
    rows = {r.label: r for r in out.rows}
    assert rows["+COCO"].cells[WORST].value == pytest.approx(-0.01)
    assert rows["+iDRO"].cells[WORST].value == pytest.approx(-0.03)
    assert WORST not in rows["Baseline"].cells and WORST not in rows["no deltas"].cells
    assert out.columns[-1].key == WORST
    assert out.notes[-1] == ("Worst Δ: the lowest difference to the baseline over the benchmark columns of ndcg@10 "
                             "(aggregates left out); +COCO: XQuAD-en (ndcg@10); +iDRO: SciFact (ndcg@10).")
    assert "Worst Δ" in render_markdown(out)


def test_without_a_column_of_the_reported_metric_every_benchmark_column_counts():
    recall = [c for c in COLUMNS if c[1] == "recall@100"]
    out = add_worst_delta(table(), recall, set(), "ndcg@10")
    rows = {r.label: r for r in out.rows}
    assert rows["+COCO"].cells[WORST].value == pytest.approx(-0.2)
    assert rows["+iDRO"].cells[WORST].value == pytest.approx(0.0)
    assert "+COCO: xquad-en (recall@100)" in out.notes[-1]
