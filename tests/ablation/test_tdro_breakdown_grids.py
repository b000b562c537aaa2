"""Paper 000 Tables 9, 10 and 11 as grids over the six backbones (tdro layouts table9-grid, table10-grid,
table11-grid: kind across-scales over table9 / table10 / table11), rendered from finished runs written here as
the runner writes them.

Fast: each grid renders (asked at tiny, the default scale; its blocks are checked at every scale by
test_every_scale_validates) from a finished paper-1.8b run of the three trained rows on the benchmarks that grid
shows only, a few seconds each.  Slow: the paper scale (Qwen-0.5B with its released checkpoints) finished on every
benchmark: our cells are the stored per-query means, Avg the aggregate (CQADupStack counted once), each printed row
of each backbone equals the transcription (reports/papers/000/table{9,10,11}.yaml) under every column, and the
five backbones not run show their printed rows only."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import harness.store
from harness.ablation import load_suite
from harness.ablation.axes import replicates, suite_systems
from harness.ablation.layout import load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.data.run import Run
from harness.encoders.known import find_known_model
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result
from reports.markdown import render_markdown

PAPERS = Path(__file__).resolve().parents[2] / "reports" / "papers" / "000"
QIDS = [f"q{i}" for i in range(6)]
BACKBONES = [("paper", "Qwen-0.5B", "qwen-0.5b"), ("paper-1.8b", "Qwen-1.8B", "qwen-1.8b"),
             ("paper-4b", "Qwen-4B", "qwen-4b"), ("paper-7b", "Qwen-7B", "qwen-7b"),
             ("paper-mistral-7b", "Mistral-7B", "mistral-7b"), ("paper-llama3-8b", "Llama3-8B", "llama3-8b")]
OURS = ["baseline", "top70", "ratio", "released-qwen0.5b-baseline", "released-qwen0.5b-top70",
        "released-qwen0.5b-reweighting"]
PRINTED = [("base", "Uniform Sampling Baseline (paper 000)"),
           ("top70", "tDRO - Dataset Selection Top-70% (paper 000)"),
           ("ratio", "tDRO - Sample Ratio Reweighting (paper 000)")]
# grid -> (transcribed table, the metric of its columns, which benchmarks of the paper scale it shows)
GRIDS = {"table9-grid": (9, "ndcg@10", lambda b: b.startswith("miracl-")),
         "table10-grid": (10, "acc@100", lambda b: b.startswith("mkqa-")),
         "table11-grid": (11, "ndcg@10", lambda b: not b.startswith(("miracl-", "mkqa-")))}


def write_finished(root: Path, suite, scale: str, systems: list[str], metrics: dict[str, str]) -> dict:
    """Per-query scores of ``systems`` on the benchmarks ``metrics`` names (benchmark -> metric), stored as a
    finished run of ``scale``; returns them by (variant, benchmark)."""
    rng = np.random.default_rng(0)
    report = report_dir(root, suite.name, scale)
    report.mkdir(parents=True)
    cells, scores = [], {}
    with pytest.MonkeyPatch.context() as patch:
        # the manifest's library versions (half of each write's time: package metadata) are not read here
        patch.setattr(harness.store, "library_versions", dict)
        for system in suite_systems(suite):
            if system.id not in systems:
                continue
            for replicate in replicates(suite, system, scale):
                cells.append({"variant": replicate.id, "key": f"{scale}-{replicate.id}"})
                for bench, metric in metrics.items():
                    values = {metric: rng.random(len(QIDS))}
                    scores[(replicate.id, bench)] = values[metric]
                    write_result(cell_result_dir(report, replicate.id, bench),
                                 run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                                 evaluation=EvaluationResult(QIDS, values),
                                 card=ProtocolCard(suite="synthetic", dataset=bench, metrics=(metric,)), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return scores


def transcribed(table: int) -> tuple[list[str], dict[str, list[float]]]:
    """The transcription's column keys and each row's printed values (the number before any '*' / gain)."""
    doc = yaml.safe_load((PAPERS / f"table{table}.yaml").read_text(encoding="utf-8"))
    keys = [c["key"] for c in doc["columns"]]
    rows = {r["id"]: [float(re.match(r"[\d.]+", c).group()) / 100 for c in r["cells"]]
            for r in doc["rows"] if "id" in r}
    return keys, rows


def grid_benchmarks(suite, name: str) -> dict[str, str]:
    """The paper-scale benchmarks grid ``name`` reads (CQADupStack's forums are benchmarks of their own, averaged
    into its column) -> their metric."""
    _, metric, pick = GRIDS[name]
    return {b.id: metric for b in suite.scale("paper").benchmarks if pick(b.id)}


def all_grid_benchmarks(suite) -> dict[str, str]:
    shown: dict[str, str] = {}
    for name in GRIDS:
        shown.update(grid_benchmarks(suite, name))
    return shown


@pytest.fixture(scope="module")
def finished_1_8b(tmp_path_factory):
    """paper-1.8b finished: its three trained rows on every benchmark of the scale (210 results)."""
    suite = load_suite("tdro")
    root = tmp_path_factory.mktemp("grid-1.8b")
    return suite, root, write_finished(root, suite, "paper-1.8b", ["baseline", "top70", "ratio"],
                                       all_grid_benchmarks(suite))


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_breakdown_grid_renders_from_one_finished_backbone(finished_1_8b, name: str) -> None:
    suite, root, scores = finished_1_8b
    table, _, _ = GRIDS[name]
    grid = render_layout(suite, "tiny", root, name)
    keys, printed = transcribed(table)
    blocks = {label: [r for r in grid.rows if r.group == label] for _, label, _ in BACKBONES}
    assert [len(rows) for rows in blocks.values()] == [3, 6, 3, 3, 3, 3]
    ours = ("baseline", "top70", "ratio")
    assert [r.label for r in blocks["Qwen-1.8B"][:3]] == [suite.variant(v).label for v in ours]
    first = grid.columns[0].key                      # ar / ar / ArguAna
    bench = first.split("/")[0]
    assert blocks["Qwen-1.8B"][1].cells[first].value == pytest.approx(scores[("top70", bench)].mean())
    assert blocks["Llama3-8B"][0].cells[first].value == pytest.approx(printed["base/llama3-8b"][0])
    assert len(grid.columns) == len(keys)
    assert "Llama3-8B" in render_markdown(grid)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    suite = load_suite("tdro")
    root = tmp_path_factory.mktemp("grids")
    return suite, root, write_finished(root, suite, "paper", OURS, all_grid_benchmarks(suite))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GRIDS))
def test_breakdown_grid_blocks_and_printed_rows(finished, name: str) -> None:
    suite, root, scores = finished
    table, metric, _ = GRIDS[name]
    grid = render_layout(suite, "paper", root, name)
    groups = list(dict.fromkeys(r.group for r in grid.rows))
    assert groups == [label for _, label, _ in BACKBONES]         # every backbone: Tables 9-11 print all six
    blocks = {g: [r for r in grid.rows if r.group == g] for g in groups}
    assert len(blocks["Qwen-0.5B"]) == len(OURS) + 3
    assert all(len(blocks[g]) == 3 for g in groups[1:])          # not run: the three printed rows only
    for scale, label, _ in BACKBONES[1:]:
        assert any(n.startswith(f"[{label}: scale {scale}] not run") for n in grid.notes)
    # ours: the per-query means of the stored scores, under the layout's per-language / per-dataset columns
    keys, printed = transcribed(table)
    inner = load_layout(suite, "paper", name.removesuffix("-grid"))
    columns = [(f"{c.benchmark}/{c.metric}", c.benchmark, c.reported_column) for c in inner.columns]
    assert [c.key for c in grid.columns] == [k for k, _, _ in columns]
    assert [r for _, _, r in columns] == keys                    # every printed column has ours beside it
    for row, variant in zip(blocks["Qwen-0.5B"], OURS):
        assert row.label == suite.variant(variant).label
        for key, bench, _ in columns[:-1]:
            if bench == "CQADupStack":
                forums = [b for (v, b) in scores if v == variant and b.startswith("cqadupstack")]
                assert len(forums) == 12
                expected = np.mean([scores[(variant, b)].mean() for b in forums])
            else:
                expected = scores[(variant, bench)].mean()
            assert row.cells[key].value == pytest.approx(expected)
            assert metric in key
        # Avg: the aggregate (MIRACL, MKQA, BEIR-15 with CQADupStack counted once) = the mean of the columns
        # before it (the same number of queries in every benchmark here)
        assert row.cells[columns[-1][0]].value == pytest.approx(
            np.mean([row.cells[k].value for k, _, _ in columns[:-1]]))
    # the printed rows of every backbone, relabelled, with every transcribed column (Avg included)
    for _, label, key in BACKBONES:
        rows = blocks[label][-3:]
        assert [r.label for r in rows] == [text for _, text in PRINTED]
        for row, (name_, _) in zip(rows, PRINTED):
            assert [row.cells[k].value for k, _, _ in columns] == pytest.approx(printed[f"{name_}/{key}"])
    text = render_markdown(grid)
    assert "Llama3-8B" in text and "Table " + str(table) in text


def test_table4_e5_mistral_star_is_said_not_released() -> None:
    """Table 4's E5-Mistral* BeIR score is E5-Mistral without GPT data (the caption), a model not released: the
    printed row's label and the public checkpoint's registry card say so, and the row is the public model's."""
    layout = load_layout(load_suite("tdro"), "paper", "table4")
    star = next(g for g in layout.rows if g.reported is not None and g.reported.reported.row == "E5-Mistral*")
    assert "not released" in star.reported.label and "without GPT data" in star.reported.label
    card = find_known_model("intfloat/e5-mistral-7b-instruct")
    assert card is not None and "000/table4:E5-Mistral*" in card.papers
    assert "not released" in card.notes and "GPT-synthesised" in card.notes
    assert "with GPT data" in load_suite("tdro").variant("e5-mistral").label


REFERENCES = {9: ["BM25", "mContriever", "mE5-large-inst", "E5-Mistral"],
              10: ["BM25", "mContriever", "mE5-large-inst", "E5-Mistral-7b"],
              11: ["BM25", "Contriever", "mE5-large-inst", "E5-Mistral-7b"]}


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_the_per_backbone_tables_print_the_reference_retrievers(finished_1_8b, name: str) -> None:
    """Tables 9-11 print four reference retrievers above the backbones; they belong to no backbone (not a grid
    block), so each backbone's own table shows them, printed, beside ours."""
    suite, root, _ = finished_1_8b
    table, _, _ = GRIDS[name]
    shown = render_layout(suite, "paper-1.8b", root, name.removesuffix("-grid"))
    group = f"Reference retrievers (paper 000, Tab. {table})"
    rows = [r for r in shown.rows if r.group == group]
    keys, printed = transcribed(table)
    assert len(rows) == 4
    first = shown.columns[0].key
    for row, ref in zip(rows, REFERENCES[table]):
        assert row.cells[first].value == pytest.approx(printed[ref][0])
