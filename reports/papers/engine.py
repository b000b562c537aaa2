"""Recompute a transcribed table's derived cells from its base numbers, verify them, render them.

Verify rule
-----------
A derived value (a declared average/sum/difference, or a delta against a baseline row) is
recomputed from the *printed* base numbers.  Two sources of rounding separate it from the
printed derived value: the printed value itself was rounded (half a unit of its last printed
digit, ``0.5·10^-d``), and the paper computed it from unrounded inputs while we only have
their rounded prints (each input is off by up to half a unit of *its* last digit; this bound
``ε`` propagates through the operation: mean -> mean of the inputs' ε, sum and difference ->
sum of the ε, delta -> ε of the value + ε of the baseline).  With ``d`` raised to the table's
``verify_decimals`` where a paper drops trailing zeros:

* ``mismatch``: ``|recomputed - printed| > 0.5·10^-d + ε + 1e-9``: no unrounded inputs
  consistent with the printed ones give the printed value; a slip in the paper.
* ``rounding``: beyond ``0.5·10^-d + 1e-9`` but within the bound above: consistent only if
  the paper computed from unrounded inputs (reported for information).
  A recomputed value that renders differently from its print at the printed precision
  (round half up, :func:`reports.table.round_display`) is reported as ``rounding`` even when
  it lies within half a unit (a tie the paper rounded the other way).
* ``gap``: a cell lost in the text extraction (``?``), base or derived.

Arithmetic is decimal (:class:`decimal.Decimal`) on the printed digits, so a mean that is
exactly half-way (004 Table 1's BM25 average, 39.35) renders 39.4 as a person rounding the
printed numbers would, not 39.3 from a binary sum of 39.3499...  Every regenerated derived
cell whose rendering differs from its print (``mismatch`` or ``rounding``) carries a note
with the printed value.
* ``unrecomputable``: a derived value whose inputs are missing (a gap, a printed dash, text).
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from harness.errors import InputError
from reports.papers.schema import Derivation, Printed, RowSpec, TableSpec
from reports.table import Cell, Column, Row, Table

FINDING_KINDS = ("mismatch", "rounding", "gap", "unrecomputable")
GAP_NOTE = "? marks a cell printed in the paper but lost in its text extraction."


@dataclass(frozen=True)
class Finding:
    """One verify finding (see the module docstring for the kinds)."""

    table: str
    row: str                       # row id
    column: str                    # column key
    part: str                      # "value" | "delta"
    kind: str
    printed: str | None
    recomputed: float | None
    difference: float | None       # recomputed - printed
    tolerance: float | None
    message: str


@dataclass(frozen=True)
class Computed:
    value: Decimal | None          # exact decimal arithmetic on the printed digits
    epsilon: Decimal = Decimal(0)  # worst-case error from rounded inputs
    missing: str | None = None     # why there is no value

    @property
    def number(self) -> float | None:
        return None if self.value is None else float(self.value)


TINY = Decimal("1e-9")


def _half_unit(decimals: int) -> Decimal:
    return Decimal(5).scaleb(-decimals - 1)


def exact(value: float) -> Decimal:
    """A printed number (parsed to float) back to its printed digits (the shortest repr round-trips)."""
    return Decimal(repr(float(value)))


def render(value: Decimal, decimals: int) -> Decimal:
    """``value`` rounded half up at ``decimals`` digits, as the regenerated table shows it."""
    return value.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


class Recomputer:
    """Lazily computes every cell's value and each delta row's deltas, with cycle detection."""

    def __init__(self, spec: TableSpec):
        self.spec = spec
        self._rows = {r.id: i for i, r in enumerate(spec.rows)}
        self._cols = {c.key: j for j, c in enumerate(spec.columns)}
        self._values: dict[tuple[int, int], Computed] = {}
        self._visiting: set[tuple[int, int]] = set()

    def is_derived(self, i: int, j: int) -> bool:
        return self.spec.rows[i].derive is not None or self.spec.columns[j].derive is not None

    def _eps(self, printed: Printed) -> Decimal:
        if self.spec.counts:        # exact counts (paper 004 Tables 10, 13): a printed input is not rounded
            return Decimal(0)
        return _half_unit(max(printed.decimals or 0, self.spec.verify_decimals))

    def value(self, i: int, j: int) -> Computed:
        if (i, j) in self._values:
            return self._values[(i, j)]
        row, column = self.spec.rows[i], self.spec.columns[j]
        if (i, j) in self._visiting:
            raise InputError(self.spec.path, f"derived cells form a cycle at row {row.label!r}, column "
                                             f"{column.key!r}", row.line)
        self._visiting.add((i, j))
        try:
            if row.derive is not None:
                operands = [(f"row {ref!r}", self.delta(self._rows[ref], j) if row.derive.use == "delta"
                             else self.value(self._rows[ref], j)) for ref in row.derive.of]
                result = _combine(row.derive, operands)
            elif column.derive is not None:
                operands = [(f"column {ref!r}", self.value(i, self._cols[ref])) for ref in column.derive.of]
                result = _combine(column.derive, operands)
            else:
                result = self._base(row.cells[j])
        finally:
            self._visiting.discard((i, j))
        self._values[(i, j)] = result
        return result

    def _base(self, printed: Printed) -> Computed:
        if printed.kind == "number" and printed.value is not None:
            return Computed(exact(printed.value), self._eps(printed))
        reason = {"gap": "lost in the text extraction", "dash": "printed as a dash", "text": "not a number"}
        return Computed(None, missing=f"{printed.text!r} is {reason[printed.kind]}")

    def delta(self, i: int, j: int) -> Computed:
        row = self.spec.rows[i]
        if row.delta_vs is None:
            return Computed(None, missing=f"row {row.id!r} has no delta_vs")
        own, base = self.value(i, j), self.value(self._rows[row.delta_vs], j)
        return _combine(Derivation("diff", (row.id, row.delta_vs)), [("its value", own),
                                                                     (f"baseline row {row.delta_vs!r}", base)])


def _combine(derive: Derivation, operands: list[tuple[str, Computed]]) -> Computed:
    present = [c for _, c in operands if c.value is not None]
    absent = [(name, c) for name, c in operands if c.value is None]
    if absent and not (derive.skip_missing and derive.op != "diff"):
        name, computed = absent[0]
        return Computed(None, missing=f"{name}: {computed.missing}")
    if not present:
        return Computed(None, missing="no operand has a value")
    values = [c.value for c in present if c.value is not None]   # all of them (present has values only)
    eps = [c.epsilon for c in present]
    if derive.op == "mean":
        return Computed(sum(values, Decimal(0)) / len(values), sum(eps, Decimal(0)) / len(eps))
    if derive.op == "sum":
        return Computed(sum(values, Decimal(0)), sum(eps, Decimal(0)))
    return Computed(values[0] - values[1], eps[0] + eps[1])


def _check(spec: TableSpec, row: RowSpec, column_key: str, part: str, printed_text: str | None,
           printed_value: float | None, printed_decimals: int | None, computed: Computed) -> Finding | None:
    """Compare one derived value with its print."""
    def finding(kind: str, message: str, difference: Decimal | None = None,
                tolerance: Decimal | None = None) -> Finding:
        return Finding(spec.ref, row.id, column_key, part, kind, printed_text, computed.number,
                       None if difference is None else float(difference),
                       None if tolerance is None else float(tolerance), message)

    if printed_text == "?":
        if computed.value is None:
            return finding("gap", f"{part} lost in the text extraction and not recomputable ({computed.missing})")
        return finding("gap", f"{part} lost in the text extraction; recomputed {computed.number:.6g}")
    if printed_value is None:
        return None   # nothing printed to compare with (a printed dash, or a delta the paper does not print)
    if computed.value is None:
        return finding("unrecomputable", f"printed {printed_text} but cannot recompute: {computed.missing}")
    decimals = max(printed_decimals or 0, spec.verify_decimals)
    printed = exact(printed_value)
    difference = computed.value - printed
    strict = (Decimal(0) if spec.counts else _half_unit(decimals)) + TINY
    tolerance = strict + computed.epsilon
    shown = render(computed.value, printed_decimals or 0)
    rendered_differs = shown != render(printed, printed_decimals or 0)
    if abs(difference) > tolerance:
        return finding("mismatch", f"printed {printed_text}, recomputed {_g(computed.value)} "
                                   f"(off by {_g(difference, True)}; rounding allows ±{_g(tolerance - TINY)})",
                       difference, tolerance)
    if abs(difference) > strict:
        return finding("rounding", f"printed {printed_text}, recomputed {_g(computed.value)} (off by "
                                   f"{_g(difference, True)}: consistent only with unrounded inputs, "
                                   f"within ±{_g(tolerance - TINY)})", difference, tolerance)
    if rendered_differs:
        return finding("rounding", f"printed {printed_text}, recomputed {_g(computed.value)} renders {shown} "
                                   "(half-way: the paper rounded the other way)", difference, tolerance)
    return None


def _g(value: Decimal, signed: bool = False) -> str:
    return format(float(value), "+.6g" if signed else ".6g")


def verify(spec: TableSpec) -> list[Finding]:
    """Every finding of one table, in reading order (row, column, value before delta)."""
    rec = Recomputer(spec)
    findings: list[Finding] = []
    for i, row in enumerate(spec.rows):
        for j, column in enumerate(spec.columns):
            printed = row.cells[j]
            if rec.is_derived(i, j):
                shown = printed.text if printed.kind in ("gap", "number") else None
                found = _check(spec, row, column.key, "value", shown, printed.value, printed.decimals,
                               rec.value(i, j))
                if found:
                    findings.append(found)
            elif printed.kind == "gap":
                findings.append(Finding(spec.ref, row.id, column.key, "value", "gap", "?", None, None, None,
                                        "base value lost in the text extraction"))
            if row.delta_vs is not None and printed.kind == "number" and printed.delta is not None:
                found = _check(spec, row, column.key, "delta", printed.delta_text, printed.delta,
                               printed.delta_decimals, rec.delta(i, j))
                if found:
                    findings.append(found)
    return findings


def count_checked(spec: TableSpec) -> int:
    """How many printed derived values (including printed deltas) verify compares."""
    rec = Recomputer(spec)
    total = 0
    for i, row in enumerate(spec.rows):
        for j, _ in enumerate(spec.columns):
            printed = row.cells[j]
            if rec.is_derived(i, j) and printed.kind == "number":
                total += 1
            if row.delta_vs is not None and printed.kind == "number" and printed.delta is not None:
                total += 1
    return total


def to_table(spec: TableSpec) -> Table:
    """The regenerated table: base numbers as printed, derived cells recomputed, differences noted."""
    rec = Recomputer(spec)
    by_cell: dict[tuple[str, str, str], Finding] = {(f.row, f.column, f.part): f for f in verify(spec)}
    rows: list[Row] = []
    any_gap = False
    for i, row in enumerate(spec.rows):
        cells: dict[str, Cell] = {}
        for j, column in enumerate(spec.columns):
            printed = row.cells[j]
            notes: list[str] = []
            if rec.is_derived(i, j):
                computed = rec.value(i, j)
                decimals = printed.decimals if printed.kind == "number" else spec.decimals
                # the float nearest the exact decimal: reports.table rounds its repr half up, as render() does
                value: float | str | None = computed.number
                finding = by_cell.get((row.id, column.key, "value"))
                if finding is not None and finding.kind in ("mismatch", "rounding"):
                    notes.append(f"printed {printed.text}")
                if computed.value is None:
                    value = printed.value if printed.kind == "number" else ("?" if printed.kind == "gap" else None)
                    if printed.kind == "number":
                        notes.append(f"as printed; not recomputable ({computed.missing})")
                elif printed.kind == "gap":
                    notes.append("recomputed; lost in the text extraction")
                elif printed.kind == "dash":
                    notes.append("recomputed; the paper prints no value")
            elif printed.kind == "number":
                value, decimals = printed.value, printed.decimals
            else:
                value, decimals = {"gap": "?", "dash": None, "text": printed.text}[printed.kind], None
            any_gap = any_gap or value == "?"
            delta = None
            if row.delta_vs is not None and isinstance(value, float):
                delta = rec.delta(i, j).number
                finding = by_cell.get((row.id, column.key, "delta"))
                if finding is not None and finding.kind in ("mismatch", "rounding"):
                    notes.append(f"printed delta {printed.delta_text}")
            cells[column.key] = Cell(value, delta=delta, marks=printed.marks, decimals=decimals,
                                     note="; ".join(notes) or None)
        rows.append(Row(row.label, cells, group=row.group, kind=row.kind))
    notes = list(spec.notes)
    if any_gap:
        notes.append(GAP_NOTE)
    notes.append(f"Transcribed from paper {spec.paper.id} ({spec.paper.short_name}), Table {spec.number}: "
                 "base numbers as printed; derived cells recomputed from them.")
    return Table(
        columns=[Column(c.key, c.label, c.group, c.higher_is_better) for c in spec.columns],
        rows=rows,
        caption=spec.caption,
        label=f"tab:{spec.paper.short_name}-table{spec.number}",
        legend=dict(spec.legend),
        notes=notes,
        decimals=spec.decimals,
        scale=1.0,
        bold_best=spec.bold_best,
        underline_second=spec.underline_second,
        row_header=spec.row_header,
        best_along=spec.best_along,
    )
