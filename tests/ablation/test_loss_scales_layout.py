"""Layout kind ``loss-scales`` (paper 000 Tables 1 and 7): per-training-set losses read from a training log,
checked against hand-computed means on a written log."""
from __future__ import annotations

import dataclasses
import json

import pytest

from harness.ablation import load_suite
from harness.ablation.layout import load_layout, render_layout
from harness.ablation.layouts.loss_scales import dataset_losses
from harness.ablation.paths import SUMMARY_FILE, report_dir, train_cell_dir
from harness.errors import ConfigError
from harness.train.logs import LOG_FILE

# homogeneous steps (one set each), one mixed step (not attributed), method scalars of a mixed-batch run
RECORDS = [
    {"step": 1, "infonce": 4.0, "counts": {"latin_noisy": 32}, "method": {"ref_loss/latin_qa": 1.0}},
    {"step": 2, "infonce": 1.0, "counts": {"latin_qa": 32}, "method": {"ref_loss/latin_qa": 3.0}},
    {"step": 3, "infonce": 2.0, "counts": {"latin_noisy": 32}, "method": {"ref_loss/cjk_qa": 0.5}},
    {"step": 4, "infonce": 9.0, "counts": {"latin_qa": 16, "cjk_qa": 16}, "method": {}},
    {"step": 5, "infonce": 0.5, "counts": {"cjk_qa": 32}, "method": {"ref_loss/cjk_qa": 1.5}},
]


def test_means_per_set():
    assert dataset_losses(RECORDS) == {"latin_noisy": (3.0, 2), "latin_qa": (1.0, 1), "cjk_qa": (0.5, 1)}
    assert dataset_losses(RECORDS, last=3) == {"latin_noisy": (2.0, 1), "cjk_qa": (0.5, 1)}
    assert dataset_losses(RECORDS, scalar="ref_loss") == {"latin_qa": (2.0, 2), "cjk_qa": (1.0, 2)}


@pytest.fixture
def finished(tmp_path):
    """A results root where the tdro suite's tiny baseline cell has a training log."""
    suite = load_suite("tdro")
    folder = report_dir(tmp_path, "tdro", "tiny")
    folder.mkdir(parents=True)
    (folder / SUMMARY_FILE).write_text(json.dumps({"cells": [{"variant": "baseline", "key": "abc123"}]}))
    cell = train_cell_dir(tmp_path, "abc123")
    cell.mkdir(parents=True)
    (cell / LOG_FILE).write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return suite, tmp_path


def test_table7_and_table1_layouts(finished):
    suite, root = finished
    table = render_layout(suite, "tiny", root, "table7")
    assert [r.label for r in table.rows] == ["latin_noisy", "latin_qa", "cjk_qa"]      # descending, as Table 7
    assert [r.cells["baseline"].value for r in table.rows] == [3.0, 1.0, 0.5]
    assert "1-2 logged steps per set" in table.notes[0]
    table1 = render_layout(suite, "tiny", root, "table1")
    assert [(r.label, r.cells["baseline"].value) for r in table1.rows] == [
        ("latin_noisy", 3.0), ("latin_qa", 1.0), ("cjk_qa", 0.5)]


def test_options_are_checked():
    suite = load_suite("tdro")
    layout = load_layout(suite, "tiny", "table7")
    from harness.ablation.layouts.loss_scales import LossScalesLayout

    bad = dataclasses.replace(layout, options={"sort": "sideways"})
    with pytest.raises(ConfigError, match="sort must be one of desc, asc, none"):
        LossScalesLayout().check(bad, suite, "tiny")


PAPER_RECORDS = [
    {"step": 1, "infonce": 3.9, "counts": {"yahoo_answers": 2048}},
    {"step": 2, "infonce": 2.1, "counts": {"eli5": 2048}},
    {"step": 3, "infonce": 0.02, "counts": {"altlex": 2048}},
    {"step": 4, "infonce": 0.7, "counts": {"dureader": 2048}},
]


def test_printed_losses_beside_ours_at_paper_scale(tmp_path):
    from reports.markdown import render_markdown

    suite = load_suite("tdro")
    folder = report_dir(tmp_path, "tdro", "paper")
    folder.mkdir(parents=True)
    (folder / SUMMARY_FILE).write_text(json.dumps({"cells": [{"variant": "baseline", "key": "k0"}]}))
    cell = train_cell_dir(tmp_path, "k0")
    cell.mkdir(parents=True)
    (cell / LOG_FILE).write_text("".join(json.dumps(r) + "\n" for r in PAPER_RECORDS))
    table7 = render_layout(suite, "paper", tmp_path, "table7")
    key = "reported/000/7"
    assert [(r.label, r.cells["baseline"].value, r.cells[key].value) for r in table7.rows] == [
        ("yahoo_answers", 3.9, 3.9257), ("eli5", 2.1, 2.1336),        # Table 7 prints eli5_question_answer
        ("dureader", 0.7, 0.6925), ("altlex", 0.02, 0.0163)]
    md = render_markdown(table7)
    assert "| yahoo\\_answers | 3.9000 | 3.9257<sup>§</sup>" in md     # losses as they are, not x 100
    table1 = render_layout(suite, "paper", tmp_path, "table1")
    assert [(r.label, r.cells["baseline"].value, r.cells["reported/000/1"].value) for r in table1.rows] == [
        ("yahoo_answers", 3.9, 3.9257), ("msmarco", None, 1.3312), ("dureader", 0.7, 0.6925)]


def test_reported_option_is_checked():
    from harness.ablation.layouts.loss_scales import LossScalesLayout

    suite = load_suite("tdro")
    layout = load_layout(suite, "paper", "table7")
    wrong_row = dataclasses.replace(layout, options={**layout.options, "names": {"eli5": "eli5 answers"}})
    with pytest.raises(ConfigError, match="table 7 has no row 'eli5 answers'"):
        LossScalesLayout().check(wrong_row, suite, "paper")
    wrong_column = dataclasses.replace(layout, options={"reported": {"paper": "tdro", "table": 7, "column": "nll"}})
    with pytest.raises(ConfigError, match="has no column 'nll'; columns: loss"):
        LossScalesLayout().check(wrong_column, suite, "paper")
