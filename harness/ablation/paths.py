"""Where a suite run keeps its cells and reports under ``results_root``::

    cells/train/<key>/          one training run per training cell (method workdir, resumable)
    cells/eval/<key>/           one result directory per (training cell, benchmark)
    suites/<suite>/<scale>/     table.md, table.tex, comparisons.json, summary.json
        results/<variant>/<benchmark>/   the cell's result under a stable name

The runner writes these folders and the table layouts read them back; both take the
paths from here, so neither needs the other; the file names are those of
:mod:`harness.io.results_layout`.  Every name joined here (suite, scale, variant and
benchmark ids, cell keys) must be one safe path component and the folder must stay inside the
results root (:func:`harness.io.paths.child_of`): a suite file's names are checked, with their
line, when it is read (:mod:`harness.ablation.spec`), and a programmatic caller that skips that is
refused here before anything is written.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError, InputError
from harness.io.paths import check_component, child_of
from harness.io.readers import read_json_object
from harness.io.results_layout import (
    CELL_RESULTS_DIR,
    CELLS_DIR,
    EVAL_CELLS_DIR,
    SUITES_DIR,
    SUMMARY_FILE,
    TRAIN_CELLS_DIR,
)

if TYPE_CHECKING:
    from harness.ablation.spec import AblationSuite


def train_cell_dir(results_root: str | Path, key: str) -> Path:
    return child_of(results_root, CELLS_DIR, TRAIN_CELLS_DIR, check_component(key, "training cell key"))


def eval_cell_dir(results_root: str | Path, key: str) -> Path:
    return child_of(results_root, CELLS_DIR, EVAL_CELLS_DIR, check_component(key, "evaluation cell key"))


def report_dir(results_root: str | Path, suite: str, scale: str) -> Path:
    """The folder of one suite's tables, summary and stable result names at one scale."""
    return child_of(results_root, SUITES_DIR, check_component(suite, "suite name"), check_component(scale, "scale"))


def cell_result_dir(report_dir: str | Path, variant: str, benchmark: str) -> Path:
    """Where a finished suite exposes the result of ``variant`` on ``benchmark`` (stable across code changes
    that move content keys; tables and regression expectations read it)."""
    return child_of(report_dir, CELL_RESULTS_DIR, check_component(variant, "variant (cell) id"),
                    check_component(benchmark, "benchmark id"))


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
    for cell in cells:     # both name folders the tables read: a tampered summary must not lead outside
        try:
            check_component(cell["variant"], "cell variant")
            check_component(cell["key"], "cell key")
        except ConfigError as exc:
            raise InputError(path, f"{exc}; rerun the suite to rewrite it") from None
    return summary
