"""The shared table model: one structure, rendered to LaTeX and GitHub Markdown with the same content.

Statistics (``harness compare``), suite reports and the seed papers' tables all build a
:class:`Table` and hand it to :func:`reports.latex.render_latex` or
:func:`reports.markdown.render_markdown`.  Both renderers go through :func:`layout`, which
decides everything that is not syntax (number formatting, which cells are bold/underlined,
where rules and group headers go, which notes exist), so the two outputs cannot drift apart.

Numbers
-------
Values are stored raw (fractions such as 0.487, or numbers as printed) and shown as
``value * scale`` with ``decimals`` digits.  Rounding is *round half away from zero on the
decimal value as written*: the value's shortest decimal representation (Python ``repr``) is
multiplied by ``scale`` in decimal arithmetic and then rounded, so 0.0285 at scale 100 prints
2.9 and 2.675 at 2 decimals prints 2.68, as a person rounding the printed digits would (binary
floating point with round-half-even would give 2.8 and 2.67).  The sign follows the unrounded
value: -0.04 prints as "-0.0", so a tiny loss is not shown as a gain.  Deltas and "gain" rows
always carry a sign ("+2.9", "-0.3", "+0.0").  NaN prints as "NaN" and is never marked best.

Bold best / underline second
----------------------------
Per column, among rows of kind "data" and "baseline" with a finite numeric value, the best
*displayed* value (after rounding, respecting ``Column.higher_is_better``) is bold; values
that tie at the displayed precision are all bold.  With ``underline_second`` the next distinct
displayed value is underlined (ties all underlined).  A column with fewer than two candidates
gets no marking.  ``Cell.bold``/``Cell.underline`` set explicitly are always honoured.

Tables whose *columns* are the systems (datasets as rows, e.g. paper 003's BEIR tables) set
``best_along="row"``: the best system is then marked within each row of kind "data",
"baseline" or "average" (the systems' averages are comparable too), over its numeric cells,
and ``higher_is_better`` must agree across the columns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import TypeGuard

ROW_KINDS = ("data", "baseline", "average", "gain")
RANKED_KINDS = ("data", "baseline")
ROW_RANKED_KINDS = ("data", "baseline", "average")   # with best_along="row": every row of systems' values
BEST_ALONG = ("column", "row")
MISSING = "–"  # en dash: a cell without a value


@dataclass
class Cell:
    value: float | str | None              # None renders as "–"
    delta: float | None = None             # rendered as "48.7 (+2.9)"
    marks: tuple[str, ...] = ()            # significance markers, explained in Table.legend
    bold: bool = False                     # set explicitly, or by best-per-column marking
    underline: bool = False
    note: str | None = None                # e.g. "printed 48.8"; listed under the table
    decimals: int | None = None            # overrides Table.decimals for this cell (e.g. a paper's printed precision)


@dataclass
class Column:
    key: str                               # unique id, e.g. "scifact/ndcg@10"
    label: str                             # lower header, e.g. "nDCG@10"
    group: str | None = None               # upper header (benchmark), e.g. "SciFact"
    higher_is_better: bool = True


@dataclass
class Row:
    label: str
    cells: dict[str, Cell]                 # by Column.key; missing -> "–"
    group: str | None = None               # row group (a group header row / \midrule block)
    kind: str = "data"                     # "data" | "baseline" | "average" | "gain"


@dataclass
class Table:
    columns: list[Column]
    rows: list[Row]
    caption: str = ""
    label: str = ""                        # LaTeX \label
    legend: dict[str, str] = field(default_factory=dict)   # marker -> meaning
    notes: list[str] = field(default_factory=list)         # printed under the table
    decimals: int = 1
    scale: float = 100.0
    bold_best: bool = True
    underline_second: bool = False
    row_header: str = ""                   # header over the row-label column, e.g. "Model"
    best_along: str = "column"             # "column": best row per column; "row": best column (system) per row


# ---------------------------------------------------------------------------------------------
# number formatting


def round_display(value: float, scale: float = 1.0, decimals: int = 1) -> Decimal:
    """``value * scale`` rounded half away from zero at ``decimals`` digits, in decimal arithmetic."""
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    exact = Decimal(repr(float(value))) * Decimal(repr(float(scale)))
    rounded = exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    if rounded == 0:
        # keep the sign of a tiny negative ("-0.0"); an exact zero is "0.0"
        rounded = rounded.copy_abs().copy_negate() if exact < 0 else rounded.copy_abs()
    return rounded


def format_number(value: float, scale: float = 1.0, decimals: int = 1, signed: bool = False) -> str:
    """Format a number for a table cell (plain ASCII; renderers typeset the minus sign)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        text = "inf" if value > 0 else "-inf"
        return "+inf" if signed and value > 0 else text
    text = str(round_display(value, scale, decimals))
    if signed and not text.startswith("-"):
        text = "+" + text
    return text


