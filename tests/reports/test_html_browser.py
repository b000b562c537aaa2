"""The suite HTML report in a real headless browser: Debian's Chromium driven by Playwright loads
``index.html`` from disk (file://, no server, no network) and we check what a reader would see.

Skipped only when Chromium or Playwright is absent (``bash scripts/setup.sh --dev`` installs both;
Playwright's own browser download is not used).  The screenshot is kept under pytest's tmp_path.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from html_suite import SCALE, finished_suite
from optional_extras import require_extra

from harness.ablation.html_report import html_dir


def _chromium() -> str | None:
    for candidate in (os.environ.get("HARNESS_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (bash scripts/setup.sh --dev "
                                                          "installs Debian's chromium as root; or apt-get install "
                                                          "chromium); HARNESS_CHROMIUM may name another binary")


@pytest.fixture(scope="module")
def page():
    sync_api = require_extra("playwright.sync_api")
    suite, root = finished_suite()
    index = html_dir(root, suite.name, SCALE) / "index.html"
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
               if m.type in ("error", "warning") else None)
        tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        tab.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        tab.goto(index.as_uri())
        tab.wait_for_load_state("load")
        yield tab, suite, problems
        browser.close()


def _column(tab, table: str, index: int) -> list[float]:
    return tab.eval_on_selector_all(f"#{table} tbody tr:not([hidden])",
                                    f"rows => rows.map(r => parseFloat(r.cells[{index}].dataset.sort))")


def _systems(tab, table: str) -> list[str]:
    return tab.eval_on_selector_all(f"#{table} tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.system)")


def test_tables_render_one_row_per_system(page):
    tab, suite, problems = page
    labels = [v.label for v in suite.variants]
    assert _systems(tab, "tbl-overview") == labels          # baseline first, in suite order
    assert tab.locator("#tbl-overview tbody tr").count() == len(suite.variants) == 3
    for table in tab.eval_on_selector_all("table.sortable[data-rows]", "ts => ts.map(t => t.id)"):
        assert tab.locator(f"#{table} tbody tr").count() == len(suite.variants), table
    # a label with <, & and " is shown as written
    assert 'BM25 <lexical> & "exact"' in tab.locator("#tbl-overview tbody").inner_text()
    assert problems == []


def test_clicking_a_header_sorts_the_rows(page):
    tab, suite, problems = page
    header = tab.locator('#tbl-overview th[data-col="1"]')
    original = _column(tab, "tbl-overview", 1)
    assert len(set(original)) == 3 and original != sorted(original, reverse=True)   # the click has work to do
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert _column(tab, "tbl-overview", 1) == sorted(original, reverse=True)
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert _column(tab, "tbl-overview", 1) == sorted(original)
    by_system = dict(zip(_systems(tab, "tbl-overview"), _column(tab, "tbl-overview", 1)))
    tab.locator('#tbl-overview th[data-col="0"]').click()        # by name, A to Z
    assert _systems(tab, "tbl-overview") == sorted(by_system, key=str.lower)
    assert problems == []


def test_the_filters_hide_rows(page):
    tab, suite, problems = page
    tab.fill('input.row-filter[data-table="tbl-overview"]', "tiny")
    assert sorted(_systems(tab, "tbl-overview")) == ["Tiny BERT (untrained)", "Tiny decoder (untrained)"]
    tab.fill('input.row-filter[data-table="tbl-overview"]', "")
    assert len(_systems(tab, "tbl-overview")) == 3
    tab.check('input.sig-filter[data-table="tbl-overview"]')
    shown = _systems(tab, "tbl-overview")
    marked = tab.eval_on_selector_all(
        "#tbl-overview tbody tr", "rows => rows.filter(r => r.querySelector('sup.mark')).map(r => r.dataset.system)")
    assert shown == marked and 0 < len(shown) < 3
    tab.uncheck('input.sig-filter[data-table="tbl-overview"]')
    assert problems == []


def test_per_query_view_and_screenshot(page, tmp_path):
    tab, suite, problems = page
    visible = tab.locator(".pq-group:not([hidden])")
    assert visible.count() == 1                                 # one (system, benchmark, metric) at a time
    assert visible.locator("article.query").count() >= 1
    assert visible.locator(".doccol li").count() >= 2           # documents of the baseline and the system
    tab.select_option("#pq-system", label='BM25 <lexical> & "exact"')
    tab.select_option("#pq-benchmark", label="cjk_qa")
    assert tab.locator(".pq-group:not([hidden])").get_attribute("data-benchmark") == "cjk_qa"
    assert tab.locator(".pq-group:not([hidden]) h3").inner_text().startswith('BM25 <lexical> & "exact" vs')
    assert tab.locator("#plots img").evaluate_all("imgs => imgs.every(i => i.complete && i.naturalWidth > 0)")
    shot = Path(tmp_path) / "report.png"
    tab.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert problems == []


@pytest.mark.slow
def test_quickstart_report_in_the_browser(tmp_path):
    """The acceptance check: ``harness run quickstart`` (tiny) writes a report that renders one row per system,
    sorts on a header click, filters, shows the per-query view, and logs no console error."""
    sync_api = require_extra("playwright.sync_api")
    from harness.ablation import load_suite, run_suite

    suite = load_suite("quickstart")
    outcome = run_suite(suite, "tiny", tmp_path / "results", progress=False)
    assert outcome.complete
    index = html_dir(tmp_path / "results", suite.name, "tiny") / "index.html"
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1200, "height": 1500})
        tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
               if m.type in ("error", "warning") else None)
        tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        tab.goto(index.as_uri())
        assert _systems(tab, "tbl-overview") == [v.label for v in suite.variants]
        average = len(suite.scale("tiny").benchmarks) + 1           # the Avg column, after the benchmarks
        values = _column(tab, "tbl-overview", average)
        tab.locator(f'#tbl-overview th[data-col="{average}"]').click()
        assert _column(tab, "tbl-overview", average) == sorted(values, reverse=True)
        tab.fill('input.row-filter[data-table="tbl-overview"]', "bm25")
        assert _systems(tab, "tbl-overview") == ["BM25"]
        assert tab.locator(".pq-group:not([hidden]) article.query").count() >= 1
        tab.screenshot(path=str(tmp_path / "report-quickstart.png"))
        browser.close()
    assert problems == []
