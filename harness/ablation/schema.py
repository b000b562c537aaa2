"""The suite file's typed schema, and the one reader its type hints drive.

Each section of a suite file (:mod:`harness.ablation.spec` documents the format) is a dataclass
here; :class:`SchemaReader` reads a loaded YAML value into one by its type hints and records every
problem, with its key path (and so its line), in a :class:`~harness.ablation.problems.Problems`
instead of stopping at the first.  The reader handles:

* ``str``, ``int``, ``float``, ``bool`` (a bool is never a number; an int is never a bool),
  ``Literal[...]`` and ``choices=`` (the closest choice suggested), ``Any`` (taken as written);
* ``list[T]`` (non-empty unless ``non_empty=False``), ``dict[str, T]`` (keys optionally checked as
  folder names), ``T | None``, and unions of a scalar and a section (``str | ColumnEntry``: a
  variant id or a column mapping), dispatched on what the value is;
* nested sections: unknown keys named with the closest known key (difflib), required keys,
  ``key: null`` taken as absent, and a section's own ``finish`` for checks across its keys.

Field options (:func:`setting`) add what a type cannot say: a minimum, an open range, a folder-name
check, the words of the expected value in a message, an engine check (``validate``: a function that
raises ConfigError) or a reader of its own (``read``) for values with a grammar (seeds, sweeps,
checkpoints, TrainSpec overrides).  A section records which keys the file gave (:func:`given`).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union

from harness.ablation.problems import KeyPath, Problems
from harness.errors import ConfigError, InputError
from harness.io.paths import check_component
from harness.retrieval.impact import check_quantization
from harness.retrieval.sparse import check_backend
from harness.train.spec import LIMIT_KEYS, LoraSpec, TrainSpec, field_problems
from reports.papers import PaperSpec, TableSpec, list_papers, load_tables, table_numbers

# Top-level keys starting with this are extension fields: holders for YAML anchors (``x-stage1: &stage1``).
EXTENSION_PREFIX = "x-"


def setting(default: Any = None, *, required: bool = False, factory: Callable[[], Any] | None = None,
            **options: Any) -> Any:
    """A section field with reader options: ``minimum``, ``open_range=(lo, hi)``, ``names`` (a number is
    taken as its digits), ``component`` (what the name is: it must be one safe folder name),
    ``key_component`` (the same for a mapping's keys), ``what`` (the expected value, in words),
    ``choices`` (a tuple, or a function returning one), ``non_empty``, ``item_what``, ``validate``
    (``fn(value)`` raising ConfigError), ``read`` (``fn(value, keypath, reader)``: the field's own reader)."""
    metadata = {"required": required, **options}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def show(value: Any) -> str:
    """A value as a message shows it: its repr (shortened) and its type."""
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"


def closest(name: str, known: Any) -> str | None:
    """The known name most like ``name`` (difflib), or None."""
    import difflib

    match = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return match[0] if match else None


def given(section: Any) -> frozenset[str]:
    """The keys a section read from a file had (a key with the value null counts as absent)."""
    return getattr(section, "_given", frozenset())


class Section:
    """Base of the schema's sections: the messages a section uses when it is not a mapping or lacks a key."""

    # {at}: the section's own key (a scale's name), {got}: the value shown
    EXPECT: ClassVar[str] = "expected a mapping, got {got}"
    # {key}: the missing key, {at}: the section's own key
    MISSING: ClassVar[str] = "missing {key!r}"
    EXTENSIONS: ClassVar[bool] = False       # keys starting with EXTENSION_PREFIX are allowed (and ignored)
    _given: frozenset[str] = frozenset()     # the keys the file gave (set by the reader)

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Any:
        """Checks across keys; returns the section (or what it stands for), or None if it is unusable."""
        return self


class SchemaReader:
    """Reads YAML values into schema types; every problem goes to ``problems`` with its key path."""

    def __init__(self, problems: Problems):
        self.problems = problems

    def problem(self, keypath: KeyPath, message: str, at: KeyPath | None = None) -> None:
        self.problems.add(keypath, message, at=at)

    def unknown(self, keypath: KeyPath, key: Any, allowed: Any) -> None:
        """``key`` is not allowed in the mapping at ``keypath``: name it, where it is and the closest known key."""
        hint = closest(str(key), allowed)
        what = "unknown key" if keypath else "unknown top-level key"
        self.problem(keypath, f"{what} {key!r}" + (f" (did you mean {hint!r}?)" if hint else
                                                   f"; known keys here: {', '.join(map(str, allowed))}"),
                     at=keypath + (key,))

    def component(self, value: str, keypath: KeyPath, what: str) -> bool:
        """Whether ``value`` is one safe path component (a problem at ``keypath`` if not)."""
        try:
            check_component(value, what)
        except ConfigError as exc:
            self.problem(keypath, str(exc))
            return False
        return True

    # ------------------------------------------------------------------------------------------ by type
    def read(self, tp: Any, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any] | None = None) -> Any:
        """``value`` read as ``tp``; None (and a problem recorded) when it is not one."""
        meta = meta or {}
        if meta.get("read") is not None:
            return meta["read"](value, keypath, self)
        out = self._read(tp, value, keypath, meta)
        if out is not None and meta.get("validate") is not None:
            try:
                meta["validate"](out)
            except ConfigError as exc:
                self.problem(keypath, str(exc))
                return None
        return out

    def _read(self, tp: Any, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> Any:
        origin = typing.get_origin(tp)
        if tp is Any:
            return value
        if origin in (Union, types.UnionType):
            return self._union(typing.get_args(tp), value, keypath, meta)
        if origin is Literal:
            return self._choice(typing.get_args(tp), value, keypath)
        if origin is list:
            return self._list(typing.get_args(tp)[0], value, keypath, meta)
        if origin is dict:
            return self._dict(typing.get_args(tp)[1], value, keypath, meta)
        if isinstance(tp, type) and issubclass(tp, Section):
            return self.section(tp, value, keypath)
        if tp is bool:
            if not isinstance(value, bool):
                self.problem(keypath, f"expected true or false, got {show(value)}")
                return None
            return value
        if tp is int:
            return self._int(value, keypath, meta)
        if tp is float:
            return self._float(value, keypath, meta)
        if tp is str:
            return self._str(value, keypath, meta)
        raise TypeError(f"the suite schema has no reader for {tp!r}")

    def _str(self, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> str | None:
        ok = (str, int) if meta.get("names") else (str,)
        if not isinstance(value, ok) or isinstance(value, bool):
            self.problem(keypath, f"expected {meta.get('what') or 'a string'}, got {show(value)}")
            return None
        text = str(value)
        if meta.get("choices") is not None:
            return self._choice(_choices(meta["choices"]), text, keypath)
        if meta.get("component"):
            self.component(text, keypath, meta["component"])    # the name is kept: references add no problems
        return text

    def _int(self, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> int | None:
        minimum = meta.get("minimum")
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            self.problem(keypath, f"expected an integer{f' >= {minimum}' if minimum is not None else ''}, "
                                  f"got {show(value)}")
            return None
        return value

    def _float(self, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> float | None:
        low, high = meta.get("open_range", (None, None))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (low is not None and not low < value) or (high is not None and not value < high):
            self.problem(keypath, f"expected {meta.get('what') or 'a number'}, got {show(value)}")
            return None
        return value

    def _choice(self, choices: tuple[Any, ...], value: Any, keypath: KeyPath) -> Any:
        if value in choices:
            return value
        hint = closest(str(value), choices)
        self.problem(keypath, f"{keypath[-1] if keypath else 'value'} {value!r} is not supported"
                     + (f" (did you mean {hint!r}?)" if hint else "") + f"; supported: {', '.join(map(str, choices))}")
        return None

    def _list(self, item: Any, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> list:
        non_empty = meta.get("non_empty", True)
        if not isinstance(value, list) or (non_empty and not value):
            self.problem(keypath, f"expected a{' non-empty' if non_empty else ''} list, got {show(value)}")
            return []
        item_meta = {k: meta[k] for k in ("names", "component", "choices", "minimum") if k in meta}
        if meta.get("item_what"):
            item_meta["what"] = meta["item_what"]
        out = [self.read(item, x, keypath + (i,), item_meta) for i, x in enumerate(value)]
        return [x for x in out if x is not None]

    def _dict(self, item: Any, value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(keypath, f"expected a mapping, got {show(value)}")
            return {}
        out: dict[str, Any] = {}
        for key, entry in value.items():
            if entry is None and meta.get("null_items"):
                out[str(key)] = None
                continue
            if meta.get("key_component"):
                self.component(str(key), keypath + (key,), meta["key_component"])
            read = self.read(item, entry, keypath + (key,), meta.get("item_meta"))
            if read is not None or item is Any:
                out[str(key)] = read
        return out

    def _union(self, members: tuple[Any, ...], value: Any, keypath: KeyPath, meta: typing.Mapping[str, Any]) -> Any:
        members = tuple(m for m in members if m is not type(None))
        if len(members) == 1:
            return self._read(members[0], value, keypath, meta)
        for member in members:     # the member the value's shape calls for: a mapping reads as a section
            kind = typing.get_origin(member) or member
            if isinstance(value, dict) and (kind is dict or dataclasses.is_dataclass(kind)) or \
                    isinstance(value, list) and kind is list or \
                    isinstance(value, str) and kind is str:
                return self._read(member, value, keypath, meta)
        self.problem(keypath, f"expected {meta.get('what') or ' or '.join(map(_type_name, members))}, "
                              f"got {show(value)}")
        return None

    # ------------------------------------------------------------------------------------------ sections
    def section(self, cls: type[Section], value: Any, keypath: KeyPath) -> Any:
        """A mapping read as the section ``cls``: unknown keys, required keys, each field by its type."""
        if not isinstance(value, dict):
            self.problem(keypath, cls.EXPECT.format(at=keypath[-1] if keypath else "", got=show(value)))
            return None
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        for key in value:
            if key not in fields and not (cls.EXTENSIONS and str(key).startswith(EXTENSION_PREFIX)):
                self.unknown(keypath, key, list(fields))
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        present = []
        for name, f in fields.items():
            if value.get(name) is None:
                if name in value and _is_list(hints[name]) and f.metadata.get("non_empty", True) \
                        and f.metadata.get("read") is None:
                    self._list(Any, None, keypath + (name,), f.metadata)      # `key: null` where a list belongs
                elif f.metadata.get("required"):
                    self.problem(keypath, cls.MISSING.format(key=name, at=keypath[-1] if keypath else ""))
                continue
            present.append(name)
            read = self.read(hints[name], value[name], keypath + (name,), f.metadata)
            if read is not None:
                kwargs[name] = read
        section = cls(**kwargs)
        section._given = frozenset(present)
        return section.finish(keypath, self)


def _is_list(tp: Any) -> bool:
    return typing.get_origin(tp) is list or any(typing.get_origin(m) is list for m in typing.get_args(tp))


def _choices(choices: Any) -> tuple[Any, ...]:
    return tuple(choices() if callable(choices) else choices)


def _type_name(tp: Any) -> str:
    kind = typing.get_origin(tp) or tp
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
            dict: "a mapping"}.get(kind, "a mapping" if dataclasses.is_dataclass(kind) else str(tp))


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


# ---------------------------------------------------------------------------------------------- table: layouts
@dataclass
class ColumnEntry(Section):
    """A results column: a benchmark (or aggregate) and a metric."""

    MISSING: ClassVar[str] = "a column needs 'benchmark' and 'metric' (missing {key!r})"

    benchmark: str = setting(required=True, names=True)
    metric: str = setting(required=True)
    group: str | None = setting()
    label: str | None = setting()
    # the paper line this column shows in reported rows, and a reported column after it (harness.ablation.layout)
    reported_column: str | None = setting(names=True)
    reported_row: str | None = setting(names=True)
    reported: ReportedRef | None = setting()

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Any:
        if self.reported is not None:
            check_reported_column(self.reported, keypath + ("reported",), reader)
        return self


@dataclass
class RowGroup(Section):
    """Rows under a group heading: ``{group: ..., rows: [variant ids]}``."""

    EXPECT: ClassVar[str] = "a row is a variant id or {{group: ..., rows: [...]}}, got {got}"

    group: str | None = setting()
    rows: list[str] = setting(required=True, factory=list, names=True)


ROW_WHAT = "a variant id or {group: ..., rows: [...]}"   # or a reported row: {reported: {...}, label: ...}


@dataclass
class ReportedRef(Section):
    """Numbers printed in a paper's transcribed table (``reports/papers``): ``{paper, table, row | column}``,
    and in a reported column the variants' lines (``rows`` or ``columns``: variant id -> paper label)."""

    EXPECT: ClassVar[str] = "reported must be a mapping {paper, table, row | column, ...}, got {got}"

    paper: str | None = setting(required=True, names=True)
    table: int | None = setting(required=True, minimum=1)
    row: str | None = setting(names=True)
    column: str | None = setting(names=True)
    rows: dict[str, str] = setting(factory=dict, item_meta={"names": True})
    columns: dict[str, str] = setting(factory=dict, item_meta={"names": True})
    # filled by the checks below: the transcribed table (None when the reference is wrong)
    spec: Any = field(default=None, init=False, repr=False, compare=False)

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Any:
        if self.paper is None or self.table is None:
            return None
        self.spec = reported_table(self.paper, self.table, keypath, reader)
        return self if self.spec is not None else None


@dataclass
class ReportedRowEntry(Section):
    """A row of printed numbers: ``{reported: {paper, table, row}, label: ..., group: ...}`` (``column``
    instead of ``row`` for a table whose columns are the systems)."""

    reported: ReportedRef | None = setting(required=True)
    label: str | None = setting(names=True)
    group: str | None = setting()

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Any:
        ref = self.reported
        if ref is None or ref.spec is None:
            return None
        where = keypath + ("reported",)
        if (ref.row is None) == (ref.column is None):
            reader.problem(where, "a reported row names the paper's 'row' (or, in a table whose columns are the "
                                  "systems, its 'column'), not both")
            return None
        for key in ("rows", "columns"):
            if key in given(ref):
                reader.problem(where + (key,), f"{key!r} maps variants in a reported column; a reported row takes "
                                               "the paper line of each layout column from its reported_column/"
                                               "reported_row")
                return None
        ok = resolve_label(ref.spec, "row" if ref.row is not None else "column", ref.row or ref.column or "",
                           where + ("row" if ref.row is not None else "column",), reader)
        return self if ok else None


def reported_table(paper: str, number: int, keypath: KeyPath, reader: SchemaReader) -> TableSpec | None:
    """The transcribed table ``number`` of ``paper`` (id or short name); a problem at ``paper`` or ``table``."""
    papers = _papers()
    wanted = paper.strip().lower()
    found = next((p for p in papers if wanted in (p.id.lower(), p.short_name) or
                  (wanted.isdigit() and p.id.isdigit() and int(wanted) == int(p.id))), None)
    if found is None:
        hint = closest(wanted, [p.short_name for p in papers] + [p.id for p in papers])
        reader.problem(keypath + ("paper",), f"unknown paper {paper!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                       + f"; transcribed papers: {', '.join(f'{p.id} ({p.short_name})' for p in papers)}")
        return None
    numbers = table_numbers(found)
    if number not in numbers:
        reader.problem(keypath + ("table",), f"paper {found.id} ({found.short_name}) has no transcribed table "
                                             f"{number}; transcribed: {', '.join(map(str, numbers))}")
        return None
    try:
        return _transcribed(found.id, number)
    except (ConfigError, InputError) as exc:          # a malformed table file (InputError naming its line)
        reader.problem(keypath + ("table",), f"cannot read paper {found.id} table {number}: {exc}")
        return None


@functools.cache
def _papers() -> list[PaperSpec]:
    return list_papers()


@functools.cache
def _transcribed(paper_id: str, number: int) -> TableSpec:
    # cached: every suite load reads its layouts' references again (the files do not change in a process)
    return load_tables(paper_id, number)[0]


# line_names per table and axis: a suite's layouts name the same few tables thousands of times (each reported
# row against each column at each scale), and recounting the labels each time made checking tdro's layouts take
# minutes.  The spec is kept beside its names, so an id is never reused for another table while cached.
_LINE_NAMES: dict[tuple[int, str], tuple[TableSpec, dict[str, int]]] = {}


def line_names(spec: TableSpec, axis: str) -> dict[str, int]:
    """The names a suite file may use for the rows (``axis="row"``) or columns of a transcribed table, with
    their index: a row's id, or its label where unique; a column's key, its label or group where unique, or
    ``"<group> <label>"``."""
    cached = _LINE_NAMES.get((id(spec), axis))
    if cached is not None and cached[0] is spec:
        return cached[1]
    names = _line_names(spec, axis)
    _LINE_NAMES[(id(spec), axis)] = (spec, names)
    return names


def _line_names(spec: TableSpec, axis: str) -> dict[str, int]:
    out: dict[str, int] = {}
    if axis == "row":
        labels = collections.Counter(r.label for r in spec.rows)
        for i, r in enumerate(spec.rows):
            out.setdefault(r.id, i)
            if labels[r.label] == 1:
                out.setdefault(r.label, i)
        return out
    labels = collections.Counter(c.label for c in spec.columns)
    groups = collections.Counter(c.group for c in spec.columns)
    for j, c in enumerate(spec.columns):
        out.setdefault(c.key, j)
        if labels[c.label] == 1:
            out.setdefault(c.label, j)
        if c.group and groups[c.group] == 1:
            out.setdefault(c.group, j)
        if c.group:
            out.setdefault(f"{c.group} {c.label}", j)
    return out


def line_title(spec: TableSpec, axis: str, index: int) -> str:
    """How a footnote names a row (its label) or a column (``"<group> <label>"``)."""
    if axis == "row":
        return spec.rows[index].label
    column = spec.columns[index]
    return f"{column.group} {column.label}" if column.group else column.label


def find_line(spec: TableSpec, axis: str, name: str) -> int:
    """The index of row or column ``name`` (see :func:`line_names`); ConfigError with the closest name."""
    names = line_names(spec, axis)
    if name in names:
        return names[name]
    shown = [line_title(spec, axis, i) for i in range(len(spec.rows if axis == "row" else spec.columns))]
    printed = [r.label for r in spec.rows] if axis == "row" else [n for c in spec.columns for n in (c.label, c.group)]
    if name in printed:             # a label printed more than once (unique ones are in ``names``)
        how = "its id" if axis == "row" else "its key or as '<group> <label>'"
        keys = [r.id for r in spec.rows if r.label == name] if axis == "row" else \
            [c.key for c in spec.columns if c.label == name or c.group == name]
        raise ConfigError(f"{spec.ref}: {axis} {name!r} is ambiguous (printed more than once); name it by {how}: "
                          f"{', '.join(map(repr, keys))}")
    hint = closest(name, list(names))
    listed = ", ".join(map(repr, shown[:12])) + (", ..." if len(shown) > 12 else "")
    raise ConfigError(f"{spec.ref} has no {axis} {name!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                      + f"; {axis}s: {listed}")


def resolve_label(spec: TableSpec, axis: str, name: str, keypath: KeyPath, reader: SchemaReader) -> bool:
    """Whether ``name`` names a row/column of ``spec``; a problem at ``keypath`` if not."""
    try:
        find_line(spec, axis, name)
    except ConfigError as exc:
        reader.problem(keypath, str(exc))
        return False
    return True


def check_reported_column(ref: ReportedRef, keypath: KeyPath, reader: SchemaReader) -> None:
    """A reported column: ``column`` + ``rows: {variant: paper row}``, or ``row`` + ``columns: {variant: ...}``."""
    if ref.spec is None:
        return
    if ref.column is not None and ref.row is None and ref.rows and not ref.columns:
        line_axis, lines, own_axis, own = "row", ref.rows, "column", ref.column
    elif ref.row is not None and ref.column is None and ref.columns and not ref.rows:
        line_axis, lines, own_axis, own = "column", ref.columns, "row", ref.row
    else:
        reader.problem(keypath, "a reported column names the paper's 'column' and maps variants to its rows "
                                "(rows: {variant: paper row}), or, in a table whose columns are the systems, names "
                                "its 'row' and maps variants to its columns (columns: {variant: paper column})")
        return
    resolve_label(ref.spec, own_axis, own, keypath + (own_axis,), reader)
    for variant, name in lines.items():
        resolve_label(ref.spec, line_axis, name, keypath + (f"{line_axis}s", variant), reader)


def check_reported_rows(entry: LayoutEntry, keypath: KeyPath, reader: SchemaReader) -> None:
    """Each layout column's ``reported_column``/``reported_row`` names a line of every reported row's table."""
    reported = [r for r in entry.rows if isinstance(r, ReportedRowEntry)]
    column_sets: list[tuple[KeyPath, list[Any]]] = [(keypath + ("columns",), entry.columns)]
    column_sets += [(keypath + ("scales", scale, "columns"), per.columns or [])
                    for scale, per in entry.scales.items() if per is not None]
    for where, columns in column_sets:
        for i, column in enumerate(columns):
            if not isinstance(column, ColumnEntry):
                continue
            for key, axis in (("reported_column", "column"), ("reported_row", "row")):
                name = getattr(column, key)
                if name is None:
                    continue
                if not reported and not any(p.keypath[:len(keypath) + 1] == keypath + ("rows",)
                                            for p in reader.problems.items):   # (not when a row was refused)
                    reader.problem(where + (i, key), f"{key} names the paper {axis} this column shows in the "
                                                     "layout's reported rows, but the layout has none")
                for row in reported:
                    ref = row.reported
                    assert ref is not None and ref.spec is not None     # a reported row is kept only if so
                    if (ref.row is not None) != (axis == "column"):
                        other = "reported_row" if key == "reported_column" else "reported_column"
                        reader.problem(where + (i, key), f"the reported row {row.label or ref.row or ref.column!r} "
                                       f"is a paper {'row' if ref.row is not None else 'column'}, so a column names "
                                       f"the paper line it shows with {other!r}, not {key!r}")
                        continue
                    resolve_label(ref.spec, axis, str(name), where + (i, key), reader)


def read_rows(value: Any, keypath: KeyPath, reader: SchemaReader) -> list[Any]:
    """A layout's ``rows:``: variant ids, row groups and reported rows (a mapping with ``reported``)."""
    if not isinstance(value, list):
        reader.problem(keypath, f"expected a list, got {show(value)}")
        return []
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and "reported" in item:
            read = reader.section(ReportedRowEntry, item, keypath + (i,))
        else:
            read = reader.read(str | RowGroup, item, keypath + (i,), {"what": ROW_WHAT, "names": True})
        if read is not None:
            out.append(read)
    return out
COLUMN_WHAT = "a variant id or a mapping {benchmark, metric, group, label}"


@dataclass
class LayoutScaleEntry(Section):
    """A layout's settings at one scale (they replace the layout's; ``options`` update them)."""

    columns: list[str | ColumnEntry] | None = setting(non_empty=False, item_what=COLUMN_WHAT, names=True)
    caption: str | None = setting()
    options: dict[str, Any] = setting(factory=dict)


@dataclass
class LayoutEntry(Section):
    """One table layout of the ``table:`` section (its kind checks its columns, rows and options)."""

    kind: str = setting("results")
    caption: str = setting("")
    rows: list[str | RowGroup | ReportedRowEntry] = setting(factory=list, read=lambda v, k, r: read_rows(v, k, r))
    columns: list[str | ColumnEntry] = setting(factory=list, non_empty=False, item_what=COLUMN_WHAT, names=True)
    scales: dict[str, LayoutScaleEntry] = setting(factory=dict)
    decimals: int | None = setting(minimum=0)
    options: dict[str, Any] = setting(factory=dict)
    bold_reported: bool = setting(False)      # reported rows take part in bold-best (never by default)

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Any:
        check_reported_rows(self, keypath, reader)
        return self


@dataclass
class TableSection(Section):
    """``table: {default: <layout>, layouts: {<name>: <layout>}}``."""

    default: str | None = setting()
    layouts: dict[str, LayoutEntry] = setting(factory=dict, key_component="layout name")

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Any:
        if self.default is not None and self.layouts and self.default not in self.layouts:
            hint = closest(self.default, self.layouts)
            reader.problem(keypath + ("default",), f"default layout {self.default!r} is not declared"
                           + (f" (did you mean {hint!r}?)" if hint else "") + f"; layouts: {', '.join(self.layouts)}")
        return self


def read_table(value: Any, problems: Problems, keypath: KeyPath = ("table",)) -> TableSection:
    """The ``table:`` section read (an empty one when absent); problems recorded in ``problems``."""
    if value is None:
        return TableSection()
    return SchemaReader(problems).section(TableSection, value, keypath) or TableSection()


# ---------------------------------------------------------------------------------------------- values with a grammar
SWEEP_SECTIONS = ("options", "train")


@dataclass(frozen=True)
class Sweep:
    """A variant's parameter sweep: ``options.<name>`` (method option) or ``train.<field>`` over ``values``."""

    param: str
    values: tuple[Any, ...]

    @property
    def section(self) -> str:
        return self.param.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.param.split(".", 1)[1]


@dataclass(frozen=True)
class Checkpoints:
    """Intermediate steps of a run to evaluate: listed ``steps`` or every ``every`` steps."""

    steps: tuple[int, ...] = ()
    every: int | None = None

    def at(self, total_steps: int) -> list[int]:
        """The intermediate steps (< ``total_steps``) of a run of ``total_steps`` steps, ascending."""
        if self.every:
            return list(range(self.every, total_steps, self.every))
        return sorted({s for s in self.steps if s < total_steps})


def read_train(value: Any, keypath: KeyPath, reader: SchemaReader) -> dict[str, Any]:
    """TrainSpec overrides: unknown fields and wrong types are problems (named with the expected type)."""
    data = reader.read(dict[str, Any], value, keypath)
    for key, message in field_problems(data):
        parts = tuple(key.split("."))
        if message.startswith("unknown option"):
            known = [f.name for f in dataclasses.fields(TrainSpec if len(parts) == 1 else LoraSpec)]
            reader.unknown(keypath + parts[:-1], parts[-1], known)
        else:
            reader.problem(keypath + parts, message)
    return dict(data)


def read_seeds(value: Any, keypath: KeyPath, reader: SchemaReader) -> list[int] | None:
    """``seeds: [1, 2, 3]``: distinct non-negative integers."""
    seeds = reader.read(list[Any], value, keypath)
    bad = [x for x in seeds if isinstance(x, bool) or not isinstance(x, int) or x < 0]
    if bad:
        reader.problem(keypath, f"seeds are non-negative integers, got {show(bad[0])}")
        return None
    if len(set(seeds)) != len(seeds):
        reader.problem(keypath, f"seeds must be distinct, got {seeds!r}")
        return None
    return [int(x) for x in seeds] or None


@dataclass
class EveryEntry(Section):
    every: int | None = setting(minimum=1)


def read_checkpoints(value: Any, keypath: KeyPath, reader: SchemaReader) -> Checkpoints | None:
    """``checkpoints: [20, 40]`` or ``checkpoints: {every: 20}`` (steps >= 0; step 0 is the model before training)."""
    if isinstance(value, dict):
        every = reader.section(EveryEntry, value, keypath)
        if every is None or every.every is None:
            reader.problem(keypath, "expected {every: <steps>} or a list of steps")
            return None
        return Checkpoints(every=every.every)
    steps = reader.read(list[Any], value, keypath)
    bad = [x for x in steps if isinstance(x, bool) or not isinstance(x, int) or x < 0]
    if bad:
        reader.problem(keypath, f"checkpoint steps are non-negative integers, got {show(bad[0])}")
        return None
    return Checkpoints(steps=tuple(sorted(set(int(x) for x in steps)))) if steps else None


@dataclass
class SweepEntry(Section):
    """``sweep: {param: options.<name> | train.<field>, values: [...]}``: distinct scalar values."""

    param: str = setting(required=True)
    values: list[Any] = setting(required=True, factory=list)

    def finish(self, keypath: KeyPath, reader: SchemaReader) -> Sweep | None:
        param, values = self.param, self.values
        if param is None or not values:
            return None
        section, _, name = param.partition(".")
        if section not in SWEEP_SECTIONS or not name:
            reader.problem(keypath + ("param",), f"sweep param {param!r} must be options.<method option> or "
                                                 "train.<TrainSpec field> (e.g. options.k, train.lr)")
            return None
        ok = True
        for i, item in enumerate(values):
            if not isinstance(item, (str, int, float, bool)):
                reader.problem(keypath + ("values", i), f"sweep values are numbers or strings, got {show(item)}")
                ok = False
        if ok and len({repr(x) for x in values}) != len(values):
            reader.problem(keypath + ("values",), f"sweep values must be distinct, got {values!r}")
            ok = False
        if ok and section == "train":
            if name in TrainSpec.NON_RESULT_FIELDS or name in ("model", "method_options"):
                reader.problem(keypath + ("param",), f"train.{name} does not change the trained weights (or is "
                                                     "set elsewhere); sweep a field that does")
                return None
            for i, item in enumerate(values):
                for key, message in field_problems({name: item}):
                    reader.problem(keypath + ("values", i) if not message.startswith("unknown") else
                                   keypath + ("param",), f"train.{key}: {message}")
                    ok = False
        return Sweep(param, tuple(values)) if ok else None


def read_sweep(value: Any, keypath: KeyPath, reader: SchemaReader) -> Sweep | None:
    if value == {}:
        reader.problem(keypath, "a sweep needs 'param' and 'values'")
        return None
    return reader.section(SweepEntry, value, keypath)


def encoding_kwargs(encoding: dict[str, Any]) -> dict[str, Any]:
    """HFEncoder keyword arguments of a suite's ``encoding`` mapping (``dtype``, ``backend``, ``shard_size``:
    :func:`harness.encoders.hf.encoding_options`; ``batch_size``: a positive integer); ConfigError otherwise."""
    if not encoding:
        return {}
    from harness.encoders.hf import ENCODING_OPTIONS, encoding_options  # lazy (start-up speed): imports torch

    rest = {k: v for k, v in encoding.items() if k != "batch_size"}
    unknown = sorted(set(rest) - set(ENCODING_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown encoding option(s) {', '.join(map(str, unknown))}; allowed: batch_size, "
                          f"{', '.join(ENCODING_OPTIONS)}")
    out = encoding_options(rest)
    if encoding.get("batch_size") is not None:
        size = encoding["batch_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {size!r}")
        out["batch_size"] = size
    return out


def read_encoding(value: Any, keypath: KeyPath, reader: SchemaReader) -> dict[str, Any] | None:
    """Dense encoding options, each checked by the encoder's own check (each problem at its own line)."""
    encoding = reader.read(dict[str, Any], value, keypath)
    bad = False
    for key, item in encoding.items():
        try:
            encoding_kwargs({key: item})
        except ConfigError as exc:
            reader.problem(keypath, str(exc), at=keypath + (key,))
            bad = True
    return dict(encoding) if encoding and not bad else None


def _check_backend(name: str) -> None:
    check_backend(name)


def _check_quantization(name: str) -> None:
    check_quantization(name)


def _check_limits(limits: Any) -> None:
    """A smoke scale's ``limits``: positive integers capping what :data:`~harness.train.spec.LIMIT_KEYS` names."""
    if not isinstance(limits, dict):
        raise ConfigError(f"limits must be a mapping of {', '.join(LIMIT_KEYS)} to positive integers")
    for key, value in limits.items():
        if key not in LIMIT_KEYS:
            hint = closest(key, LIMIT_KEYS)
            raise ConfigError(f"limits: unknown {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                              + f"; limits cap {', '.join(LIMIT_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"limits: {key} must be a positive integer, got {show(value)}")


def _stats_choices(name: str) -> Callable[[], tuple[str, ...]]:
    def choices() -> tuple[str, ...]:
        import harness.stats as stats  # lazy (start-up speed): imports scipy

        return tuple(getattr(stats, name))

    return choices


# ---------------------------------------------------------------------------------------------- the suite file
# How a model is evaluated (not trained): dense encoding options (harness.encoders.hf.encoding_options) and the
# sparse retrieval backend and impact quantisation (harness.retrieval.sparse.check_backend); at scale level they
# apply to every variant and are recorded in the protocol card, at variant level in the cell's key and manifest.
# ``prompts`` (a variant's own evaluation prompts, variant level only) wins over the benchmark card's prompts,
# which win over the model registry's (harness.pipeline.build_encoder): a released checkpoint evaluated as its
# authors evaluate it under cards that instruct every other row (paper 000 Table 4's mContriever, no prompt).
EVALUATION_KEYS = ("encoding", "sparse_backend", "quantization", "prompts")


@dataclass
class PromptsEntry(Section):
    """A variant's evaluation prompts: ``{query: ..., doc: ...}`` (each optional; "" evaluates without one)."""

    query: str | None = setting()
    doc: str | None = setting()

    def given(self) -> dict[str, str]:
        """``{query_prompt | doc_prompt: text}`` of the sides given (the encoder's keyword names)."""
        return {f"{side}_prompt": text for side in ("query", "doc") if (text := getattr(self, side)) is not None}


class Evaluation(Section):
    """A section with the evaluation settings (EVALUATION_KEYS, declared last in each section; a scale has no
    ``prompts``: a scale's prompts are its benchmarks' cards)."""

    encoding: dict[str, Any] | None
    sparse_backend: str | None
    quantization: str | None

    def evaluation(self) -> dict[str, Any]:
        """The settings given and valid, as written (``prompts`` as ``{query_prompt, doc_prompt}``)."""
        out = {k: v for k in EVALUATION_KEYS if (v := getattr(self, k, None)) is not None}
        if isinstance(out.get("prompts"), PromptsEntry):
            out["prompts"] = out["prompts"].given()
        return out


@dataclass
class VariantScaleEntry(Evaluation):
    """A variant's settings at one scale."""

    model: str | None = setting()
    train: dict[str, Any] = setting(factory=dict, read=read_train)
    options: dict[str, Any] = setting(factory=dict)
    seeds: list[int] | None = setting(read=read_seeds)
    checkpoints: Checkpoints | None = setting(read=read_checkpoints)
    encoding: dict[str, Any] | None = setting(read=read_encoding)
    sparse_backend: str | None = setting(what="a name", validate=_check_backend)
    quantization: str | None = setting(what="a name", validate=_check_quantization)
    prompts: PromptsEntry | None = setting()


@dataclass
class VariantEntry(Evaluation):
    """One ``variants:`` entry (a table row)."""

    EXPECT: ClassVar[str] = "a variant must be a mapping with 'id' and 'method', got {got}"

    id: str | None = setting(required=True, names=True, component="variant id")
    method: str | None = setting(required=True)
    label: str | None = setting(names=True)
    options: dict[str, Any] = setting(factory=dict)
    train: dict[str, Any] = setting(factory=dict, read=read_train)
    scales: dict[str, VariantScaleEntry | None] = setting(factory=dict, null_items=True)
    model: str | None = setting()
    sweep: Sweep | None = setting(read=read_sweep)
    seeds: list[int] | None = setting(read=read_seeds)
    checkpoints: Checkpoints | None = setting(read=read_checkpoints)
    encoding: dict[str, Any] | None = setting(read=read_encoding)
    sparse_backend: str | None = setting(what="a name", validate=_check_backend)
    quantization: str | None = setting(what="a name", validate=_check_quantization)
    prompts: PromptsEntry | None = setting()


@dataclass
class BenchmarkEntry(Section):
    """One benchmark of a scale (a table column group)."""

    EXPECT: ClassVar[str] = "a benchmark must be a mapping with 'id', 'suite' and 'dataset_dir', got {got}"

    id: str | None = setting(required=True, names=True, component="benchmark id")
    suite: str | None = setting(required=True)
    dataset_dir: str | None = setting(required=True)
    label: str | None = setting(names=True)
    options: dict[str, Any] = setting(factory=dict)
    max_queries: int | None = setting(minimum=1)
    corpus_sample: int | None = setting(minimum=0)


@dataclass
class DataEntry(Section):
    """A training collection given as a mapping (:mod:`harness.data.collections` reads its values)."""

    MISSING: ClassVar[str] = "a data entry mapping needs {key!r}"

    path: Any = setting(required=True)
    domains: Any = setting()
    max_rows: Any = setting()
    split: Any = setting()
    negatives_run: Any = setting()
    max_negatives: Any = setting()
    name: str | None = setting(names=True, component="training data name")   # mined pools are files named after it
    metadata: Any = setting()
    map: Any = setting()            # the files' own keys -> query/pos/neg (checked when the data is read)


def read_data(value: Any, keypath: KeyPath, reader: SchemaReader) -> list[Any]:
    """Training collections: a path, a :class:`DataEntry` mapping, or a list of them (kept as written)."""
    entries = value if isinstance(value, list) else [value]
    for j, entry in enumerate(entries):
        reader.read(str | DataEntry, entry, keypath + (j,), {"what": "a path or a mapping with 'path'"})
    return entries


@dataclass
class ScaleEntry(Evaluation):
    """One scale of the ``scales:`` section."""

    EXPECT: ClassVar[str] = "scale {at!r} must be a mapping, got {got}"
    MISSING: ClassVar[str] = "scale {at!r}: missing {key!r}"

    model: str | None = setting(required=True)
    data: list[Any] | None = setting(required=True, read=lambda value, keypath, r: read_data(value, keypath, r))
    train: dict[str, Any] = setting(factory=dict, read=read_train)
    benchmarks: list[BenchmarkEntry] = setting(required=True, factory=list)
    aggregates: dict[str, list[str]] = setting(factory=dict, item_meta={"names": True})
    dry_run_only: bool = setting(False)
    seeds: list[int] | None = setting(read=read_seeds)
    encoding: dict[str, Any] | None = setting(read=read_encoding)
    sparse_backend: str | None = setting(what="a name", validate=_check_backend)
    quantization: str | None = setting(what="a name", validate=_check_quantization)
    # A smoke scale: another scale's recipe (``recipe: paper``) on stand-in models, with capped runs.
    recipe: str | None = setting(what="a scale name (the scale whose recipe this scale runs)")
    # The method preset (tiny, small, paper...) a scale named otherwise starts from; without it such a
    # scale is refused at validation rather than given a preset silently.
    preset: str | None = setting(what="a method preset name (the preset this scale extends)")
    stand_ins: dict[str, str] = setting(factory=dict, item_what="a model name (the stand-in)")
    limits: dict[str, int] = setting(factory=dict, validate=_check_limits)


@dataclass
class StatsSection(Section):
    """The ``stats:`` section (kept as written; :meth:`AblationSuite.stats_options` reads it)."""

    test: str | None = setting(choices=_stats_choices("TESTS"))
    correction: str | None = setting(choices=_stats_choices("CORRECTIONS"))
    alpha: float | None = setting(open_range=(0, 1), what="a number in (0, 1) (the significance level)")
    seed: int | None = setting(minimum=0)
    aggregate: str | None = setting(choices=_stats_choices("AGGREGATE_METHODS"))
    resamples: int | None = setting(minimum=1)
    missing: str | None = setting(choices=_stats_choices("MISSING_POLICIES"))


@dataclass
class SuiteFile(Section):
    """A whole suite file."""

    EXPECT: ClassVar[str] = "a suite file must be a mapping, got {got}"
    MISSING: ClassVar[str] = "missing top-level key {key!r}"
    EXTENSIONS: ClassVar[bool] = True

    name: str = setting("", required=True, names=True, component="suite name")
    version: int = setting(1, minimum=1)
    description: str | None = setting("")
    baseline: str = setting("", required=True, names=True)
    variants: list[VariantEntry] = setting(required=True, factory=list)
    metrics: list[str] = setting(factory=lambda: ["ndcg@10"], item_what="a metric name")
    stats: StatsSection | None = setting()
    scales: dict[str, ScaleEntry | None] = setting(required=True, factory=dict, key_component="scale name")
    table: TableSection | None = setting()
    seeds: list[int] | None = setting(read=read_seeds)


TOP_KEYS = tuple(f.name for f in dataclasses.fields(SuiteFile))
