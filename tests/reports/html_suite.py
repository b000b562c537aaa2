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


_CELL = re.compile(r"^(?P<value>-?[\d.]+)(?:<sup>(?P<mark>[^<]*)</sup>)?(?: \((?P<delta>[+-][\d.]+)\))?$")


def table_md_cells(text: str, bold: bool = False) -> dict[str, list]:
    """``{row label (unescaped): [(value, marker, delta), ...]}`` of the body rows of a ``table.md``
    (``bold``: ``[True if the cell is bold, ...]`` instead)."""
    rows: dict[str, list] = {}
    lines = [line for line in text.splitlines() if line.startswith("| ")]
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
