"""The declarative schema of a transcribed paper table (see reports/papers/README.md).

A table file holds the numbers exactly as printed (one text per cell) plus declarations of
which cells are *derived* (averages, sums, differences, deltas against a baseline row).  This
module parses and validates a file into :class:`TableSpec`; every problem is an
:class:`~harness.errors.InputError` naming the file, the line and what is wrong.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

from harness.errors import InputError
from reports.papers.yamlsrc import YDict, YList, load_yaml

SCHEMA_VERSION = 1
ROW_KINDS = ("data", "baseline", "average", "gain")
OPS = ("mean", "sum", "diff")
DASHES = ("-", "–", "—", "−", "一")     # the paper prints "no value" ("一" is a common OCR reading of "—")
GAP = "?"                              # the paper prints something the text extraction lost
DEFAULT_MARKS = ("*", "∗", "†", "‡", "§", "¶", "#", "♭", "♮", "♯")

_NUMBER = r"[+-]?\d+(?:\.\d+)?"
# a printed value may group its thousands with commas ("40,203", paper 004 Tables 10 and 13)
_GROUPED = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"


@dataclass(frozen=True)
class Printed:
    """One cell as printed: ``48.7* (+2.9)`` -> value 48.7, marks ("*",), delta +2.9."""

    text: str
    kind: str                      # "number" | "dash" | "gap" | "text"
    value: float | None = None
    decimals: int | None = None
    marks: tuple[str, ...] = ()
    delta: float | None = None
    delta_text: str | None = None
    delta_decimals: int | None = None


@dataclass(frozen=True)
class Derivation:
    op: str                        # "mean" | "sum" | "diff" (first minus second)
    of: tuple[str, ...]            # row ids (in a row) or column keys (in a column)
    use: str = "value"             # rows only: combine the operands' "value" or their "delta"
    skip_missing: bool = False     # mean/sum over the operands that have a value
    line: int = 0


@dataclass(frozen=True)
class ColumnSpec:
    key: str
    label: str
    group: str | None
    higher_is_better: bool
    derive: Derivation | None
    line: int


@dataclass(frozen=True)
class RowSpec:
    id: str
    label: str
    group: str | None
    kind: str
    printed_label: str | None
    delta_vs: str | None
    derive: Derivation | None
    cells: tuple[Printed, ...]
    line: int
    cell_lines: tuple[int, ...]


@dataclass(frozen=True)
class PaperSpec:
    id: str
    short_name: str
    title: str
    source: str                    # file name of the text extraction in the shared papers folder
    directory: Path


@dataclass(frozen=True)
class TableSpec:
    paper: PaperSpec
    number: int
    caption: str
    source_lines: tuple[int, int] | None
    context: str
    decimals: int
    verify_decimals: int
    bold_best: bool
    underline_second: bool
    row_header: str
    legend: dict[str, str]
    notes: tuple[str, ...]
    columns: tuple[ColumnSpec, ...]
    rows: tuple[RowSpec, ...]
    path: Path
    best_along: str = "column"     # "row" in tables whose columns are the systems (reports.table.Table)
    counts: bool = False           # every number is an exact count: verify allows no rounding

    def row(self, row_id: str) -> RowSpec:
        return next(r for r in self.rows if r.id == row_id)

    @property
    def ref(self) -> str:
        return f"paper {self.paper.id} ({self.paper.short_name}) table {self.number}"


def _decimals(number_text: str) -> int:
    return len(number_text.split(".")[1]) if "." in number_text else 0


def parse_printed(text: str, marks: tuple[str, ...]) -> Printed:
    """Parse one printed cell; ``marks`` are the marker strings the table may use."""
    text = text.strip()
    if text == GAP:
        return Printed(text, "gap")
    if text in DASHES:
        return Printed(text, "dash")
    mark_re = "|".join(re.escape(m) for m in sorted(marks, key=len, reverse=True)) or r"(?!)"
    pattern = (rf"^(?P<num>{_GROUPED})(?P<marks>(?:{mark_re})*)\s*"
               rf"(?:\(\s*(?P<d1>{_NUMBER})\s*\)|(?P<d2>[+-]\d+(?:\.\d+)?))?$")
    match = re.match(pattern, text)
    if match is None:
        return Printed(text, "text")
    num = match.group("num")
    found = tuple(re.findall(mark_re, match.group("marks"))) if match.group("marks") else ()
    delta_text = match.group("d1") or match.group("d2")
    return Printed(
        text, "number", float(num.replace(",", "")), _decimals(num), found,
        None if delta_text is None else float(delta_text), delta_text,
        None if delta_text is None else _decimals(delta_text),
    )


# ---------------------------------------------------------------------------------------------
# field helpers


def _line(obj: YDict, key: str) -> int:
    return obj.lines.get(key, obj.line)


def _require(obj: YDict, key: str, path: Path) -> object:
    if key not in obj or obj[key] is None:
        raise InputError(path, f"missing required field {key!r}", obj.line)
    return obj[key]


# A required field, or one with a string default, is always a string.
@overload
def _str(obj: YDict, key: str, path: Path, default: str, required: bool = False) -> str: ...
@overload
def _str(obj: YDict, key: str, path: Path, default: None = None, *, required: Literal[True]) -> str: ...
@overload
def _str(obj: YDict, key: str, path: Path, default: None = None, required: bool = False) -> str | None: ...
def _str(obj: YDict, key: str, path: Path, default: str | None = None, required: bool = False) -> str | None:
    if required:
        _require(obj, key, path)
    value = obj.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InputError(path, f"{key!r} must be a string", _line(obj, key))
    return value


def _int(obj: YDict, key: str, path: Path, default: int | None = None, minimum: int = 0) -> int:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise InputError(path, f"missing required field {key!r}", obj.line)
        return default
    if not isinstance(value, str) or not re.fullmatch(r"\d+", value) or int(value) < minimum:
        raise InputError(path, f"{key!r} must be an integer >= {minimum}, got {value!r}", _line(obj, key))
    return int(value)


def _bool(obj: YDict, key: str, path: Path, default: bool) -> bool:
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise InputError(path, f"{key!r} must be true or false, got {value!r}", _line(obj, key))
    return value


def _check_keys(obj: object, allowed: set[str], path: Path, what: str, line: int) -> YDict:
    if not isinstance(obj, YDict):
        raise InputError(path, f"{what} must be a mapping", line)
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise InputError(path, f"unknown field {unknown[0]!r} in {what} (allowed: {', '.join(sorted(allowed))})",
                         obj.lines[unknown[0]])
    return obj


def _derivation(obj: object, path: Path, line: int, in_row: bool) -> Derivation:
    allowed = {"op", "of", "use", "skip_missing"} if in_row else {"op", "of", "skip_missing"}
    obj = _check_keys(obj, allowed, path, "derive", line)
    op = _str(obj, "op", path, required=True)
    if op not in OPS:
        raise InputError(path, f"derive.op must be one of {', '.join(OPS)}, got {op!r}", _line(obj, "op"))
    of = _require(obj, "of", path)
    if not isinstance(of, YList) or not of or not all(isinstance(x, str) for x in of):
        raise InputError(path, "derive.of must be a non-empty list of " + ("row ids" if in_row else "column keys"),
                         _line(obj, "of"))
    if op == "diff" and len(of) != 2:
        raise InputError(path, f"derive.op 'diff' needs exactly 2 operands, got {len(of)}", _line(obj, "of"))
    use = _str(obj, "use", path, default="value")
    if use not in ("value", "delta"):
        raise InputError(path, f"derive.use must be 'value' or 'delta', got {use!r}", _line(obj, "use"))
    return Derivation(op, tuple(of), use, _bool(obj, "skip_missing", path, False), obj.line)


_TABLE_KEYS = {"schema", "table", "caption", "source", "decimals", "verify_decimals", "bold_best",
               "underline_second", "row_header", "legend", "notes", "columns", "rows", "best_along", "counts"}
_COLUMN_KEYS = {"key", "label", "group", "higher_is_better", "derive"}
_ROW_KEYS = {"id", "label", "group", "kind", "printed_label", "delta_vs", "derive", "cells"}


def load_paper_spec(directory: Path) -> PaperSpec:
    path = directory / "paper.yaml"
    doc = _check_keys(load_yaml(path), {"schema", "id", "short_name", "title", "source"}, path, "paper.yaml", 1)
    if _int(doc, "schema", path) != SCHEMA_VERSION:
        raise InputError(path, f"schema must be {SCHEMA_VERSION}", _line(doc, "schema"))
    paper_id = _str(doc, "id", path, required=True)
    if paper_id != directory.name:
        raise InputError(path, f"id {paper_id!r} does not match the folder name {directory.name!r}", _line(doc, "id"))
    short = _str(doc, "short_name", path, required=True)
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", short):
        raise InputError(path, f"short_name must be lower-case letters, digits, '-' or '_', got {short!r}",
                         _line(doc, "short_name"))
    return PaperSpec(paper_id, short, _str(doc, "title", path, required=True),
                     _str(doc, "source", path, required=True), directory)


def load_table_spec(path: Path, paper: PaperSpec) -> TableSpec:
    """Parse and validate one ``table<k>.yaml``."""
    doc = _check_keys(load_yaml(path), _TABLE_KEYS, path, "the table file", 1)
    if _int(doc, "schema", path) != SCHEMA_VERSION:
        raise InputError(path, f"schema must be {SCHEMA_VERSION}", _line(doc, "schema"))
    number = _int(doc, "table", path, minimum=1)
    if path.stem != f"table{number}":
        raise InputError(path, f"table {number} must live in table{number}.yaml", _line(doc, "table"))

    source_lines = None
    context = ""
    if doc.get("source") is not None:
        source = _check_keys(doc["source"], {"lines", "context"}, path, "source", _line(doc, "source"))
        context = _str(source, "context", path, default="")
        lines = source.get("lines")
        if lines is not None:
            if (not isinstance(lines, YList) or len(lines) != 2
                    or not all(isinstance(x, str) and x.isdigit() for x in lines) or int(lines[0]) > int(lines[1])):
                raise InputError(path, "source.lines must be [first, last] line numbers", _line(source, "lines"))
            source_lines = (int(lines[0]), int(lines[1]))

    legend_obj = doc.get("legend") or YDict()
    if not isinstance(legend_obj, YDict) or not all(isinstance(v, str) for v in legend_obj.values()):
        raise InputError(path, "legend must map marker -> meaning (strings)", _line(doc, "legend"))
    legend = dict(legend_obj)
    notes = doc.get("notes") or YList()
    if not isinstance(notes, YList) or not all(isinstance(n, str) for n in notes):
        raise InputError(path, "notes must be a list of strings", _line(doc, "notes"))
    marks = tuple(dict.fromkeys(tuple(legend) + DEFAULT_MARKS))

    columns = _columns(doc, path)
    rows = _rows(doc, path, columns, marks, legend)
    best_along = _str(doc, "best_along", path, default="column")
    if best_along not in ("column", "row"):
        raise InputError(path, f"best_along must be 'column' (best row per column) or 'row' (best column per "
                               f"row, for tables whose columns are systems), got {best_along!r}",
                         _line(doc, "best_along"))
    if best_along == "row" and len({c.higher_is_better for c in columns}) > 1:
        raise InputError(path, "best_along 'row' compares across columns: higher_is_better must agree on all "
                               "columns", _line(doc, "best_along"))
    spec = TableSpec(
        paper=paper, number=number, caption=_str(doc, "caption", path, required=True),
        source_lines=source_lines, context=context,
        decimals=_int(doc, "decimals", path, default=1), verify_decimals=_int(doc, "verify_decimals", path, default=0),
        bold_best=_bool(doc, "bold_best", path, True), underline_second=_bool(doc, "underline_second", path, False),
        row_header=_str(doc, "row_header", path, default=""), legend=legend, notes=tuple(notes),
        columns=columns, rows=rows, path=path, best_along=best_along, counts=_bool(doc, "counts", path, False),
    )
    _check_references(spec, path)
    return spec


def _columns(doc: YDict, path: Path) -> tuple[ColumnSpec, ...]:
    items = _require(doc, "columns", path)
    if not isinstance(items, YList) or not items:
        raise InputError(path, "columns must be a non-empty list", _line(doc, "columns"))
    columns: list[ColumnSpec] = []
    for item, line in zip(items, items.lines):
        obj = _check_keys(item, _COLUMN_KEYS, path, "a column", line)
        key = _str(obj, "key", path, required=True)
        if any(c.key == key for c in columns):
            raise InputError(path, f"duplicate column key {key!r}", _line(obj, "key"))
        derive = _derivation(obj["derive"], path, _line(obj, "derive"), in_row=False) if obj.get("derive") else None
        columns.append(ColumnSpec(key, _str(obj, "label", path, default=key), _str(obj, "group", path),
                                  _bool(obj, "higher_is_better", path, True), derive, obj.line))
    return tuple(columns)


def _rows(doc: YDict, path: Path, columns: tuple[ColumnSpec, ...], marks: tuple[str, ...],
          legend: dict[str, str]) -> tuple[RowSpec, ...]:
    items = _require(doc, "rows", path)
    if not isinstance(items, YList) or not items:
        raise InputError(path, "rows must be a non-empty list", _line(doc, "rows"))
    rows: list[RowSpec] = []
    for item, line in zip(items, items.lines):
        obj = _check_keys(item, _ROW_KEYS, path, "a row", line)
        label = _str(obj, "label", path, required=True)
        group = _str(obj, "group", path)
        row_id = _str(obj, "id", path) or (f"{group}/{label}" if group else label)
        if any(r.id == row_id for r in rows):
            raise InputError(path, f"duplicate row id {row_id!r} (give the row an explicit 'id')", obj.line)
        kind = _str(obj, "kind", path, default="data")
        if kind not in ROW_KINDS:
            raise InputError(path, f"row kind must be one of {', '.join(ROW_KINDS)}, got {kind!r}", _line(obj, "kind"))
        derive = _derivation(obj["derive"], path, _line(obj, "derive"), in_row=True) if obj.get("derive") else None
        cells_obj = _require(obj, "cells", path)
        if not isinstance(cells_obj, YList):
            raise InputError(path, "cells must be a list (one printed text per column)", _line(obj, "cells"))
        if len(cells_obj) != len(columns):
            raise InputError(path, f"row {label!r} has {len(cells_obj)} cells for {len(columns)} columns",
                             _line(obj, "cells"))
        cells: list[Printed] = []
        for text, cell_line in zip(cells_obj, cells_obj.lines):
            if text is None or isinstance(text, bool):
                raise InputError(path, f"row {label!r}: write every cell as printed text ('?' for an extraction "
                                       f"gap, '-' for a printed dash), got {text!r}", cell_line)
            cell = parse_printed(text, marks)
            unknown = [m for m in cell.marks if m not in legend]
            if unknown:
                raise InputError(path, f"row {label!r}: marker {unknown[0]!r} in {text!r} is not declared in legend",
                                 cell_line)
            if cell.delta is not None and obj.get("delta_vs") is None:
                raise InputError(path, f"row {label!r}: cell {text!r} prints a delta but the row declares no "
                                       "'delta_vs' baseline row", cell_line)
            column = columns[len(cells)]
            if cell.kind == "text" and (derive is not None or column.derive is not None):
                raise InputError(path, f"row {label!r}: derived cell {text!r} must be a number, '?' or '-'", cell_line)
            cells.append(cell)
        rows.append(RowSpec(row_id, label, group, kind, _str(obj, "printed_label", path), _str(obj, "delta_vs", path),
                            derive, tuple(cells), obj.line, tuple(cells_obj.lines)))
    return tuple(rows)


def _check_references(spec: TableSpec, path: Path) -> None:
    ids = {r.id: r for r in spec.rows}
    keys = {c.key for c in spec.columns}
    for row in spec.rows:
        if row.delta_vs is not None and (row.delta_vs not in ids or row.delta_vs == row.id):
            raise InputError(path, f"row {row.label!r}: delta_vs {row.delta_vs!r} is not another row's id "
                                   f"(ids: {', '.join(ids)})", row.line)
        if row.derive is not None:
            for ref in row.derive.of:
                if ref not in ids or ref == row.id:
                    raise InputError(path, f"row {row.label!r}: derive.of names {ref!r}, which is not another "
                                           "row's id", row.derive.line)
                if row.derive.use == "delta" and ids[ref].delta_vs is None:
                    raise InputError(path, f"row {row.label!r}: derive uses the delta of {ref!r}, which declares "
                                           "no delta_vs", row.derive.line)
    for column in spec.columns:
        if column.derive is not None:
            for ref in column.derive.of:
                if ref not in keys or ref == column.key:
                    raise InputError(path, f"column {column.key!r}: derive.of names {ref!r}, which is not another "
                                           "column's key", column.derive.line)
