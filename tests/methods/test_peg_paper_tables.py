"""Paper 002's four result tables as layouts of the `peg` suite at paper scale: every task as its own column,
every printed row beside ours, our cells equal to the per-query means written into a finished run, and the
DuReader column the paper heads "Recall@10" shown as what it is (Recall@1, DuReader's hit rate)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.ablation import load_suite
from harness.ablation.axes import replicates, suite_systems
from harness.ablation.layout import render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.data.run import Run
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result

PAPER = Path(__file__).resolve().parents[2] / "reports" / "papers" / "002"
QIDS = [f"q{i}" for i in range(6)]
METRICS = ("ndcg@10", "map@1000", "mrr@10", "success@1", "success@50")


def write_finished(root: Path, scale: str):
    """A finished run of the peg suite at ``scale`` (as the runner writes it) with seeded per-query scores for
    every metric; returns (suite, root, scores)."""
    suite = load_suite("peg")
    rng = np.random.default_rng(0)
    report = report_dir(root, suite.name, scale)
    report.mkdir(parents=True)
    cells, scores = [], {}
    for system in suite_systems(suite):
        for replicate in replicates(suite, system, scale):
            cells.append({"variant": replicate.id, "key": f"k-{replicate.id}"})
            for bench in suite.scale(scale).benchmarks:
                values = {m: rng.random(len(QIDS)) for m in METRICS}
                scores[(replicate.id, bench.id)] = values
                write_result(cell_result_dir(report, replicate.id, bench.id),
                             run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                             evaluation=EvaluationResult(QIDS, values),
                             card=ProtocolCard(suite="cmteb", dataset=bench.id, metrics=METRICS), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return suite, root, scores


@pytest.fixture(scope="module")
def finished_paper(tmp_path_factory):
    return write_finished(tmp_path_factory.mktemp("peg-paper"), "paper")


# The public released checkpoints of the printed rows, evaluated as rows of ours (variants with method none),
# between ours and the printed rows; Table 4 prints only BGE (large) and Ours.
RELEASED = {1: ["peg-released", "bge-large-zh", "bge-base-zh", "m3e-base"],
            2: ["peg-released", "bge-large-zh", "bge-base-zh", "m3e-base"],
            3: ["peg-released", "bge-large-zh", "bge-base-zh", "m3e-base"],
            4: ["peg-released", "bge-large-zh"]}


def released_labels(suite, number: int) -> list[str]:
    return [suite.variant(v).label for v in RELEASED[number]]


def printed_rows(number: int) -> dict[str, list[str]]:
    doc = yaml.safe_load((PAPER / f"table{number}.yaml").read_text(encoding="utf-8"))
    return {r["label"]: r["cells"] for r in doc["rows"]}


@pytest.mark.parametrize("number,benchmarks,metric", [
    (1, ["t2", "mmarco", "du", "covid", "cmedqa", "ecom", "medical", "video"], "ndcg@10"),
    (2, ["t2-rerank", "mmarco-rerank", "cmedqa1-rerank", "cmedqa2-rerank"], "map@1000"),
])
def test_cmteb_tables_show_every_task_and_every_printed_row(finished_paper, number, benchmarks, metric):
    suite, root, scores = finished_paper
    table = render_layout(suite, "paper", root, f"table{number}")
    printed = printed_rows(number)
    labels = [r.label for r in table.rows]
    released = len(RELEASED[number])
    assert labels[:2] == ["Vanilla InfoNCE", "PEG"]
    assert labels[2:2 + released] == released_labels(suite, number)                       # evaluated as released
    assert labels[2 + released:] == [("PEG (paper 002)" if k == "Ours" else k) for k in printed]  # every printed row
    keys = [c.key for c in table.columns]
    assert len(keys) == len(benchmarks) + 1                                                # tasks + Avg
    for index, variant in enumerate(["peg", *RELEASED[number]]):
        row = table.rows[1 if index == 0 else 1 + index]
        for key, bench in zip(keys, benchmarks):
            assert row.cells[key].value == pytest.approx(scores[(variant, bench)][metric].mean())
        # the average: pooled over the same queries of every task = the mean of the task means
        assert row.cells[keys[-1]].value == pytest.approx(
            np.mean([scores[(variant, b)][metric].mean() for b in benchmarks]))
    for row in table.rows[2 + released:]:
        source = "Ours" if row.label == "PEG (paper 002)" else row.label
        assert [row.cells[k].value for k in keys] == pytest.approx([float(x) / 100 for x in printed[source]])


@pytest.mark.parametrize("number,bench", [(3, "dureader"), (4, "dureader-full")])
def test_dureader_tables_put_the_printed_recall10_header_under_recall1(finished_paper, number, bench):
    suite, root, scores = finished_paper
    table = render_layout(suite, "paper", root, f"table{number}")
    printed = printed_rows(number)
    released = len(RELEASED[number])
    assert [r.label for r in table.rows][2:2 + released] == released_labels(suite, number)
    assert [r.label for r in table.rows][2 + released:] == [("PEG (paper 002)" if k == "Ours" else k)
                                                            for k in printed]
    keys = [c.key for c in table.columns]
    for index, variant in enumerate(RELEASED[number]):                 # a released row: its own cells' means
        row = table.rows[2 + index]
        for key, metric in zip(keys, ("mrr@10", "success@1", "success@50")):
            assert row.cells[key].value == pytest.approx(scores[(variant, bench)][metric].mean())
    assert [c.label for c in table.columns] == ["MRR@10", "Recall@1 (printed: Recall@10)", "Recall@50"]
    peg = table.rows[1]
    for key, metric in zip(keys, ("mrr@10", "success@1", "success@50")):
        assert peg.cells[key].value == pytest.approx(scores[("peg", bench)][metric].mean())
    bge = next(r for r in table.rows if r.label == "BGE (large)")
    assert [bge.cells[k].value for k in keys] == pytest.approx([float(x) / 100 for x in printed["BGE (large)"]])
    # What the header means: every printed row has its second column below MRR@10, which a hit rate at 10 never
    # is (success@10 >= MRR@10 >= success@1); the text's gains over BGE (large) are differences of that column.
    assert all(float(cells[1]) < float(cells[0]) for cells in printed.values())
    gain = float(printed["Ours"][1]) - float(printed["BGE (large)"][1])
    assert gain == pytest.approx({3: 3.85, 4: 7.65}[number])       # "about 4%" (Table 3) and "7.65%" (Table 4)


def test_at_tiny_scale_the_tables_render_on_stand_ins_with_only_comparable_columns_printed(tmp_path):
    """Every layout has columns at every scale (a run at tiny validates them all); at tiny the printed numbers sit
    only under the stand-in average (Table 1) and the stand-in MRR@10 (Tables 3-4), never under Table 2's MAP."""
    suite, root, scores = write_finished(tmp_path, "tiny")
    t1 = render_layout(suite, "tiny", root, "table1")
    ours = next(r for r in t1.rows if r.label == "PEG (paper 002)")
    assert [ours.cells[c.key].value if c.key in ours.cells else None for c in t1.columns] == \
        [None, None, None, None, pytest.approx(0.7237)]
    assert any("not comparable in value" in n for n in t1.notes)
    t2 = render_layout(suite, "tiny", root, "table2")
    assert all(r.cells.get(c.key) is None or r.cells[c.key].value is None
               for r in t2.rows[2 + len(RELEASED[2]):] for c in t2.columns)    # no printed MAP under MRR@10
    t3 = render_layout(suite, "tiny", root, "table3")
    assert next(r for r in t3.rows if r.label == "BGE (large)").cells[t3.columns[0].key].value == \
        pytest.approx(0.8709)
    assert t3.rows[1].cells[t3.columns[0].key].value == pytest.approx(scores[("peg", "cjk_qa")]["mrr@10"].mean())
