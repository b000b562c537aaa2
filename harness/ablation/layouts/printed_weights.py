"""Layout kind ``weights-printed`` (paper 000, Table 8 / Figure 3): the ``weights`` table with a paper's printed
weights beside each variant's.

Columns are variant ids, as in ``weights`` (the sampling weights each run used or learned, datasets as rows);
options ``reported: {paper: <id or short name>, table: <k>}`` name a transcribed table of weights and
``columns: {<variant>: <paper column key>}`` which printed column goes beside which variant (without
``reported``, e.g. at a small scale whose datasets the paper does not have, it is the ``weights`` table).
Rows are found by dataset name (``names: {<dataset>: <printed row label>}`` where the paper prints another); a
printed cell is marked and footnoted, "–" where the paper has no row.  The figure is the ``weights`` figure (ours only).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ablation.layout import TableLayout, WeightsLayout, check_known_options, register_layout_kind, weights_table
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Cell, Column, Row, Table

REPORTED_MARK = "§"      # as harness.ablation.layout's printed cells
OPTIONS = ("reported", "columns", "names")


def _printed_table(layout: TableLayout) -> Any:
    from reports.papers import load_tables

    ref = layout.options.get("reported")
    if not isinstance(ref, dict) or set(ref) != {"paper", "table"}:
        raise ConfigError(f"layout {layout.name!r}: reported must be {{paper, table}}, got {ref!r}")
    (spec,) = load_tables(str(ref["paper"]), int(ref["table"]))
    return spec


@register_layout_kind("weights-printed")
class PrintedWeightsLayout(WeightsLayout):
    """Dataset weights per variant (``weights``) with a transcribed table's weights beside them."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, OPTIONS)
        if "reported" not in layout.options:       # at a scale without printed numbers: the weights table
            return
        spec = _printed_table(layout)
        mapping = layout.options.get("columns")
        variants = {c.benchmark for c in layout.columns}
        keys = {c.key for c in spec.columns}
        if not isinstance(mapping, dict) or not mapping:
            raise ConfigError(f"layout {layout.name!r}: columns maps a variant to the paper column beside it")
        for variant, key in mapping.items():
            if variant not in variants:
                raise ConfigError(f"layout {layout.name!r}: columns names {variant!r}, not a column of this layout")
            if key not in keys:
                raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no column {key!r}; columns: "
                                  f"{', '.join(sorted(keys))}")
        labels = {r.label for r in spec.rows}
        unknown_rows = sorted(v for v in (layout.options.get("names") or {}).values() if v not in labels)
        if unknown_rows:
            raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no row {', '.join(map(repr, unknown_rows))}")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        ours = weights_table(suite, scale, results_root, layout)
        if "reported" not in layout.options:
            return ours
        spec = _printed_table(layout)
        mapping: dict[str, str] = layout.options["columns"]
        names: dict[str, str] = layout.options.get("names") or {}
        index = {c.key: j for j, c in enumerate(spec.columns)}
        by_label = {r.label: r for r in spec.rows}
        columns: list[Column] = []
        for column in ours.columns:
            columns.append(column)
            if column.key in mapping:
                printed = spec.columns[index[mapping[column.key]]]
                columns.append(Column(f"printed/{column.key}", f"{printed.label} (paper {spec.paper.id})"))
        rows = []
        for row in ours.rows:
            cells = dict(row.cells)
            for variant, key in mapping.items():
                printed_row = by_label.get(names.get(row.label, row.label)) if row.kind == "data" else None
                cell = printed_row.cells[index[key]] if printed_row is not None else None
                cells[f"printed/{variant}"] = (
                    Cell(cell.value, marks=(REPORTED_MARK,), decimals=cell.decimals,
                         note=f"paper {spec.paper.id} Table {spec.number}, row {printed_row.label}, column "
                              f"{spec.columns[index[key]].label}: {cell.text} printed")
                    if printed_row is not None and cell is not None and cell.kind == "number" else Cell(None))
            rows.append(Row(row.label, cells, row.group, row.kind))
        legend = {REPORTED_MARK: f"printed in paper {spec.paper.id} Table {spec.number} (ours ran at scale {scale})"}
        return Table(columns=columns, rows=rows, caption=ours.caption, label=ours.label, legend=legend,
                     notes=ours.notes, decimals=ours.decimals, scale=ours.scale, bold_best=False,
                     row_header=ours.row_header)
