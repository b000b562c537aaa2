"""Reported numbers: a layout prints a paper's transcribed numbers beside the suite's own cells.

The finished suites are written the way the runner writes them (``summary.json`` and the
``results/<cell>/<benchmark>`` result directories) with chosen per-query scores, so every number is
checked against a direct computation; the printed numbers are read from ``reports/papers`` here.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from harness.ablation import load_suite
from harness.ablation.axes import replicates, suite_systems
from harness.ablation.html_report import reported_tables
from harness.ablation.layout import REPORTED_MARK, load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.ablation.spec import parse_suite
from harness.cli import main
from harness.data.run import Run
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result
from reports.latex import render_latex
from reports.markdown import render_markdown
from reports.table import Column, Row, Table, emphasis, format_delta

PAPERS = Path(__file__).resolve().parents[2] / "reports" / "papers"
QIDS = [f"q{i}" for i in range(8)]


def finished(suite: Any, scale: str, root: Path, seed: int = 0) -> dict[tuple[str, str], np.ndarray]:
    """Write a finished ``suite`` at ``scale`` under ``root`` with random per-query nDCG@10 (the same queries
    on every benchmark, so a pooled aggregate is the mean of the benchmarks' means); returns the scores."""
    rng = np.random.default_rng(seed)
    report = report_dir(root, suite.name, scale)
    report.mkdir(parents=True)
    cells, scores = [], {}
    for system in suite_systems(suite):
        for replicate in replicates(suite, system, scale):
            cells.append({"variant": replicate.id, "key": f"k-{replicate.id}"})
            for bench in suite.scale(scale).benchmarks:
                values = rng.random(len(QIDS))
                scores[(replicate.id, bench.id)] = values
                write_result(cell_result_dir(report, replicate.id, bench.id),
                             run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                             evaluation=EvaluationResult(QIDS, {"ndcg@10": values}),
                             card=ProtocolCard(suite="synthetic", dataset=bench.id, metrics=("ndcg@10",)), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return scores


def printed(paper: str, number: int, row: str, column: str) -> str:
    """The printed number at (row label or id, column key) of a transcribed table, read from its file."""
    doc = yaml.safe_load((PAPERS / paper / f"table{number}.yaml").read_text(encoding="utf-8"))
    keys = [c["key"] for c in doc["columns"]]
    line = next(r for r in doc["rows"] if row in (r.get("id"), r["label"]))
    match = re.match(r"\d+(\.\d+)?", line["cells"][keys.index(column)])   # "48.9+1.4", "0.462†" -> the number
    assert match is not None
    return match.group(0)


def _md_row(markdown: str, label: str) -> list[str]:
    line = next(x for x in markdown.splitlines() if x.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


@pytest.fixture(scope="module")
def tdro_tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tdro")
    suite = load_suite("tdro")
    return suite, root, finished(suite, "tiny", root)


def test_reported_rows_print_the_papers_numbers_in_markdown_and_latex(tdro_tiny, capsys):
    suite, root, _ = tdro_tiny
    assert main(["table", "suite", "tdro", "--scale", "tiny", "--results-root", str(root), "--layout", "reported",
                 "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    base = [printed("000", 5, "baseline", k) for k in ("beir/ndcg@10", "miracl/ndcg@10")]
    assert base == ["47.5", "45.8"]
    # layout columns latin_qa -> BEIR, cjk_qa -> MIRACL, the learnable average -> no paper column
    mark = f"<sup>{REPORTED_MARK}</sup>"
    assert _md_row(markdown, "Baseline (paper 000, Tab. 5)") == [
        f"{base[0]}{mark}<sup>\\[1\\]</sup>", f"{base[1]}{mark}<sup>\\[2\\]</sup>", "–"]
    top70 = [printed("000", 5, "top70", k) for k in ("beir/ndcg@10", "miracl/ndcg@10")]
    assert [c.split("<sup>")[0] for c in _md_row(markdown, "w/ Top-70% (paper 000, Tab. 5)")] == [*top70, "–"]
    assert "paper 000 Table 5, row Qwen-0.5B-Baseline, column MIRACL nDCG@10: 45.8 printed" in markdown
    assert "ours ran at scale tiny (not comparable in value)" in markdown
    # the reported rows are never bold (bold_reported: false)
    assert "**47.5" not in markdown and "**48.9" not in markdown

    latex = render_latex(render_layout(suite, "tiny", root, "reported"))
    assert f"{base[0]}\\textsuperscript{{\\S{{}}}}\\textsuperscript{{[1]}}" in latex
    assert f"{top70[1]}\\textsuperscript{{\\S{{}}}}" in latex
    assert "column MIRACL nDCG@10: 45.8 printed" in latex


# suite -> (paper, table, row, column key) of a printed number its `reported` layout shows at tiny scale, and
# whether the paper prints fractions (0.462 shows as 46.2, like our scores)
ONE_PER_PAPER = {
    "tdro": ("000", 5, "baseline", "miracl/ndcg@10", False),
    "coco_dr": ("001", 2, "Avg", "base/full", True),
    "peg": ("002", 1, "Ours", "avg", False),
    "splade": ("003", 1, "Avg", "echo-mistral-st", False),
    "mining": ("004", 2, "naive-top-k", "avg", False),
}


@pytest.mark.parametrize("name", sorted(ONE_PER_PAPER))
def test_one_reported_layout_per_paper_renders_from_a_finished_tiny_run(tmp_path, capsys, name):
    paper, number, row, column, fraction = ONE_PER_PAPER[name]
    suite = load_suite(name)
    finished(suite, "tiny", tmp_path)
    text = printed(paper, number, row, column)
    shown = f"{float(text) * 100:.{len(text.split('.')[1]) - 2}f}" if fraction else text
    marks = {"markdown": f"{shown}<sup>{REPORTED_MARK}</sup>", "latex": f"{shown}\\textsuperscript{{\\S{{}}}}"}
    for fmt, marked in marks.items():
        assert main(["table", "suite", name, "--scale", "tiny", "--results-root", str(tmp_path), "--layout",
                     "reported", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert marked in out
        assert f"paper {paper} Table {number}, row " in out and f": {text} printed" in out
        assert "ours ran at scale tiny (not comparable in value)" in out


def test_a_layout_with_reported_rows_keeps_the_marking_and_cells_of_ours(tdro_tiny):
    suite, root, _ = tdro_tiny
    table = render_layout(suite, "tiny", root, "reported")
    # the same layout without its reported rows: ours must render identically (values, markers, bold)
    raw = json.loads(json.dumps(suite.raw))
    layout = raw["table"]["layouts"]["reported"]
    layout["rows"] = [r for r in layout["rows"] if not (isinstance(r, dict) and "reported" in r)]
    for per_scale in layout["scales"].values():
        for column in per_scale["columns"]:
            column.pop("reported_column", None)
    plain = render_layout(parse_suite(raw, suite.path), "tiny", root, "reported")
    ours = [r for r in table.rows if not r.label.endswith("Tab. 5)")]
    assert [(r.label, r.cells) for r in ours] == [(r.label, r.cells) for r in plain.rows] or \
        _same_marking(ours, plain)
    assert len(table.rows) == len(plain.rows) + 3
    assert not any(c.bold for r in table.rows if r not in ours for c in r.cells.values())


def _same_marking(ours: list, plain: Any) -> bool:
    """Ours' cells equal the plain table's, bold as its best-per-column marking makes them."""
    flags = emphasis(plain)
    for i, (row, other) in enumerate(zip(ours, plain.rows)):
        assert row.label == other.label
        for key, cell in other.cells.items():
            assert row.cells[key] == replace(cell, bold=flags.get((i, key), (False, False))[0])
    return True


def test_reported_column_shows_printed_value_and_difference_on_a_finished_tiny_run(tmp_path):
    suite = load_suite("mining")
    scores = finished(suite, "tiny", tmp_path, seed=3)
    table = render_layout(suite, "tiny", tmp_path, "reported")
    assert [c.key for c in table.columns] == ["Avg/ndcg@10", "Avg/ndcg@10/reported", "Avg/ndcg@10/difference"]
    benches = [b.id for b in suite.scale("tiny").benchmarks]
    rows = {"naive": "naive-top-k", "shifted": "top-k-shifted", "abs": "topk-abs", "marginpos": "topk-marginpos",
            "percpos": "topk-percpos", "ours": "ours"}
    by_label = {r.label: r for r in table.rows}
    for variant, paper_row in rows.items():
        row = by_label[suite.variant(variant).label]
        text = printed("004", 2, paper_row, "avg")
        assert row.cells["Avg/ndcg@10/reported"].value == pytest.approx(float(text) / 100)
        assert REPORTED_MARK in row.cells["Avg/ndcg@10/reported"].marks
        ours = float(np.mean([scores[(variant, b)].mean() for b in benches]))
        assert row.cells["Avg/ndcg@10"].value == pytest.approx(ours)
        assert row.cells["Avg/ndcg@10/difference"].value == format_delta(ours - float(text) / 100, 100.0, 1)
    # the baseline has no paper row: its reported cells are empty
    assert "Avg/ndcg@10/reported" not in by_label[suite.variant("baseline").label].cells
    markdown = render_markdown(table)
    assert f"{printed('004', 2, 'naive-top-k', 'avg')}<sup>{REPORTED_MARK}</sup>" in markdown
    assert "Δ: ours minus the printed number" in markdown


def test_transposed_tables_fraction_units_and_missing_values(tmp_path):
    # paper 001 prints fractions (0.709): shown x 100 like ours; its columns are the systems
    coco = load_suite("coco_dr")
    scores = finished(coco, "tiny", tmp_path / "coco")
    table = render_layout(coco, "tiny", tmp_path / "coco", "reported")
    full = next(r for r in table.rows if r.label == coco.variant("coco-idro").label)
    text = printed("001", 2, "Avg", "base/full")
    cell = full.cells["cjk_qa/ndcg@10/reported"]
    assert (cell.value, cell.decimals) == (pytest.approx(float(text)), len(text.split(".")[1]) - 2)
    ours = scores[("coco-idro", "cjk_qa")].mean()
    assert full.cells["cjk_qa/ndcg@10/difference"].value == format_delta(ours - float(text), 100.0, 1)
    assert "column COCO-DR Base Full: " + text + " printed" in render_markdown(table)

    # paper 003: reported rows are the paper's system columns; layout columns name its dataset rows
    splade = load_suite("splade")
    finished(splade, "tiny", tmp_path / "splade")
    markdown = render_markdown(render_layout(splade, "tiny", tmp_path / "splade", "reported"))
    avg = printed("003", 1, "Avg", "echo-mistral-st")
    assert _md_row(markdown, "Echo-Mistral +Sent-Trans (paper 003, Tab. 1)") == [
        "–", f"{avg}<sup>{REPORTED_MARK}</sup><sup>\\[2\\]</sup>"]
    # in the order declared, after the suite's rows
    labels = [line.split(" | ")[0][2:] for line in markdown.splitlines() if "(paper 003, Tab. 1) |" in line]
    assert labels == [f"{name} (paper 003, Tab. 1)" for name in ("Bert-base +Sent-Trans", "Echo-Mistral +Sent-Trans",
                                                                 "BM25")]
    assert "paper 003 Table 1, row Avg, column Ours Echo-Mistral +Sent-Trans: " + avg + " printed" in markdown


def test_bold_reported_ranks_the_printed_numbers_with_ours(tdro_tiny):
    suite, root, _ = tdro_tiny
    raw = json.loads(json.dumps(suite.raw))
    raw["table"]["layouts"]["reported"]["bold_reported"] = True
    table = render_layout(parse_suite(raw, suite.path), "tiny", root, "reported")
    # the best shown value of each column, ours and printed together, is bold (and nothing else)
    for column in table.columns[:2]:
        values = {r.label: round(float(r.cells[column.key].value) * 100, 1) for r in table.rows
                  if column.key in r.cells and r.cells[column.key].value is not None}
        best = max(values.values())
        assert {r.label for r in table.rows if column.key in r.cells and r.cells[column.key].bold} == \
            {label for label, v in values.items() if v == best}


SUITE = """\
name: rep
baseline: u
variants:
  - {id: u, label: U, method: uniform}
  - {id: h, label: H, method: uniform}
scales:
  tiny:
    model: synthetic:default/tiny-bert
    data: [synthetic:default]
    benchmarks:
      - {id: one, suite: synthetic, dataset_dir: synthetic:default/eval/latin_qa}
table:
  layouts:
    rep:
      rows:
        - u
        - {reported: {paper: PAPER, table: TABLE, row: ROW}}
      columns:
        - {benchmark: one, metric: ndcg@10, reported_column: COLUMN}
        - benchmark: one
          metric: recall@10
          reported: {paper: tdro, table: 5, column: MIRACL, rows: {h: MAPPED}}
"""
GOOD = {"PAPER": "tdro", "TABLE": "5", "ROW": "Qwen-0.5B-Baseline", "COLUMN": "BEIR", "MAPPED": "top70"}


# (line, column): the key whose value is wrong
@pytest.mark.parametrize("change, line, column, problem", [
    ({"PAPER": "tdr0"}, 17, 23, "unknown paper 'tdr0' (did you mean 'tdro'?); transcribed papers: 000 (tdro)"),
    ({"TABLE": "6"}, 17, 36, "paper 000 (tdro) has no transcribed table 6; transcribed: 1, 3, 4, 5"),
    ({"ROW": "Qwen-0.5B-Basline"}, 17, 46, "has no row 'Qwen-0.5B-Basline' (did you mean 'Qwen-0.5B-Baseline'?)"),
    ({"COLUMN": "MIRACLE"}, 19, 45, "has no column 'MIRACLE' (did you mean 'MIRACL'?)"),
    ({"COLUMN": "nDCG@10"}, 19, 45, "column 'nDCG@10' is ambiguous (printed more than once); name it by its key"),
    ({"MAPPED": "top-70"}, 22, 68, "has no row 'top-70' (did you mean 'top70'?)"),
])
def test_bad_references_fail_at_load_with_line_column_and_a_suggestion(tmp_path, change, line, column, problem):
    text = SUITE
    for key, value in {**GOOD, **change}.items():
        text = text.replace(key, value)
    path = tmp_path / "rep.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_suite(path)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert problem in str(info.value)


def test_good_references_load_and_unknown_variants_are_refused(tmp_path):
    path = tmp_path / "rep.yaml"
    text = SUITE
    for key, value in GOOD.items():
        text = text.replace(key, value)
    path.write_text(text, encoding="utf-8")
    layout = load_layout(load_suite(path), "tiny", "rep")
    assert layout.has_reported and layout.columns[0].reported_column == "BEIR"
    path.write_text(text.replace("{h: top70}", "{hh: top70}"), encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown variant 'hh' \\(did you mean 'h'\\?\\)"):
        load_layout(load_suite(path), "tiny", "rep")


def test_the_html_report_shows_the_reported_cells_and_their_footnotes(tdro_tiny):
    from reports.html.model import HtmlReport
    from reports.html.render import render_html

    suite, root, _ = tdro_tiny
    tables, warnings = reported_tables(suite, "tiny", root)
    assert warnings == [] and [t.id for t in tables] == [
        "reported-table3", "reported-table4", "reported-table9", "reported-table10", "reported-table11",
        "reported-reported"]
    table = tables[-1]
    rows = {r.system: r for r in table.rows}
    printed_row = rows["Baseline (paper 000, Tab. 5)"]
    assert printed_row.kind == "reported" and not printed_row.cells["latin_qa/ndcg@10"].best
    assert printed_row.cells["cjk_qa/ndcg@10"].text == f"45.8{REPORTED_MARK} [2]"
    assert rows[suite.variant("baseline").label].kind == "baseline"
    page = render_html(HtmlReport(suite="tdro", scale="tiny", description="", baseline="Baseline", systems=[],
                                  metrics=["ndcg@10"], tables=[table], per_query=[], cards={}, cells=[], plots=[],
                                  notes=[]))
    assert f"45.8{REPORTED_MARK} [2]" in page and f"48.9{REPORTED_MARK}" in page
    assert "[2] Baseline (paper 000, Tab. 5), cjk_qa nDCG@10: paper 000 Table 5, row Qwen-0.5B-Baseline, " \
           "column MIRACL nDCG@10: 45.8 printed" in page
    assert "ours ran at scale tiny (not comparable in value)" in page


def test_cells_the_paper_does_not_give_render_as_a_dash_with_their_footnote():
    from harness.ablation.layout import printed_cell
    from harness.ablation.schema import find_line
    from reports.papers import load_tables

    spec = load_tables("coco-dr", 1)[0]            # paper 001 Table 1: GPL prints "一" for MSMARCO, CPT-XL a gap
    row = find_line(spec, "row", "MSMARCO")
    dash, gap = printed_cell(spec, row, find_line(spec, "column", "GPL#")), \
        printed_cell(spec, row, find_line(spec, "column", "CPT-XL"))
    assert (dash.value, dash.note) == (None, "paper 001 Table 1, row MSMARCO, column Dense GPL#: a dash (no value)")
    assert (gap.value, gap.note) == (None, "paper 001 Table 1, row MSMARCO, column Dense CPT-XL: a cell the text "
                                           "extraction lost")
    number = printed_cell(spec, row, find_line(spec, "column", "BM25"))     # "0.228": a fraction, shown x 100
    assert (number.value, number.decimals, number.marks) == (0.228, 1, (REPORTED_MARK,))
    assert render_markdown(Table([Column("c", "C")], [Row("r", {"c": dash})])).count("–") == 1
