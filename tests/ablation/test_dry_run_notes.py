"""Dry runs print what a method does besides training (Method.plan_notes) and count echo's doubled tokens."""
from __future__ import annotations

import json

from harness.cli import main


def test_mining_paper_dry_run_lists_judge_calls(capsys):
    assert main(["run", "mining", "--scale", "paper", "--dry-run", "--results-root", "unused-results"]) == 0
    out = capsys.readouterr().out
    assert "6,432,480 judge calls" in out


def test_dry_run_json_carries_the_notes(capsys):
    assert main(["run", "mining", "--scale", "paper", "--dry-run", "--format", "json",
                 "--results-root", "unused-results"]) == 0
    plan = json.loads(capsys.readouterr().out)
    notes = [n for cell in plan["cells"] for n in cell.get("notes", [])]
    assert notes and all("GPU-h" in n for n in notes)
