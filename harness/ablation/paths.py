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
