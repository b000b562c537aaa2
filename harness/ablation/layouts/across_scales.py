"""Layout kind ``across-scales``: one results layout gathered over several scales into one grid.

A scale of a suite is one configuration (a backbone, a model size); a paper table that puts several
configurations side by side (paper 000 Table 3: six backbones x {baseline, tDRO} on the same averages) is then
one results layout rendered at each of those scales and stacked, a block of rows per scale::

    table3-grid:
      kind: across-scales
      caption: ...
      options:
        layout: table3                 # a results layout of this suite (its columns and printed rows)
        rows: [baseline, top70]        # the rows of ours in every block (default: the layout's own)
        scales:                        # the blocks, in this order
          paper: {label: Qwen-0.5B, reported: {base/qwen-0.5b: Baseline (printed)}}
          paper-1.8b:
            label: Qwen-1.8B
            rows: [baseline, top70]    # this block's rows of ours (instead of options.rows)
            reported: [base/qwen-1.8b] # the layout's printed rows kept in this block, by their paper row
                                       # (a list keeps their labels; a mapping relabels them)

The grid has no ``columns:`` of its own: every block shows the named layout's columns at its scale, which must
be the same at every listed scale (same benchmarks, metrics and headers).  Each block is the layout's own table at
that scale with only the block's rows: its comparisons with that scale's baseline, and their correction family,
are the block's (Holm over the block's comparisons, as if that table were rendered alone), bold marks the best of
each block.  A scale without a finished run shows its printed rows only (a note says so), so the grid can be
rendered while the larger configurations are still to run; at least one scale must have finished.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.ablation.axes import suite_systems
from harness.ablation.layout import (
    LayoutKind,
    LayoutRowGroup,
    ResultsLayout,
    TableLayout,
    check_known_options,
    layout_kind,
    load_layout,
    register_layout_kind,
    results_table,
    table_section,
    with_reported,
)
from harness.ablation.paths import SUMMARY_FILE, report_dir
from harness.ablation.schema import ReportedRowEntry
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Column, Row, Table, emphasis

OPTIONS = ("layout", "rows", "scales")
SCALE_KEYS = ("label", "rows", "reported")


def _scales(layout: TableLayout) -> dict[str, dict[str, Any]]:
    """``{scale: {label, rows, reported}}`` from the options (a bare string is the block's label)."""
    where = f"layout {layout.name!r}"
    scales = layout.options.get("scales")
    if not isinstance(scales, dict) or not scales:
        raise ConfigError(f"{where}: options.scales maps each scale of the grid to its block, e.g. "
                          "{paper: {label: Qwen-0.5B, reported: [...]}}")
    out: dict[str, dict[str, Any]] = {}
    for scale, entry in scales.items():
        entry = {"label": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: options.scales.{scale} is a label or a mapping {{label, rows, reported}}, "
                              f"got {entry!r}")
        unknown = sorted(set(entry) - set(SCALE_KEYS))
        if unknown:
            raise ConfigError(f"{where}: options.scales.{scale}: unknown key(s) {', '.join(unknown)}; keys: "
                              f"{', '.join(SCALE_KEYS)}")
        reported = entry.get("reported") or {}
        if isinstance(reported, list):
            reported = {str(r): None for r in reported}
        if not isinstance(reported, dict):
            raise ConfigError(f"{where}: options.scales.{scale}.reported is a list of paper rows or a mapping "
                              f"{{paper row: label}}, got {reported!r}")
        rows = entry.get("rows", layout.options.get("rows"))
        if rows is not None and (not isinstance(rows, list) or not all(isinstance(r, str) for r in rows)):
            raise ConfigError(f"{where}: the rows of ours are a list of variant (system) ids, got {rows!r}")
        out[str(scale)] = {"label": str(entry.get("label") or scale), "rows": rows, "reported": reported}
    return out


def _paper_line(entry: ReportedRowEntry) -> str:
    ref = entry.reported
    assert ref is not None
    return str(ref.row if ref.row is not None else ref.column)


def block_layout(suite: AblationSuite, layout: TableLayout, scale: str, block: dict[str, Any]) -> TableLayout:
    """The gathered layout at ``scale`` with the block's rows: ours (``rows``, else the layout's own) first, then
    the printed rows ``reported`` names (relabelled where it maps them to a label), in the order given."""
    name = layout.options.get("layout")
    where = f"layout {layout.name!r} (scale {scale!r})"
    if not isinstance(name, str) or name == layout.name:
        raise ConfigError(f"layout {layout.name!r}: options.layout names the results layout gathered at each scale")
    if scale not in suite.scales:
        raise ConfigError(f"{where}: suite {suite.name!r} has no scale {scale!r}")
    inner = load_layout(suite, scale, name, table_section(suite))
    if not isinstance(layout_kind(inner.kind), ResultsLayout):
        raise ConfigError(f"{where}: {name!r} is a {inner.kind} layout; the grid gathers a results layout")
    printed = {_paper_line(g.reported): g.reported for g in inner.rows if g.reported is not None}
    missing = [r for r in block["reported"] if r not in printed]
    if missing:
        raise ConfigError(f"{where}: {name!r} has no printed row {', '.join(map(repr, missing))}; its printed rows: "
                          f"{', '.join(printed)}")
    if block["rows"] is None:
        ours = [LayoutRowGroup(None, g.variants) for g in inner.rows if g.reported is None]
    else:
        systems = {v.id for v in suite.variants} | {s.id for s in suite_systems(suite)}
        unknown = [r for r in block["rows"] if r not in systems]
        if unknown:
            raise ConfigError(f"{where}: unknown variant(s) {', '.join(unknown)}")
        ours = [LayoutRowGroup(None, [v]) for v in block["rows"]]
    kept = [LayoutRowGroup(None, [], reported=replace(printed[r], group=None, label=label or printed[r].label))
            for r, label in block["reported"].items()]
    return replace(inner, rows=ours + kept)


def _finished(suite: AblationSuite, scale: str, results_root: str | Path) -> bool:
    return (report_dir(results_root, suite.name, scale) / SUMMARY_FILE).exists()


def _printed_only(suite: AblationSuite, scale: str, layout: TableLayout) -> Table:
    """The block of a scale without a finished run: the layout's columns and its printed rows only."""
    from reports.comparison import metric_label  # lazy (start-up speed): imports scipy

    labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
    columns = [Column(f"{c.benchmark}/{c.metric}", c.label or metric_label(c.metric),
                      group=c.group or labels.get(c.benchmark, c.benchmark)) for c in layout.columns]
    empty = Table(columns=columns, rows=[], decimals=layout.decimals or 1, scale=100.0)
    printed = [(0, g.reported) for g in layout.rows if g.reported is not None]
    return with_reported(empty, layout, scale, [], {}, printed)


def _header(column: Column) -> tuple[str, str, str | None]:
    return column.key, column.label, column.group


@register_layout_kind("across-scales")
class AcrossScalesLayout(LayoutKind):
    """One results layout rendered at several scales, a block of rows per scale (see the module docstring)."""

    columns = "layout"          # no columns of its own: the gathered layout's

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, OPTIONS)
        if layout.rows:
            raise ConfigError(f"layout {layout.name!r}: a grid's rows are its blocks' (options.rows and "
                              "options.scales.<scale>.rows / reported), not rows:")
        headers = None
        for block_scale, block in _scales(layout).items():
            inner = block_layout(suite, layout, block_scale, block)
            shown = [(f"{c.benchmark}/{c.metric}", c.label, c.group) for c in inner.columns]
            if headers is not None and shown != headers[1]:
                raise ConfigError(f"layout {layout.name!r}: {layout.options['layout']!r} has other columns at "
                                  f"scale {block_scale!r} than at {headers[0]!r}; the blocks of a grid share "
                                  "their columns")
            headers = headers or (block_scale, shown)

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Table:
        blocks = _scales(layout)
        ran = [s for s in blocks if _finished(suite, s, results_root)]
        if not ran:
            raise ConfigError(f"layout {layout.name!r}: none of its scales ({', '.join(blocks)}) has finished results "
                              f"under {results_root} (run: harness run {suite.name} --scale <scale>)")
        tables: list[tuple[str, str, Table]] = []
        for block_scale, block in blocks.items():
            inner = block_layout(suite, layout, block_scale, block)
            table = (results_table(suite, block_scale, results_root, inner) if block_scale in ran
                     else _printed_only(suite, block_scale, inner))
            tables.append((block_scale, block["label"], table))
        first = next(t for s, _, t in tables if s == ran[0])
        rows: list[Row] = []
        meanings: dict[str, list[str]] = {}
        notes = ["One block of rows per scale; each block's comparisons are with its own baseline and corrected within "
                 "the block (as the layout's table at that scale alone); bold: the best of each block."]
        for block_scale, label, table in tables:
            if [_header(c) for c in table.columns] != [_header(c) for c in first.columns]:
                raise ConfigError(f"layout {layout.name!r}: the block of scale {block_scale!r} has other columns "
                                  f"than the block of scale {ran[0]!r}")
            flags = emphasis(table)          # bold: the best of each block, as the block's own table marks it
            for i, row in enumerate(table.rows):
                cells = {k: replace(c, bold=flags.get((i, k), (False, False))[0],
                                    underline=flags.get((i, k), (False, False))[1]) for k, c in row.cells.items()}
                rows.append(Row(row.label, cells, group=label, kind=row.kind))
            for mark, meaning in table.legend.items():
                meanings.setdefault(mark, []).append(meaning)
            prefix = f"[{label}: scale {block_scale}] "
            if block_scale not in ran:
                notes.append(prefix + f"not run under {results_root}: its printed rows only.")
            else:                        # (a block not run has no notes of its own: its rows are printed ones)
                notes += [prefix + note for note in table.notes]
        legend = {mark: _one_meaning(texts) for mark, texts in meanings.items()}
        caption = layout.caption or f"Suite '{suite.name}', layout {layout.options['layout']} across scales"
        return Table(columns=list(first.columns), rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}",
                     legend=legend, notes=list(dict.fromkeys(notes)), decimals=first.decimals, scale=first.scale,
                     bold_best=False, underline_second=False, row_header=first.row_header or "Variant")


def _one_meaning(texts: list[str]) -> str:
    """One legend entry for a marker over the blocks: their meanings differ only in each block's family size
    ("over the 6 comparisons of this table"), said once as "of its block"."""
    general = {re.sub(r"over the \d+ comparisons of this table", "over the comparisons of its block", t) for t in texts}
    return texts[0] if len(set(texts)) == 1 else "; ".join(sorted(general))


