"""Layout kind ``loss-scales`` (paper 000, Tables 1 and 7): each training set's loss in a run's training log.

Columns are variant ids; rows are the training sets (the ``counts`` of the log records), by default in
descending order of the first column's loss (Table 7's order).  A cell is the mean loss of that set over
the logged steps of the variant's training cell (``train_log.jsonl``), read one of two ways:

* ``scalar: null`` (default): the step's mean per-sample InfoNCE (``infonce``) of the steps whose batch
  held that set only (task-homogeneous batches, the uniform baseline: one set per step); steps that mix
  sets are not attributed;
* ``scalar: <name>``: the method's per-set scalar ``<name>/<set>`` of each step where the set appeared
  (``proxy_loss`` / ``ref_loss`` of a tDRO stage-1 run, whose batches mix every set).

Options: ``scalar`` (above), ``last`` (only the last N logged steps: the loss at the end of training
rather than over it; default every logged step), ``datasets`` (these sets only, in this order: Table 1
shows three), ``sort`` (``desc`` default, ``asc`` or ``none``: the log's order).  The log holds every
``log_every``-th step; the note under the table says how many steps each cell averages.

Printed numbers beside ours: ``reported: {paper: <id or short name>, table: <k>, column: <key>}`` adds a
column with a transcribed table's value for each set (marked, with a footnote naming paper, table and row),
found by the set's name or its ``names: {<set>: <printed row label>}`` entry; "–" where the paper has no row.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.ablation.layout import (
    LayoutKind,
    TableLayout,
    check_known_options,
    read_summary,
    register_layout_kind,
    train_keys,
)
from harness.ablation.paths import train_cell_dir
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from harness.train.logs import LOG_FILE, read_log
from reports.table import Cell, Column, Row, Table

OPTIONS = ("scalar", "last", "datasets", "sort", "reported", "names")
REPORTED_MARK = "§"      # as harness.ablation.layout's printed cells
SORTS = ("desc", "asc", "none")


def dataset_losses(records: Iterable[Mapping[str, Any]], scalar: str | None = None,
                   last: int | None = None) -> dict[str, tuple[float, int]]:
    """``{set: (mean loss, steps averaged)}`` from training-log records (see the module docstring)."""
    steps = [r for r in records if isinstance(r.get("step"), int)]
    if last is not None:
        steps = steps[-last:]
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value):
            sums[name] = sums.get(name, 0.0) + float(value)
            counts[name] = counts.get(name, 0) + 1

    for record in steps:
        if scalar is None:
            present = [n for n, c in (record.get("counts") or {}).items() if c]
            if len(present) == 1:
                add(present[0], record.get("infonce"))
        else:
            prefix = scalar + "/"
            for key, value in (record.get("method") or {}).items():
                if key.startswith(prefix):
                    add(key[len(prefix):], value)
    return {n: (sums[n] / counts[n], counts[n]) for n in sums}


@register_layout_kind("loss-scales")
class LossScalesLayout(LayoutKind):
    """Per-training-set losses (rows) of variants' training runs (columns), from their training logs."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, OPTIONS)
        opts = layout.options
        if opts.get("sort", "desc") not in SORTS:
            raise ConfigError(f"layout {layout.name!r}: sort must be one of {', '.join(SORTS)}, got {opts['sort']!r}")
        last = opts.get("last")
        if last is not None and (not isinstance(last, int) or isinstance(last, bool) or last < 1):
            raise ConfigError(f"layout {layout.name!r}: last must be a positive number of logged steps, got {last!r}")
        names = opts.get("datasets")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            raise ConfigError(f"layout {layout.name!r}: datasets must be a list of training-set names")
        scalar = opts.get("scalar")
        if scalar is not None and not isinstance(scalar, str):
            raise ConfigError(f"layout {layout.name!r}: scalar must be a method scalar name, got {scalar!r}")
        aliases = opts.get("names") or {}
        if not isinstance(aliases, dict) or not all(isinstance(v, str) for v in aliases.values()):
            raise ConfigError(f"layout {layout.name!r}: names maps a training set to the paper's printed row label")
        if opts.get("reported") is not None:
            spec, _ = _reported_table(layout)
            labels = {r.label for r in spec.rows}
            unknown = sorted(v for v in aliases.values() if v not in labels)
            if unknown:
                raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no row {', '.join(map(repr, unknown))}")
        for column in layout.columns:
            if suite.variant(column.benchmark).method == "none":
                raise ConfigError(f"layout {layout.name!r}: variant {column.benchmark!r} trains nothing (no log)")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        opts = layout.options
        keys = train_keys(read_summary(suite, scale, results_root))
        variants = [c.benchmark for c in layout.columns]
        losses: dict[str, dict[str, tuple[float, int]]] = {}
        for v in variants:
            if v not in keys:
                raise ConfigError(f"summary of suite {suite.name!r} ({scale}) has no cell for variant {v!r}")
            path = train_cell_dir(results_root, keys[v]) / LOG_FILE
            losses[v] = dataset_losses(read_log(path), opts.get("scalar"), opts.get("last"))
            if not losses[v]:
                raise ConfigError(f"{path}: no per-set losses in the training log of variant {v!r}"
                                  + (" (no homogeneous steps)" if opts.get("scalar") is None
                                     else f" (no method scalar {opts['scalar']!r})"))
        names = list(opts.get("datasets") or dict.fromkeys(n for v in variants for n in losses[v]))
        first = losses[variants[0]]
        sort = opts.get("sort", "desc")
        if sort != "none" and not opts.get("datasets"):
            names.sort(key=lambda n: first.get(n, (math.nan, 0))[0] if n in first else math.inf,
                       reverse=sort == "desc")
            if sort == "desc":      # sets the first column lacks go last, not first
                names = [n for n in names if n in first] + [n for n in names if n not in first]
        labels = {v.id: v.label for v in suite.variants}
        columns = [Column(v, labels[v], higher_is_better=False) for v in variants]
        rows = [Row(n, {v: Cell(losses[v][n][0] if n in losses[v] else None) for v in variants}) for n in names]
        legend: dict[str, str] = {}
        if opts.get("reported") is not None:
            spec, j = _reported_table(layout)
            aliases = opts.get("names") or {}
            by_label = {r.label: r for r in spec.rows}
            key = f"reported/{spec.paper.id}/{spec.number}"
            columns.append(Column(key, f"paper {spec.paper.id} Tab. {spec.number}", higher_is_better=False))
            for row in rows:
                printed = by_label.get(aliases.get(row.label, row.label))
                cell = printed.cells[j] if printed is not None else None
                row.cells[key] = (Cell(cell.value, marks=(REPORTED_MARK,), decimals=cell.decimals,
                                       note=f"paper {spec.paper.id} Table {spec.number}, row {printed.label}: "
                                            f"{cell.text} printed")
                                  if printed is not None and cell is not None and cell.kind == "number" else Cell(None))
            legend[REPORTED_MARK] = (f"printed in paper {spec.paper.id} Table {spec.number} (ours ran at scale "
                                     f"{scale}; the footnotes name each printed cell)")
        spans = ", ".join(f"{labels[v]}: {min(c for _, c in losses[v].values())}-"
                          f"{max(c for _, c in losses[v].values())} logged steps per set" for v in variants)
        how = ("mean per-sample InfoNCE of the steps whose batch held the set only" if opts.get("scalar") is None
               else f"mean of the method scalar {opts['scalar']}/<set> over the steps the set appeared in")
        window = f"the last {opts['last']} logged steps" if opts.get("last") else "every logged step"
        return Table(columns=columns, rows=rows, caption=layout.caption or f"Training loss per set ({scale})",
                     label=f"tab:{suite.name}-{layout.name}-{scale}", decimals=layout.decimals or 4, scale=1.0,
                     bold_best=False, row_header="Training set",
                     legend=legend,
                     notes=[f"Scale {scale}; from each variant's train_log.jsonl: {how}, over {window} ({spans})."])


def _reported_table(layout: TableLayout) -> tuple[Any, int]:
    """The transcribed table and column index a ``reported: {paper, table, column}`` option names."""
    from reports.papers import load_tables

    ref = layout.options["reported"]
    if not isinstance(ref, dict) or set(ref) != {"paper", "table", "column"}:
        raise ConfigError(f"layout {layout.name!r}: reported must be {{paper, table, column}}, got {ref!r}")
    (spec,) = load_tables(str(ref["paper"]), int(ref["table"]))
    keys = [c.key for c in spec.columns]
    if ref["column"] not in keys:
        raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no column {ref['column']!r}; columns: "
                          f"{', '.join(keys)}")
    return spec, keys.index(ref["column"])
