"""Paper 001 Figure 1 as the coco_dr layout ``figure1`` (kind ``score-vs-size``): Table 1's printed Avg CPT Sub
and parameter counts for the systems of the figure, and our rows' CPT-Sub mean when a finished run has them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.ablation import load_suite
from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.ablation.layouts.score_size import parse_size
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.data.run import Run
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result

CPT_SUB = ["trec-covid", "nfcorpus", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "quora", "dbpedia-entity",
           "fever", "climate-fever", "scifact"]
QIDS = [f"q{i}" for i in range(4)]
# Table 1 (reports/papers/001/table1.yaml): (column label, Parameters#, Avg CPT Sub) as printed
PRINTED = [("DPR", "110M", 0.397), ("ANCE", "110M", 0.437), ("Contriever", "110M", 0.502),
           ("GTR-XL‡", "1.2B", 0.511), ("GTR-XXL", "4.8B", 0.516), ("CPT-L", "6B", 0.517), ("CPT-XL", "175B", 0.528),
           ("ColBERT", "110M", 0.473), ("Base", "110M", 0.521), ("Large", "335M", 0.541)]


def test_parse_size():
    assert parse_size("110M") == 1.1e8 and parse_size("1.2B") == 1.2e9 and parse_size("175B") == 1.75e11
    assert parse_size("66M*18") is None and parse_size("一") is None and parse_size("") is None


def _finished(root, suite, variants):
    rng = np.random.default_rng(3)
    report = report_dir(root, suite.name, "paper")
    report.mkdir(parents=True)
    means = {}
    for variant in variants:
        for bench in CPT_SUB:
            values = rng.random(len(QIDS))
            means[(variant, bench)] = float(values.mean())
            write_result(cell_result_dir(report, variant, bench), run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                         evaluation=EvaluationResult(QIDS, {"ndcg@10": values}),
                         card=ProtocolCard(suite="beir", dataset=bench, metrics=("ndcg@10",)), manifest={})
    cells = [{"variant": v, "key": f"k-{v}"} for v in ("coco-idro", "released-base", "released-large")]
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return means


def test_figure1_printed_points_and_our_finished_rows(tmp_path):
    suite = load_suite("coco_dr")
    # nothing run yet: the printed systems alone, our rows named as not run
    table = render_layout(suite, "paper", tmp_path / "empty", "figure1")
    assert [(r.label, r.cells["parameters"].value, r.cells["score"].value) for r in table.rows] == PRINTED
    assert "Not run yet (left out): coco-idro, released-base, released-large." in table.notes
    # coco-idro and the released Base finished; the released Large not
    means = _finished(tmp_path, suite, ["coco-idro", "released-base"])
    table = render_layout(suite, "paper", tmp_path, "figure1")
    ours = [r for r in table.rows if r.group == "Ours"]
    labels = {v.id: v.label for v in suite.variants}
    assert [(r.label, r.cells["parameters"].value) for r in ours] == [(labels["coco-idro"], "110M"),
                                                                      (labels["released-base"], "110M")]
    for row, variant in zip(ours, ("coco-idro", "released-base")):
        assert row.cells["score"].value == pytest.approx(np.mean([means[(variant, b)] for b in CPT_SUB]))
    assert "Not run yet (left out): released-large." in table.notes
    figure = layout_figure(suite, "paper", tmp_path, "figure1")
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and len(ax.collections) == 2           # printed and ours
    assert sorted(ax.collections[0].get_offsets()[:, 0]) == sorted(parse_size(p) for _, p, _ in PRINTED)
    # at paper-large our COCO-DR row is BERT-large
    assert load_layout(suite, "paper-large", "figure1").options["sizes"]["coco-idro"] == "335M"


def test_figure1_refuses_a_column_without_one_size():
    import copy

    from harness.ablation.spec import parse_suite

    suite = load_suite("coco_dr")
    raw = copy.deepcopy(suite.raw)
    raw["table"]["layouts"]["figure1"]["options"]["printed"]["columns"].append("gpl")
    with pytest.raises(ConfigError, match="column 'gpl' of .* prints no single size"):
        load_layout(parse_suite(raw, suite.path), "paper", "figure1")
    raw = copy.deepcopy(suite.raw)
    del raw["table"]["layouts"]["figure1"]["scales"]["paper"]["options"]["sizes"]["released-base"]
    with pytest.raises(ConfigError, match="sizes must give row 'released-base' a parameter count"):
        load_layout(parse_suite(raw, suite.path), "paper", "figure1")
