"""Layout kind ``weights-printed`` (paper 000 Table 8 / Figure 3): learned weights beside the printed ones, read
from a written finished suite at paper scale (each variant's exported method/weights.json)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from harness.ablation import load_suite
from harness.ablation.layout import load_layout, render_layout
from harness.ablation.layouts.printed_weights import PrintedWeightsLayout
from harness.ablation.paths import SUMMARY_FILE, report_dir, train_cell_dir
from harness.errors import ConfigError

OURS = {"baseline": {"miracl": 0.5, "yahoo_answers": 0.5},
        "relative": {"miracl": 0.7, "yahoo_answers": 0.3},
        "excess": {"miracl": 0.4, "yahoo_answers": 0.6},
        "proxy": {"miracl": 0.2, "yahoo_answers": 0.8}}


@pytest.fixture
def finished(tmp_path):
    folder = report_dir(tmp_path, "tdro", "paper")
    folder.mkdir(parents=True)
    (folder / SUMMARY_FILE).write_text(json.dumps({"cells": [{"variant": v, "key": f"k{i}"}
                                                             for i, v in enumerate(OURS)]}))
    for i, weights in enumerate(OURS.values()):
        method = train_cell_dir(tmp_path, f"k{i}") / "method"
        method.mkdir(parents=True)
        (method / "weights.json").write_text(json.dumps(weights))
    return load_suite("tdro"), tmp_path


def test_printed_weights_beside_ours(finished):
    suite, root = finished
    table = render_layout(suite, "paper", root, "table8")
    assert [c.key for c in table.columns] == ["baseline", "printed/baseline", "relative", "printed/relative",
                                              "excess", "printed/excess", "proxy", "printed/proxy"]
    rows = {r.label: r for r in table.rows}
    # Table 8 prints miracl 0.0400 / 0.1314 / 0.1376 / 0.1193 and yahoo_answers 0.0400 / 0.0838 / 0.1537 / 0.1935
    assert [rows["miracl"].cells[k].value for k in ("relative", "printed/relative", "printed/excess",
                                                     "printed/proxy")] == [0.7, 0.1314, 0.1376, 0.1193]
    assert rows["yahoo_answers"].cells["printed/proxy"].value == 0.1935
    assert rows["miracl"].cells["printed/baseline"].note.endswith("0.0400 printed")
    assert rows["Sum"].cells["printed/relative"].value is None and rows["Sum"].cells["relative"].value == 1.0


def test_without_reported_it_is_the_weights_table_and_options_are_checked(finished):
    suite, _ = finished
    tiny = load_layout(suite, "tiny", "table8")
    assert tiny.options == {}
    layout = load_layout(suite, "paper", "table8")
    bad = dataclasses.replace(layout, options={**layout.options, "columns": {"relative": "tdro"}})
    with pytest.raises(ConfigError, match="has no column 'tdro'; columns: baseline, excess, proxy, relative"):
        PrintedWeightsLayout().check(bad, suite, "paper")
    bad = dataclasses.replace(layout, options={**layout.options, "columns": {"top70": "relative"}})
    with pytest.raises(ConfigError, match="columns names 'top70', not a column of this layout"):
        PrintedWeightsLayout().check(bad, suite, "paper")
