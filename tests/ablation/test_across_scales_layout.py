"""Layout kind ``across-scales``: one results layout gathered over several scales into one grid (a block of rows
per scale), rendered from finished runs written here as the runner writes them.  Each block must equal the layout's
own table at that scale with the block's rows (values, differences, significance marks: the block's own family),
printed rows come from the transcription, and a scale not run shows its printed rows only."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.ablation import load_suite
from harness.ablation.axes import replicates, suite_systems
from harness.ablation.layout import load_layout, render_layout, results_table
from harness.ablation.layouts.across_scales import block_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.ablation.spec import parse_suite
from harness.data.run import Run
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result
from reports.markdown import render_markdown

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"
PAPER = Path(__file__).resolve().parents[2] / "reports" / "papers" / "000" / "table3.yaml"
QIDS = [f"q{i}" for i in range(12)]


def write_finished(root: Path, suite, scale: str, systems: list[str], metrics: tuple[str, ...], seed: int) -> dict:
    """Per-query scores of ``systems`` on every benchmark of ``scale``, stored as a finished run; returns them."""
    rng = np.random.default_rng(seed)
    report = report_dir(root, suite.name, scale)
    report.mkdir(parents=True)
    cells, scores = [], {}
    for system in suite_systems(suite):
        if system.id not in systems:
            continue
        for replicate in replicates(suite, system, scale):
            cells.append({"variant": replicate.id, "key": f"{scale}-{replicate.id}"})
            for bench in suite.scale(scale).benchmarks:
                values = {m: rng.random(len(QIDS)) for m in metrics}
                scores[(replicate.id, bench.id)] = values
                write_result(cell_result_dir(report, replicate.id, bench.id),
                             run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]), evaluation=EvaluationResult(QIDS, values),
                             card=ProtocolCard(suite="synthetic", dataset=bench.id, metrics=metrics), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return scores


def printed(row: str, column: int) -> float:
    doc = yaml.safe_load(PAPER.read_text(encoding="utf-8"))
    text = next(r for r in doc["rows"] if r["id"] == row)["cells"][column]     # e.g. "48.7* (+2.9)"
    return float(re.match(r"[\d.]+", text).group()) / 100


def mini_suite():
    """The mini suite at three scales (tiny, tiny-b: another seed, tiny-c: never run) with a results layout
    'main' showing two printed rows of paper 000 Table 3 (stand-ins, mapped to its MIRACL nDCG@10 column) and the
    grid 'grid' over the three scales."""
    raw = yaml.safe_load(MINI.read_text(encoding="utf-8"))
    raw["scales"]["tiny-b"] = copy.deepcopy(raw["scales"]["tiny"])
    raw["scales"]["tiny-b"]["train"]["seed"] = 8
    raw["scales"]["tiny-c"] = copy.deepcopy(raw["scales"]["tiny"])
    columns = [{"benchmark": "latin_qa", "metric": "ndcg@10", "reported_column": "miracl/ndcg@10"},
               {"benchmark": "cjk_qa", "metric": "ndcg@10"}]
    raw["table"] = {"layouts": {
        "main": {"rows": ["uniform", "hn-only",
                          {"reported": {"paper": "tdro", "table": 3, "row": "base/qwen-0.5b"}, "label": "Qwen-0.5B"},
                          {"reported": {"paper": "tdro", "table": 3, "row": "base/qwen-1.8b"}, "label": "Qwen-1.8B"}],
                 "columns": columns},
        "grid": {"kind": "across-scales", "caption": "grid",
                 "options": {"layout": "main",
                             "scales": {"tiny": {"label": "A", "reported": {"base/qwen-0.5b": "Printed A"}},
                                        "tiny-b": {"label": "B", "rows": ["hn-only"],
                                                   "reported": ["base/qwen-1.8b"]},
                                        "tiny-c": {"label": "C", "reported": {"base/qwen-1.8b": "Printed C"}}}}}}}
    return parse_suite(raw, MINI)


@pytest.fixture(scope="module")
def finished_mini(tmp_path_factory):
    suite = mini_suite()
    root = tmp_path_factory.mktemp("grid")
    scores = {"tiny": write_finished(root, suite, "tiny", ["uniform", "hn-only"], ("ndcg@10",), 0),
              "tiny-b": write_finished(root, suite, "tiny-b", ["uniform", "hn-only"], ("ndcg@10",), 1)}
    return suite, root, scores


def test_grid_blocks_equal_each_scales_own_table(finished_mini):
    suite, root, scores = finished_mini
    grid = render_layout(suite, "tiny", root, "grid")
    assert [(r.group, r.label) for r in grid.rows] == [
        ("A", "uniform"), ("A", "HN only"), ("A", "Printed A"),
        ("B", "uniform"), ("B", "HN only"), ("B", "Qwen-1.8B"),       # the baseline is always a block's first row
        ("C", "Printed C")]                                            # not run: printed rows only
    assert [c.key for c in grid.columns] == ["latin_qa/ndcg@10", "cjk_qa/ndcg@10"]
    layout = load_layout(suite, "tiny", "grid")
    for block_rows, scale in ((grid.rows[:3], "tiny"), (grid.rows[3:6], "tiny-b")):
        block = {"label": "", "rows": None if scale == "tiny" else ["hn-only"],
                 "reported": {"base/qwen-0.5b": "Printed A"} if scale == "tiny" else {"base/qwen-1.8b": None}}
        alone = results_table(suite, scale, root, block_layout(suite, layout, scale, block))
        for mine, theirs in zip(block_rows, alone.rows):
            assert mine.label == theirs.label and mine.kind == theirs.kind
            for key, cell in theirs.cells.items():
                assert (mine.cells[key].value, mine.cells[key].delta, mine.cells[key].marks) == \
                       (cell.value, cell.delta, cell.marks)
        # ours: the per-query means of the stored scores of that scale
        for row, variant in zip(block_rows[:2], ["uniform", "hn-only"]):
            for bench in ("latin_qa", "cjk_qa"):
                assert row.cells[f"{bench}/ndcg@10"].value == pytest.approx(
                    scores[scale][(variant, bench)]["ndcg@10"].mean())
    assert grid.rows[3].cells["latin_qa/ndcg@10"].value != grid.rows[0].cells["latin_qa/ndcg@10"].value
    # printed rows: Table 3's MIRACL nDCG@10 of that backbone (column 0), only under the column that names it
    assert grid.rows[2].cells["latin_qa/ndcg@10"].value == pytest.approx(printed("base/qwen-0.5b", 0))
    assert grid.rows[5].cells["latin_qa/ndcg@10"].value == pytest.approx(printed("base/qwen-1.8b", 0))
    assert grid.rows[6].cells["latin_qa/ndcg@10"].value == pytest.approx(printed("base/qwen-1.8b", 0))
    assert "cjk_qa/ndcg@10" not in grid.rows[6].cells
    assert any("[C: scale tiny-c] not run" in n for n in grid.notes)
    text = render_markdown(grid)
    assert "Printed C" in text and "grid" in text


def test_grid_bold_marks_the_best_of_each_block(finished_mini):
    suite, root, _ = finished_mini
    grid = render_layout(suite, "tiny", root, "grid")
    for block in ("A", "B"):        # ours only (printed cells are not ranked, and have no cjk_qa column)
        rows = [r for r in grid.rows if r.group == block and "cjk_qa/ndcg@10" in r.cells]
        values = [r.cells["cjk_qa/ndcg@10"].value for r in rows]
        assert len(rows) == 2
        # one bold per block (a grid-wide ranking would bold one cell of the whole column)
        assert [r.cells["cjk_qa/ndcg@10"].bold for r in rows] == [v == max(values) for v in values]


def test_grid_refuses_what_it_cannot_gather(finished_mini, tmp_path):
    suite, root, _ = finished_mini
    with pytest.raises(ConfigError, match="none of its scales"):
        render_layout(suite, "tiny", tmp_path, "grid")
    raw = copy.deepcopy(suite.raw)
    grid = raw["table"]["layouts"]["grid"]
    grid["options"]["scales"]["tiny"]["reported"] = ["base/qwen-7b"]
    with pytest.raises(ConfigError, match="no printed row 'base/qwen-7b'"):
        load_layout(parse_suite(raw, MINI), "tiny", "grid")
    raw = copy.deepcopy(suite.raw)
    raw["table"]["layouts"]["grid"]["columns"] = [{"benchmark": "cjk_qa", "metric": "ndcg@10"}]
    with pytest.raises(ConfigError, match="takes no columns of its own"):
        load_layout(parse_suite(raw, MINI), "tiny", "grid")
    raw = copy.deepcopy(suite.raw)
    raw["table"]["layouts"]["main"]["scales"] = {"tiny-b": {"columns": [{"benchmark": "cjk_qa", "metric": "ndcg@10"}]}}
    with pytest.raises(ConfigError, match="other columns at scale 'tiny-b'"):
        load_layout(parse_suite(raw, MINI), "tiny", "grid")
    raw = copy.deepcopy(suite.raw)
    raw["table"]["layouts"]["grid"]["options"]["scales"]["huge"] = "H"
    with pytest.raises(ConfigError, match="no scale 'huge'"):
        load_layout(parse_suite(raw, MINI), "tiny", "grid")


@pytest.mark.slow
def test_tdro_table3_grid_renders_six_backbones_from_two_finished_scales(tmp_path):
    """Paper 000 Table 3 as one grid: the paper (Qwen-0.5B) and paper-1.8b scales finished, the other four
    backbones not run (their printed rows only)."""
    suite = load_suite("tdro")
    metrics = ("ndcg@10", "recall@100", "acc@10", "acc@100")
    shown = {"paper": ["baseline", "top70", "ratio", "released-qwen0.5b-baseline", "released-qwen0.5b-top70",
                       "released-qwen0.5b-reweighting"], "paper-1.8b": ["baseline", "top70", "ratio"]}
    scores = {s: write_finished(tmp_path, suite, s, v, metrics, i) for i, (s, v) in enumerate(shown.items())}
    grid = render_layout(suite, "paper", tmp_path, "table3-grid")
    groups = list(dict.fromkeys(r.group for r in grid.rows))
    assert groups == ["Qwen-0.5B", "Qwen-1.8B", "Qwen-4B", "Qwen-7B", "Mistral-7B", "Llama3-8B"]
    per_group = {g: [r for r in grid.rows if r.group == g] for g in groups}
    assert len(per_group["Qwen-0.5B"]) == 6 + 3 and len(per_group["Qwen-1.8B"]) == 3 + 3
    assert all(len(per_group[g]) == 3 for g in groups[2:])          # printed only
    miracl = [b.id for b in suite.scale("paper").benchmarks if b.id.startswith("miracl-")]
    assert len(miracl) == 18
    for scale, group in (("paper", "Qwen-0.5B"), ("paper-1.8b", "Qwen-1.8B")):
        for row, variant in zip(per_group[group], shown[scale]):
            assert row.label == suite.variant(variant).label
            # MIRACL (18): pooled over the same number of queries per language = the mean of the language means
            assert row.cells["MIRACL/ndcg@10"].value == pytest.approx(
                np.mean([scores[scale][(variant, b)]["ndcg@10"].mean() for b in miracl]))
    for group, key in (("Qwen-0.5B", "qwen-0.5b"), ("Mistral-7B", "mistral-7b"), ("Llama3-8B", "llama3-8b")):
        printed_rows = per_group[group][-3:]
        assert [r.label for r in printed_rows] == ["Uniform Sampling Baseline (paper 000)",
                                                   "tDRO - Dataset Selection Top-70% (paper 000)",
                                                   "tDRO - Sample Ratio Reweighting (paper 000)"]
        for row, name in zip(printed_rows, ("base", "top70", "rw")):
            values = [row.cells[k].value for k in ("MIRACL/ndcg@10", "MIRACL/recall@100", "MKQA/acc@10",
                                                   "MKQA/acc@100", "BEIR/ndcg@10")]
            assert values == pytest.approx([printed(f"{name}/{key}", j) for j in range(5)])
