"""Layout kind ``score-vs-size``: a score against the parameter count, the systems a paper prints beside ours
(paper 001's Figure 1: average nDCG@10 on the 11 BEIR tasks of Neelakantan et al. (2022) against model size,
log x axis).

The printed systems come from a transcribed table (``printed: {paper, table, score_row, size_row, columns}``):
``columns`` are the table's column keys to show, ``score_row`` the row label of the score and ``size_row`` the row
label of the parameter counts (printed as ``110M``, ``1.2B``, ``175B``).  Our rows are the layout's ``rows``
(variant ids), each read at the layout's single column (``{benchmark, metric}``: paper 001's ``CPT-Sub``
aggregate) with its size from ``sizes: {variant: "110M"}``; a variant without a stored result is left out (the
table's note names it), so the figure shows the printed systems until our runs finish.

Where the paper's figure has no printed values (paper 001 prints none for Figure 1), the table's numbers stand
for the figure's points, and the caption of the suite's layout says so.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.ablation.axes import FinishedSuite, systems_of
from harness.ablation.layout import LayoutKind, TableLayout, check_known_options, register_layout_kind
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError, HarnessError
from reports.table import Cell, Column, Row, Table

OPTIONS = ("printed", "sizes")
PRINTED_KEYS = ("paper", "table", "score_row", "size_row", "columns")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*$", re.IGNORECASE)
_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_size(text: str) -> float | None:
    """``"110M"`` -> 1.1e8, ``"1.2B"`` -> 1.2e9; None for anything else (a dash, ``66M*18``: one model per task)."""
    match = _SIZE.match(str(text))
    return float(match.group(1)) * _UNITS[match.group(2).upper()] if match else None


def _printed_spec(layout: TableLayout) -> tuple[Any, dict[str, Any]]:
    from reports.papers.catalog import load_tables  # lazy (start-up speed): reads the transcriptions

    ref = layout.options.get("printed")
    if not isinstance(ref, dict) or set(ref) != set(PRINTED_KEYS):
        raise ConfigError(f"layout {layout.name!r}: printed must be {{{', '.join(PRINTED_KEYS)}}}, got {ref!r}")
    (spec,) = load_tables(str(ref["paper"]), int(ref["table"]))
    return spec, ref


def printed_points(layout: TableLayout) -> tuple[list[dict[str, Any]], str]:
    """``([{label, size_text, size, score}], table reference)`` of the printed systems (checked)."""
    spec, ref = _printed_spec(layout)
    rows = {r.label: r for r in spec.rows}
    index = {c.key: j for j, c in enumerate(spec.columns)}
    for name in ("score_row", "size_row"):
        if ref[name] not in rows:
            raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no row {ref[name]!r}")
    out = []
    for key in ref["columns"]:
        if key not in index:
            raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no column {key!r}; columns: "
                              f"{', '.join(index)}")
        size_cell, score_cell = rows[ref["size_row"]].cells[index[key]], rows[ref["score_row"]].cells[index[key]]
        size = parse_size(size_cell.text)
        if size is None or score_cell.value is None:
            raise ConfigError(f"layout {layout.name!r}: column {key!r} of {spec.ref} prints no single size or no "
                              f"score ({size_cell.text!r}, {score_cell.text!r})")
        out.append({"label": spec.columns[index[key]].label, "size_text": size_cell.text, "size": size,
                    "score": float(score_cell.value)})
    return out, f"{spec.ref}, rows {ref['score_row']!r} and {ref['size_row']!r}"


@register_layout_kind("score-vs-size")
class ScoreVsSizeLayout(LayoutKind):
    """Printed systems and our variants: score against parameter count."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, OPTIONS)
        printed_points(layout)
        if len(layout.columns) != 1:
            raise ConfigError(f"layout {layout.name!r}: one column (the score of our rows), got "
                              f"{len(layout.columns)}")
        sizes = dict(layout.options.get("sizes") or {})
        for variant in _variants(layout):
            if parse_size(str(sizes.get(variant, ""))) is None:
                raise ConfigError(f"layout {layout.name!r}: sizes must give row {variant!r} a parameter count "
                                  f"such as 110M, got {sizes.get(variant)!r}")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return score_size_table(*score_size_points(suite, scale, results_root, layout), layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.plots_dro import score_size_figure  # lazy (start-up speed): imports matplotlib

        printed, ours, _, _ = score_size_points(suite, scale, results_root, layout)
        column = layout.columns[0]
        return score_size_figure(printed, ours, ylabel=f"{column.benchmark} {column.metric}",
                                 title=layout.caption or None)


def _variants(layout: TableLayout) -> list[str]:
    return [v for group in layout.rows for v in group.variants]


def score_size_points(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], str]:
    """``(printed points, our points, variants without a stored result, printed table reference)``."""
    printed, reference = printed_points(layout)
    column = layout.columns[0]
    sizes = dict(layout.options.get("sizes") or {})
    labels = {v.id: v.label for v in suite.variants}
    ours: list[dict[str, Any]] = []
    missing: list[str] = []
    try:
        finished = FinishedSuite(suite, scale, results_root) if _variants(layout) else None
    except HarnessError:        # the suite has not run at this scale: the printed systems alone
        return printed, ours, _variants(layout), reference
    for variant in _variants(layout):
        assert finished is not None
        system = systems_of(suite.variant(variant))[0]
        try:
            score = finished.value(system, column.benchmark, column.metric)[0]
        except HarnessError:
            missing.append(variant)
            continue
        ours.append({"label": labels[variant], "size_text": str(sizes[variant]), "size": parse_size(sizes[variant]),
                     "score": float(score)})
    return printed, ours, missing, reference


def score_size_table(printed: list[dict[str, Any]], ours: list[dict[str, Any]], missing: list[str],
                     reference: str, layout: TableLayout) -> Any:
    column = layout.columns[0]
    columns = [Column("parameters", "Parameters"), Column("score", column.label or column.metric)]
    rows = [Row(p["label"], {"parameters": Cell(p["size_text"]), "score": Cell(p["score"], decimals=3)},
                group="Printed") for p in printed]
    rows += [Row(p["label"], {"parameters": Cell(p["size_text"]), "score": Cell(p["score"])}, group="Ours")
             for p in ours]
    notes = [f"Printed: {reference}; ours: {column.benchmark} {column.metric} of each row's stored result, its "
             "size from the layout's sizes option."]
    if missing:
        notes.append(f"Not run yet (left out): {', '.join(missing)}.")
    return Table(columns=columns, rows=rows, caption=layout.caption or "Score against parameter count",
                 label=f"tab:{layout.name}", notes=notes, decimals=3, scale=1.0, bold_best=False,
                 row_header="System")
