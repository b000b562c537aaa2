"""Provenance: each setting of a suite's systems keeps where its value came from (the suite file's line,
or the method's preset or default), and dry runs and the HTML report show what differs from the baseline."""
from __future__ import annotations

import json

from harness.ablation.axes import systems_of
from harness.ablation.html_report import settings_rows
from harness.ablation.provenance import settings_diff, system_settings
from harness.ablation.spec import load_suite
from harness.cli import main
from reports.html import HtmlReport, render_html
from reports.html.model import ResultTable


def _line(suite, needle: str, after: int = 0) -> int:
    lines = suite.path.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if i > after and needle in text)


def test_quickstart_dry_run_shows_each_difference_and_its_line(tmp_path, capsys):
    suite = load_suite("quickstart")
    assert main(["run", "quickstart", "--dry-run", "--scale", "tiny", "--results-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = _line(suite, "in_batch_negatives")
    assert "settings that differ from the baseline uniform" in out
    assert f"train.in_batch_negatives = False  <- quickstart.yaml:{line}   (baseline: True <- method uniform " \
           "preset 'tiny' (" in out           # then the preset's own source of the value (paper, code)
    assert f"method = 'none'  <- quickstart.yaml:{_line(suite, 'method: none')}" in out
    assert f"model = 'bm25'  <- quickstart.yaml:{_line(suite, 'model: bm25')}" in out
    # settings every system shares are not listed
    assert "train.steps" not in out.split("settings that differ")[1]


def test_tdro_differences_name_the_file_line_or_the_method_default():
    suite = load_suite("tdro")
    diffs = {(d.system, d.name): d for d in settings_diff(suite, "tiny")}
    top60 = diffs[("top60", "options.percent")]
    assert top60.value == 60 and top60.source == f"tdro.yaml:{_line(suite, 'percent: 60')}"
    assert top60.baseline is None                        # the uniform baseline has no tDRO options
    assert diffs[("top60", "options.mode")].source.startswith("method tdro default (")   # the declared source
    assert diffs[("top60", "method")].value == "tdro"
    # every setting of a system has a source
    settings = system_settings(suite, systems_of(suite.variant("top60"))[0], "tiny")
    assert all(s.source for s in settings.values()) and settings["train.steps"].value > 0


def test_tdro_dry_run_json_lists_the_settings(tmp_path, capsys):
    assert main(["run", "tdro", "--dry-run", "--scale", "tiny", "--results-root", str(tmp_path),
                 "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    entry = next(s for s in plan["settings"] if s["system"] == "top70" and s["name"] == "options.percent")
    assert entry["value"] == 70 and entry["source"].startswith("tdro.yaml:") and entry["baseline"] is None


def test_html_report_shows_the_same_table():
    suite = load_suite("quickstart")
    rows = settings_rows(suite, "tiny")
    assert [(r.system, r.setting) for r in rows] == [(d.system, d.name) for d in settings_diff(suite, "tiny")]
    report = HtmlReport(suite="quickstart", scale="tiny", description="", baseline="uniform", systems=[],
                        metrics=[], tables=[ResultTable("overview", "Overview", [], [])], per_query=[], cards={},
                        cells=[], plots=[], notes=[], settings=rows)
    page = render_html(report)
    assert 'id="settings"' in page and "train.in_batch_negatives" in page
    assert f"quickstart.yaml:{_line(suite, 'in_batch_negatives')}" in page