def format_delta(delta: float, scale: float = 1.0, decimals: int = 1) -> str:
    """A difference with an explicit sign: "+2.9", "-0.3", "+0.0" (and "-0.0" for tiny losses)."""
    return format_number(delta, scale, decimals, signed=True)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# layout shared by the renderers


@dataclass(frozen=True)
class FormattedCell:
    """A cell after every content decision; renderers only add syntax and escaping."""

    text: str                      # plain, unescaped: number, string or "–"
    numeric: bool                  # text is a formatted number (renderers typeset its minus sign)
    delta: str | None = None       # plain, e.g. "+2.9"
    marks: tuple[str, ...] = ()
    bold: bool = False
    underline: bool = False
    note_ref: str | None = None    # e.g. "1", pointing into Layout.cell_notes


@dataclass(frozen=True)
class GroupHeader:
    name: str


@dataclass(frozen=True)
class Rule:
    """A horizontal rule (LaTeX \\midrule); Markdown has none and skips it."""


@dataclass(frozen=True)
class BodyRow:
    label: str
    kind: str
    cells: tuple[FormattedCell, ...]


@dataclass(frozen=True)
class HeaderSpan:
    group: str | None
    start: int                     # 0-based index among the data columns
    span: int


@dataclass(frozen=True)
class Layout:
    columns: tuple[Column, ...]
    spans: tuple[HeaderSpan, ...]
    has_groups: bool
    body: tuple[GroupHeader | Rule | BodyRow, ...]
    caption: str
    label: str
    legend: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    cell_notes: tuple[tuple[str, str], ...]   # (ref, "row / column: note")
    row_header: str


def validate(table: Table) -> None:
    """Raise ``ValueError`` naming the problem if the table is inconsistent."""
    keys = [c.key for c in table.columns]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"duplicate column keys: {', '.join(duplicates)}")
    if table.decimals < 0:
        raise ValueError(f"Table.decimals must be >= 0, got {table.decimals}")
    if table.best_along not in BEST_ALONG:
        raise ValueError(f"Table.best_along must be one of {', '.join(BEST_ALONG)}, got {table.best_along!r}")
    if table.best_along == "row" and len({c.higher_is_better for c in table.columns}) > 1:
        raise ValueError("best_along='row' compares across columns, so higher_is_better must agree on every column")
    known = set(keys)
    for row in table.rows:
        if row.kind not in ROW_KINDS:
            raise ValueError(f"row {row.label!r}: kind must be one of {', '.join(ROW_KINDS)}, got {row.kind!r}")
        unknown = sorted(set(row.cells) - known)
        if unknown:
            raise ValueError(f"row {row.label!r}: cells for unknown columns {', '.join(unknown)}")
        for key, cell in row.cells.items():
            if cell.value is not None and not isinstance(cell.value, str) and not is_number(cell.value):
                raise ValueError(f"row {row.label!r}, column {key!r}: value must be a number, a string or None, "
                                 f"got {type(cell.value).__name__}")
            if cell.decimals is not None and cell.decimals < 0:
                raise ValueError(f"row {row.label!r}, column {key!r}: decimals must be >= 0")
            for mark in cell.marks:
                if mark not in table.legend:
                    raise ValueError(f"row {row.label!r}, column {key!r}: marker {mark!r} is not explained in "
                                     "Table.legend")


def _displayed(table: Table, cell: Cell) -> Decimal | None:
    if not is_number(cell.value) or not math.isfinite(float(cell.value)):
        return None
    decimals = table.decimals if cell.decimals is None else cell.decimals
    return round_display(float(cell.value), table.scale, decimals)


