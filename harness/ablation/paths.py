"""Where a suite run keeps its cells and reports under ``results_root``::

    cells/train/<key>/          one training run per training cell (method workdir, resumable)
    cells/eval/<key>/           one result directory per (training cell, benchmark)
    suites/<suite>/<scale>/     table.md, table.tex, comparisons.json, summary.json
        results/<variant>/<benchmark>/   the cell's result under a stable name

The runner writes these folders and the table layouts read them back; both take the
paths from here, so neither needs the other.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError, InputError
from harness.io.readers import read_json_object

if TYPE_CHECKING:
    from harness.ablation.spec import AblationSuite

SUMMARY_FILE = "summary.json"


def train_cell_dir(results_root: str | Path, key: str) -> Path:
    return Path(results_root) / "cells" / "train" / key


def eval_cell_dir(results_root: str | Path, key: str) -> Path:
    return Path(results_root) / "cells" / "eval" / key


def report_dir(results_root: str | Path, suite: str, scale: str) -> Path:
    """The folder of one suite's tables, summary and stable result names at one scale."""
    return Path(results_root) / "suites" / suite / scale


def cell_result_dir(report_dir: str | Path, variant: str, benchmark: str) -> Path:
    """Where a finished suite exposes the result of ``variant`` on ``benchmark`` (stable across code changes
    that move content keys; tables and regression expectations read it)."""
    return Path(report_dir) / "results" / variant / benchmark


def read_summary(suite: AblationSuite, scale: str, results_root: str | Path) -> dict[str, Any]:
    """The ``summary.json`` of a finished suite (its cells and their keys); a suite that has not finished is
    a ConfigError naming the command that finishes it."""
    path = report_dir(results_root, suite.name, scale) / SUMMARY_FILE
    if not path.exists():
        raise ConfigError(f"{path}: suite {suite.name!r} has no finished results at scale {scale!r} "
                          f"(run: harness run {suite.name} --scale {scale} --results-root {results_root})")
    summary = read_json_object(path, "suite summary")
    cells = summary.get("cells")
    if not isinstance(cells, list) or not all(isinstance(c, dict) and isinstance(c.get("variant"), str)
                                              and isinstance(c.get("key"), str) for c in cells):
        raise InputError(path, "'cells' must be a list of {variant, key} objects; rerun the suite to rewrite it")
    return summary
