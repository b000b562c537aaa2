"""A finished three-system suite (fixtures/html_mini.yaml: nothing to train) shared by the HTML report,
browser and export tests: run once per test process, in a temporary results root."""
from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from pathlib import Path

from harness.ablation import AblationSuite, load_suite, run_suite

FIXTURE = Path(__file__).parent / "fixtures" / "html_mini.yaml"
SCALE = "tiny"
_FINISHED: dict[str, tuple[AblationSuite, Path]] = {}


def finished_suite() -> tuple[AblationSuite, Path]:
    """``(suite, results root)`` of the fixture suite after ``harness run`` (which also wrote html/)."""
    if "root" not in _FINISHED:
        root = Path(tempfile.mkdtemp(prefix="html-mini-"))
        atexit.register(shutil.rmtree, root, True)
        suite = load_suite(FIXTURE)
        outcome = run_suite(suite, SCALE, root, progress=False)
        assert outcome.complete, outcome.pending
        _FINISHED["root"] = (suite, root)
    return _FINISHED["root"]


_CELL = re.compile(r"^(?P<value>-?[\d.]+(?: ± [\d.]+)?)(?:<sup>(?P<mark>[^<]*)</sup>)?(?: \((?P<delta>[+-][\d.]+)\))?$")


def table_md_cells(text: str, bold: bool = False) -> dict[str, list]:
    """``{row label (unescaped): [(value, marker, delta), ...]}`` of the body rows of a ``table.md``
    (``bold``: ``[True if the cell is bold, ...]`` instead)."""
    rows: dict[str, list] = {}
    lines: list[str] = []
    for line in text.splitlines():             # the first table only (a suite with axes appends more)
        if line.startswith("| "):
            lines.append(line)
        elif lines:
            break
    for line in lines[2:]:                      # header and alignment rows first
        parts = [p.strip() for p in re.split(r"(?<!\\)\|", line)[1:-1]]
        label = re.sub(r"\\(.)", r"\1", parts[0]).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        cells = []
        for part in parts[1:]:
            match = _CELL.match(part.replace("**", ""))
            assert match, f"unexpected table.md cell {part!r}"
            cells.append(part.startswith("**") if bold else (match["value"], match["mark"] or "", match["delta"] or ""))
        rows[label] = cells
    return rows


def overview_matches_table_md(suite: AblationSuite, scale: str, root: Path) -> int:
    """Assert that the report's overview cells (value, marker, delta, bold) equal ``table.md``'s; returns the
    number of cells compared."""
    from harness.ablation.html_report import suite_inputs
    from harness.ablation.paths import report_dir
    from reports.html import build_report

    table_md = (report_dir(root, suite.name, scale) / "table.md").read_text(encoding="utf-8")
    expected, bold = table_md_cells(table_md), table_md_cells(table_md, bold=True)
    overview = build_report(suite_inputs(suite, scale, root), difference_figures=False).tables[0]
    assert [r.system for r in overview.rows] == list(expected)
    for row in overview.rows:
        got = [(row.cells[c.key].text, row.cells[c.key].mark, row.cells[c.key].delta_text) for c in overview.columns]
        assert got == expected[row.system], row.system
        assert [row.cells[c.key].best for c in overview.columns] == bold[row.system], row.system
    return sum(len(cells) for cells in expected.values())