def emphasis(table: Table) -> dict[tuple[int, str], tuple[bool, bool]]:
    """``{(row index, column key): (bold, underline)}`` from best/second-best marking plus explicit flags."""
    result: dict[tuple[int, str], tuple[bool, bool]] = {}
    for i, row in enumerate(table.rows):
        for key, cell in row.cells.items():
            if cell.bold or cell.underline:
                result[(i, key)] = (cell.bold, cell.underline)
    if not (table.bold_best or table.underline_second):
        return result
    groups: list[tuple[bool, list[tuple[tuple[int, str], Decimal]]]] = []
    if table.best_along == "row":
        higher = table.columns[0].higher_is_better if table.columns else True
        for i, row in enumerate(table.rows):
            if row.kind in ROW_RANKED_KINDS:
                groups.append((higher, [((i, c.key), shown) for c in table.columns
                                        if (shown := _shown(table, row.cells.get(c.key))) is not None]))
    else:
        for column in table.columns:
            groups.append((column.higher_is_better,
                           [((i, column.key), shown) for i, row in enumerate(table.rows) if row.kind in RANKED_KINDS
                            and (shown := _shown(table, row.cells.get(column.key))) is not None]))
    for higher_is_better, candidates in groups:
        if len(candidates) < 2:
            continue
        ranked = sorted({v for _, v in candidates}, reverse=higher_is_better)
        best = ranked[0]
        second = ranked[1] if len(ranked) > 1 else None
        for where, shown in candidates:
            bold, underline = result.get(where, (False, False))
            if table.bold_best and shown == best:
                bold = True
            if table.underline_second and second is not None and shown == second:
                underline = True
            if bold or underline:
                result[where] = (bold, underline)
    return result


def _shown(table: Table, cell: Cell | None) -> Decimal | None:
    return None if cell is None else _displayed(table, cell)


def _format_cell(table: Table, row: Row, cell: Cell | None, flags: tuple[bool, bool],
                 note_ref: str | None) -> FormattedCell:
    bold, underline = flags
    if cell is None:
        return FormattedCell(MISSING, numeric=False, bold=bold, underline=underline, note_ref=note_ref)
    decimals = table.decimals if cell.decimals is None else cell.decimals
    if cell.value is None:
        text, numeric = MISSING, False
    elif isinstance(cell.value, str):
        text, numeric = cell.value, False
    else:
        text = format_number(cell.value, table.scale, decimals, signed=row.kind == "gain")
        numeric = True
    delta = None if cell.delta is None else format_delta(cell.delta, table.scale, decimals)
    return FormattedCell(text, numeric, delta, tuple(cell.marks), bold, underline, note_ref)


def layout(table: Table) -> Layout:
    """Every content decision of a rendered table (see the module docstring)."""
    validate(table)
    flags = emphasis(table)

    spans: list[HeaderSpan] = []
    for j, column in enumerate(table.columns):
        if spans and column.group is not None and spans[-1].group == column.group:
            last = spans[-1]
            spans[-1] = HeaderSpan(last.group, last.start, last.span + 1)
        else:
            spans.append(HeaderSpan(column.group, j, 1))
    has_groups = any(c.group is not None for c in table.columns)

    body: list[GroupHeader | Rule | BodyRow] = []
    cell_notes: list[tuple[str, str]] = []
    current_group: str | None = None
    previous_kind: str | None = None
    for i, row in enumerate(table.rows):
        group = row.group or None   # an empty group name is no group
        if group != current_group:
            if body:
                body.append(Rule())
            if group is not None:
                body.append(GroupHeader(group))
            current_group = group
        elif (row.kind in ("average", "gain") and previous_kind is not None
              and previous_kind not in ("average", "gain")):
            body.append(Rule())
        cells = []
        for column in table.columns:
            cell = row.cells.get(column.key)
            ref = None
            if cell is not None and cell.note:
                ref = str(len(cell_notes) + 1)
                header = f"{column.group} {column.label}" if column.group else column.label
                where = f"{row.group} / {row.label}" if row.group else row.label
                cell_notes.append((ref, f"{where}, {header}: {cell.note}"))
            cells.append(_format_cell(table, row, cell, flags.get((i, column.key), (False, False)), ref))
        body.append(BodyRow(row.label, row.kind, tuple(cells)))
        previous_kind = row.kind

    return Layout(
        columns=tuple(table.columns),
        spans=tuple(spans),
        has_groups=has_groups,
        body=tuple(body),
        caption=table.caption,
        label=table.label,
        legend=tuple(table.legend.items()),
        notes=tuple(table.notes),
        cell_notes=tuple(cell_notes),
        row_header=table.row_header,
    )

