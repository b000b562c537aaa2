"""Render a finished suite's stored results in a table layout declared in the suite file.

A suite file may carry a ``table:`` section (read by the suite schema,
:class:`harness.ablation.schema.TableSection`, into ``AblationSuite.table``)::

    table:
      default: table5
      layouts:
        table5:                                  # kind "results" (default)
          caption: ...
          rows:                                  # variant ids, or groups of them
            - baseline
            - {group: Dataset Selection, rows: [top60, top70]}
          columns:                               # or per scale: scales: {small: {columns: [...]}}
            - {benchmark: scifact, metric: ndcg@10, group: BEIR (SciFact), label: nDCG@10}
            - {benchmark: MIRACL, metric: ndcg@10}       # an aggregate of the scale
        weights:                                 # kind "weights": dataset weights per variant
          kind: weights
          columns: [baseline, relative, top70]   # variant ids

Results layouts read the per-query scores of the suite's evaluation cells (the
``results/<variant>/<benchmark>`` folders of the finished suite) and compare every
shown cell with the baseline using the suite's ``stats`` settings.  The correction
family is *the cells of this table* (every marker the table shows), so a marker can
differ from ``table.md``, whose family is every comparison of the suite; the notes
under the table say which.  A column may use any metric the benchmark's protocol
stored (e.g. ``acc@100`` of an MKQA-protocol set), not only the suite's ``metrics``.

Weights layouts read ``<training cell>/method/weights.json`` (``{dataset: weight}``,
the sampling weights a method used or learned); a run without that file sampled
its sources uniformly (from ``run.json``).

A results layout may also print a paper's numbers (transcribed in ``reports/papers``) beside ours:
reported rows (``{reported: {paper, table, row | column}, label}`` in ``rows:``; each column names the
paper line it shows with ``reported_column`` or ``reported_row``) and reported columns (a column's
``reported: {paper, table, column, rows: {variant: paper row}}``, or ``row`` + ``columns`` for a table
whose columns are the systems), which add the printed value and ours minus it.  Printed cells carry
:data:`REPORTED_MARK` and a footnote naming paper, table and cell; they are not ranked for bold-best
unless ``bold_reported: true`` (:func:`with_reported`).  The README's "Reported numbers beside ours".

Other kinds are plug-ins: a :class:`LayoutKind` subclass registered in :data:`LAYOUT_KINDS`
(modules of the package ``harness.ablation.layouts``, the entry point group
``retrieval_harness.layout_kinds``, or a ``module:Class`` reference as ``kind:``).  A kind
reads its own settings from the layout's ``options:`` mapping (per scale:
``scales: {small: {options: ...}}`` updates it) and may also draw a figure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from harness.ablation.axes import (
    FinishedSuite,
    baseline_system,
    bold_by_value,
    expand_rows,
    replicates,
    suite_systems,
    value_cell,
)
from harness.ablation.paths import (  # noqa: F401 (read_summary: re-exported)
    cell_result_dir,
    read_summary,
    report_dir,
    train_cell_dir,
)
from harness.ablation.problems import Problems
from harness.ablation.schema import (
    ColumnEntry,
    LayoutScaleEntry,
    ReportedRef,
    ReportedRowEntry,
    RowGroup,
    TableSection,
    closest,
    find_line,
    given,
    line_title,
    read_table,
)
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError, InputError
from harness.io.readers import read_json_object
from harness.registry import Registry
from reports.table import Cell, Column, Row, Table, emphasis, format_delta


class LayoutKind:
    """A kind of table layout a suite file can declare with ``kind:``.

    ``columns`` says what its ``columns:`` entries are: ``"benchmark"`` ({benchmark, metric,
    group, label} mappings, checked here), ``"variant"`` (variant ids) or ``"layout"`` (none: the kind shows
    the columns of another layout it names in its options, as ``across-scales``).  Subclasses check their
    ``options`` in :meth:`check` (raise ConfigError naming the problem) and build the table from a
    finished suite in :meth:`render`; :meth:`figure` returns a matplotlib figure or None.
    """

    name: str = ""
    columns: str = "benchmark"
    needs_rows: bool = False           # a results-style layout: rows default to every variant

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        """Refuse bad ``options`` (the columns and rows are checked already)."""
        if layout.options:
            raise ConfigError(f"layout {layout.name!r} of kind {layout.kind!r} takes no options, got "
                              f"{', '.join(sorted(layout.options))}")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        raise NotImplementedError(f"layout kind {self.name!r} ({type(self).__qualname__}) defines no render()")

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return None


def check_known_options(layout: TableLayout, allowed: tuple[str, ...], where: str | None = None) -> None:
    """Refuse a layout option its kind does not read, naming the kind's options (for ``LayoutKind.check``)."""
    unknown = sorted(set(layout.options) - set(allowed))
    if unknown:
        raise ConfigError(f"{where or f'layout {layout.name!r}'}: unknown option(s) {', '.join(unknown)}; options: "
                          f"{', '.join(allowed)}")


def check_column_benchmarks(layout: TableLayout, suite: AblationSuite, scale: str, where: str | None = None) -> None:
    """Refuse a column whose benchmark is neither a benchmark nor an aggregate of ``scale``."""
    config = suite.scale(scale)
    names = {b.id for b in config.benchmarks} | set(config.aggregates)
    for col in layout.columns:
        if col.benchmark not in names:
            raise ConfigError(f"{where or f'layout {layout.name!r}'}: {col.benchmark!r} is neither a benchmark nor "
                              f"an aggregate of {scale!r}")


def _set_kind_name(name: str, cls: type[LayoutKind]) -> None:
    cls.name = name


LAYOUT_KINDS: Registry[type[LayoutKind]] = Registry(
    "table layout kind", builtins=("harness.ablation.layouts",), group="retrieval_harness.layout_kinds",
    check=lambda obj: isinstance(obj, type) and issubclass(obj, LayoutKind), on_register=_set_kind_name)


def register_layout_kind(name: str):
    """Class decorator: ``@register_layout_kind("tradeoff")`` on a :class:`LayoutKind` subclass."""
    return LAYOUT_KINDS.decorator(name)


@dataclass
class LayoutColumn:
    benchmark: str                 # benchmark id or aggregate name (results), or variant id (weights)
    metric: str = ""
    group: str | None = None
    label: str | None = None
    reported_column: str | None = None     # the paper column (or row) this column shows in reported rows
    reported_row: str | None = None
    reported: ReportedRef | None = None    # a reported column after this one (printed value and difference)


@dataclass
class LayoutRowGroup:
    group: str | None
    variants: list[str]
    reported: ReportedRowEntry | None = None   # a row of a paper's printed numbers (variants is empty)


@dataclass
class TableLayout:
    name: str
    kind: str
    caption: str
    columns: list[LayoutColumn]
    rows: list[LayoutRowGroup] = field(default_factory=list)
    decimals: int | None = None
    options: dict[str, Any] = field(default_factory=dict)   # settings of a plug-in kind
    bold_reported: bool = False            # reported numbers take part in bold-best

    @property
    def has_reported(self) -> bool:
        """Whether the layout shows a paper's printed numbers (reported rows or columns)."""
        return any(g.reported is not None for g in self.rows) or any(c.reported is not None for c in self.columns)


def table_section(suite: AblationSuite) -> TableSection:
    """The suite's ``table:`` section, read by the schema from the suite's ``raw`` mapping (so a suite changed
    in code is seen as it is now; problems raised at their lines), else the one the suite was built with."""
    if isinstance(suite.raw.get("table"), dict):
        problems = Problems(suite.path, suite.lines, suite.columns)
        table = read_table(suite.raw["table"], problems)
        problems.raise_if_any()
        return table
    return suite.table


def layout_names(suite: AblationSuite) -> tuple[list[str], str | None]:
    """``(layout names, default name)`` declared by the suite's ``table:`` section."""
    table = table_section(suite)
    return list(table.layouts), table.default


def load_layout(suite: AblationSuite, scale: str, name: str | None = None,
                table: TableSection | None = None) -> TableLayout:
    """Layout ``name`` (default: the suite's default layout) at ``scale``: the schema read its shape (with
    file:line); here its kind, its columns for that kind, and its rows against the suite's variants.
    ``table``: the suite's ``table:`` section when the caller already read it (a loop over all layouts reads it
    once instead of once per layout)."""
    table = table if table is not None else table_section(suite)
    names = list(table.layouts)
    where = f"suite {suite.name!r} table layout"
    if not names:
        raise ConfigError(f"suite {suite.name!r} declares no table layouts (a 'table:' section with 'layouts')")
    name = name or table.default or names[0]
    if name not in names:
        raise ConfigError(f"{where} {name!r} does not exist; layouts: {', '.join(names)}")
    entry = table.layouts[name]
    try:
        kind_impl = layout_kind(entry.kind)
    except ConfigError as exc:
        raise ConfigError(f"{where} {name!r}: {exc}") from None
    per_scale = entry.scales.get(scale) or LayoutScaleEntry()
    columns_given = per_scale.columns if per_scale.columns is not None else entry.columns
    if kind_impl.columns == "layout":       # a kind that shows another layout's columns (across-scales)
        if columns_given:
            raise ConfigError(f"{where} {name!r} of kind {entry.kind!r} shows the columns of the layout it gathers; "
                              "it takes no columns of its own")
    elif not columns_given:
        raise ConfigError(f"{where} {name!r} has no columns at scale {scale!r}")
    variant_ids = {v.id for v in suite.variants}
    columns = [_column(c, kind_impl.columns, variant_ids, f"{where} {name!r}") for c in columns_given]

    # rows may also name one point of a swept variant (its system id, e.g. "k-means@k=4")
    row_ids = variant_ids | {s.id for s in suite_systems(suite)}
    rows = [_row_group(r, row_ids, f"{where} {name!r}") for r in entry.rows]
    if kind_impl.needs_rows and not rows:
        rows = [LayoutRowGroup(None, [v.id for v in suite.variants])]
    caption = per_scale.caption if per_scale.caption is not None else entry.caption
    layout = TableLayout(name, entry.kind, str(caption), columns, rows, entry.decimals,
                         {**entry.options, **per_scale.options}, entry.bold_reported)
    if layout.has_reported:
        _check_reported(layout, kind_impl, row_ids, f"{where} {name!r}")
    kind_impl.check(layout, suite, scale)
    return layout


def _check_reported(layout: TableLayout, kind: LayoutKind, system_ids: set[str], where: str) -> None:
    """Reported numbers: a results layout only; a reported column maps declared variants (or sweep points)."""
    if not isinstance(kind, ResultsLayout):
        raise ConfigError(f"{where}: reported rows and columns (a paper's printed numbers) are shown by results "
                          f"layouts only, not by kind {layout.kind!r}")
    for column in layout.columns:
        ref = column.reported
        if ref is None:
            continue
        for variant in [*ref.rows, *ref.columns]:
            if variant not in system_ids:
                hint = closest(variant, system_ids)
                raise ConfigError(f"{where}: the reported column after {column.benchmark}/{column.metric} maps "
                                  f"unknown variant {variant!r}" + (f" (did you mean {hint!r}?)" if hint else ""))


def layout_kind(name: str) -> LayoutKind:
    """A fresh instance of the layout kind ``name`` (built-in, plug-in or ``module:Class``)."""
    kind: LayoutKind = LAYOUT_KINDS.create(name)
    return kind


def _column(entry: str | ColumnEntry, columns: str, variant_ids: set[str], where: str) -> LayoutColumn:
    if columns == "variant":
        if not isinstance(entry, str) or entry not in variant_ids:
            shown = entry if isinstance(entry, str) else {k: getattr(entry, k) for k in given(entry)}
            raise ConfigError(f"{where}: the columns of this layout are variant ids, got {shown!r}")
        return LayoutColumn(entry)
    if isinstance(entry, str):
        raise ConfigError(f"{where}: a column needs 'benchmark' and 'metric', got {entry!r}")
    return LayoutColumn(str(entry.benchmark), str(entry.metric), entry.group, entry.label, entry.reported_column,
                        entry.reported_row, entry.reported)


def _row_group(entry: str | RowGroup | ReportedRowEntry, variant_ids: set[str], where: str) -> LayoutRowGroup:
    if isinstance(entry, ReportedRowEntry):
        return LayoutRowGroup(entry.group, [], reported=entry)
    group = LayoutRowGroup(None, [entry]) if isinstance(entry, str) else LayoutRowGroup(entry.group, list(entry.rows))
    unknown = [v for v in group.variants if v not in variant_ids]
    if unknown:
        raise ConfigError(f"{where}: unknown variant(s) {', '.join(unknown)}")
    return group


# ---------------------------------------------------------------------------------------------- locating results
def train_keys(summary: dict[str, Any]) -> dict[str, str]:
    return {c["variant"]: c["key"] for c in summary["cells"]}


def result_dir(suite: AblationSuite, scale: str, results_root: str | Path, summary: dict[str, Any],
               variant: str, benchmark: str) -> Path:
    """The stored evaluation of ``variant`` on ``benchmark``, as the finished suite exposes it."""
    if not any(b.id == benchmark for b in suite.scale(scale).benchmarks):
        raise ConfigError(f"suite {suite.name!r} scale {scale!r} has no benchmark {benchmark!r}")
    if variant not in train_keys(summary):
        raise ConfigError(f"summary of suite {suite.name!r} ({scale}) has no cell for variant {variant!r}")
    path = cell_result_dir(report_dir(results_root, suite.name, scale), variant, benchmark)
    if not path.exists():
        raise ConfigError(f"{path}: no stored result for {variant} on {benchmark} (rerun: harness run {suite.name} "
                          f"--scale {scale} --results-root {results_root}; finished cells are reused)")
    return path


# ---------------------------------------------------------------------------------------------- rendering
def results_table(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout):
    """The :class:`reports.table.Table` of a results layout (comparisons recomputed for its cells)."""
    from harness.stats.compare import TEST_NAMES  # lazy (start-up speed): imports scipy
    from harness.stats.correction import CORRECTION_NAMES  # lazy (start-up speed): imports scipy
    from harness.stats.replicates import REPLICATE_TEST_NOTE  # lazy (start-up speed): imports scipy
    from harness.stats.suite import compare_suite, same_runs  # lazy (start-up speed): imports scipy
    from reports.comparison import GAIN_MARK, LOSS_MARK, metric_label  # lazy (start-up speed): imports scipy

    cfg = suite.scale(scale)
    finished = FinishedSuite(suite, scale, results_root)
    bench_labels = {b.id: b.label for b in cfg.benchmarks}
    # rows are systems: a variant, each point of a swept variant; a system with seeds is their per-query mean
    row_groups = [(g.group, expand_rows(suite, g.variants)) for g in layout.rows]
    base = baseline_system(suite)
    by_id = {s.id: s for _, group in row_groups for s in group}
    by_id.setdefault(base.id, base)
    labels = {sid: system.label for sid, system in by_id.items()}
    baseline = base.id
    shown = [s.id for _, group in row_groups for s in group]
    systems = [baseline] + [v for v in dict.fromkeys(shown) if v != baseline]
    stats = dict(suite.stats)
    options = suite.stats_options()
    alpha = float(stats.get("alpha", 0.05))
    aggregate_method = stats.get("aggregate", "pooled")

    # One comparison pass over exactly the table's cells: Holm's family, the draw count it needs and the
    # resolution of decisions at their threshold are those of this table (harness.stats.suite.compare_suite).
    results: dict[str, dict[str, Any]] = {}
    aggregates: dict[str, list[str]] = {}
    cell_of: dict[str, tuple[str, str]] = {}
    for col in layout.columns:
        if col.benchmark not in cfg.aggregates and col.benchmark not in bench_labels:
            raise ConfigError(f"layout {layout.name!r}: {col.benchmark!r} is neither a benchmark nor an aggregate "
                              f"of scale {scale!r}")
        benches, nested = finished.columns(col.benchmark)
        for b in benches:
            if bench_labels[b] not in results:
                results[bench_labels[b]] = {labels[v]: finished.evaluation(by_id[v], b) for v in systems}
        aggregates.update({name: [bench_labels.get(m, m) for m in members] for name, members in nested.items()})
        dataset = col.benchmark if nested else bench_labels[col.benchmark]
        cell_of[f"{col.benchmark}/{col.metric}"] = (dataset, col.metric)
    correction = stats.get("correction", "holm")
    # a run shown under two names, or runs with identical results, is compared and counted once (flagged in the notes)
    run_keys = {labels[s]: {c["key"] for r in replicates(suite, by_id[s], scale) if (c := finished.cells.get(r.id))}
                for s in systems[1:]}
    same_as = same_runs(run_keys, results, [labels[s] for s in systems[1:]])
    report = compare_suite(results, list(dict.fromkeys(m for _, m in cell_of.values())), baseline=labels[baseline],
                           aggregates=aggregates or None, aggregate_method=aggregate_method, options=options,
                           correction=correction, alpha=alpha, cells=set(cell_of.values()), same_as=same_as or None)
    comparisons, keys = [], []
    for key, (dataset, metric) in cell_of.items():
        for sid in systems[1:]:
            comparisons.append(report.get(labels[sid], metric, dataset))
            keys.append(key)

    columns = [Column(f"{c.benchmark}/{c.metric}", c.label or metric_label(c.metric),
                      group=c.group or bench_labels.get(c.benchmark, c.benchmark)) for c in layout.columns]
    cells: dict[str, dict[str, Cell]] = {s: {} for s in systems}
    by_label = {labels[s]: s for s in systems}
    for key, c in zip(keys, comparisons):
        marks: tuple[str, ...] = ()
        if c.significant(alpha):
            marks = (GAIN_MARK,) if c.delta > 0 else (LOSS_MARK,) if c.delta < 0 else ()
        cells[by_label[c.system]][key] = Cell(c.mean, delta=c.delta, marks=marks)
        cells[baseline].setdefault(key, Cell(c.mean_base))
    replicated = [s for s in systems if len(finished.runs(by_id[s], cfg.benchmarks[0].id)) > 1]
    means: dict[tuple[int, str], float] = {}
    rows: list[Row] = []
    reported_at: list[tuple[int, ReportedRowEntry]] = []     # (rows before it, the reported row)
    for layout_group, (group, group_systems) in zip(layout.rows, row_groups):
        if layout_group.reported is not None:
            reported_at.append((len(rows), layout_group.reported))
        for system in group_systems:
            v = system.id
            kind = "baseline" if v == baseline else "data"
            rows.append(Row(labels[v], cells[v], group=group if kind == "data" else None, kind=kind))
    if not any(r.kind == "baseline" for r in rows):
        rows.insert(0, Row(labels[baseline], cells[baseline], kind="baseline"))
        reported_at = [(at + 1, entry) for at, entry in reported_at]
    if replicated:       # mean ± sd over the seeds where a row has replicates
        for i, row in enumerate(rows):
            system = by_id[by_label[row.label]]
            for col in layout.columns:
                key = f"{col.benchmark}/{col.metric}"
                cell = row.cells.get(key)
                if cell is None:
                    continue
                mean, sd, _values = finished.value(system, col.benchmark, col.metric)
                means[(i, key)] = mean
                row.cells[key] = value_cell(mean, sd, 100.0, layout.decimals or 1, delta=cell.delta, marks=cell.marks)
    distinct = sum(c.same_as is None for c in comparisons)      # a repeated run counts once
    detail = (f"{CORRECTION_NAMES[correction]}-adjusted p over the {distinct} comparisons of this table"
              if correction != "none" else "unadjusted p")
    detail += f" < {alpha:g}, {TEST_NAMES[options.test]}"
    legend = {GAIN_MARK: f"significantly better than {labels[baseline]} ({detail})"}
    if any(LOSS_MARK in cell.marks for row in rows for cell in row.cells.values()):
        legend[LOSS_MARK] = f"significantly worse than {labels[baseline]} ({detail})"
    caption = layout.caption or f"Suite '{suite.name}' ({scale}), layout {layout.name}"
    notes = [f"Scale {scale}; results of {Path(results_root) / 'suites' / suite.name / scale}.", *report.describe()]
    if replicated:
        notes.append(REPLICATE_TEST_NOTE)
    table = Table(columns=columns, rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                  legend=legend, notes=notes, decimals=layout.decimals or 1, scale=100.0, row_header="Variant")
    table = bold_by_value(table, means) if replicated else table
    if not layout.has_reported:
        return table
    ours = {(i, key): means.get((i, key), cell.value) for i, row in enumerate(table.rows)
            for key, cell in row.cells.items() if isinstance(means.get((i, key), cell.value), (int, float))}
    return with_reported(table, layout, scale, [by_label[r.label] for r in table.rows], ours, reported_at)


# ---------------------------------------------------------------------------------------------- reported numbers
REPORTED_MARK = "§"      # a paper's printed number (GAIN_MARK/LOSS_MARK, the significance markers, are † and ‡)


def _fraction(spec: Any) -> bool:
    """Whether a transcribed table prints fractions (0.789) rather than percentages (78.9): every number <= 1."""
    values = [p.value for r in spec.rows for p in r.cells if p.kind == "number"]
    return bool(values) and all(0 <= v <= 1 for v in values)


def printed_cell(spec: Any, row: int, column: int) -> Cell:
    """The printed number at (``row``, ``column``) of a transcribed table as a cell of a suite table (scores are
    fractions shown x 100), marked and with a footnote naming paper, table and cell; "–" where no number is printed."""
    printed = spec.rows[row].cells[column]
    where = (f"paper {spec.paper.id} Table {spec.number}, row {line_title(spec, 'row', row)}, column "
             f"{line_title(spec, 'column', column)}")
    if printed.kind == "number":
        digits = f"{printed.value:.{printed.decimals}f}"
        fraction = _fraction(spec)
        value = Decimal(digits) if fraction else Decimal(digits) / 100
        decimals = max(printed.decimals - 2, 0) if fraction else printed.decimals
        return Cell(float(value), marks=(REPORTED_MARK,), note=f"{where}: {digits} printed", decimals=decimals)
    if printed.kind == "text":
        return Cell(printed.text, marks=(REPORTED_MARK,), note=f"{where}: {printed.text!r} printed")
    missing = "a dash (no value)" if printed.kind == "dash" else "a cell the text extraction lost"
    return Cell(None, note=f"{where}: {missing}")


def with_reported(table: Table, layout: TableLayout, scale: str, systems: list[str],
                  ours: dict[tuple[int, str], float], reported_at: list[tuple[int, ReportedRowEntry]]) -> Table:
    """``table`` with the layout's reported rows (inserted where declared) and reported columns (after their
    column: the printed value, and ours minus printed).  ``systems``: the system id of each row of ``table``;
    ``ours``: the unrounded value of each of its cells.  Reported numbers are not ranked for bold-best unless
    the layout says ``bold_reported: true``; without it the cells of ours keep the marking they have alone."""
    flags = emphasis(table)
    rows = [Row(r.label, {k: replace(c, bold=flags.get((i, k), (False, False))[0],
                                     underline=flags.get((i, k), (False, False))[1]) for k, c in r.cells.items()},
                r.group, r.kind) for i, r in enumerate(table.rows)]
    # the value each shown cell is ranked by when bold_reported asks for it (None: not ranked)
    ranked: list[dict[str, float | None]] = [{k: ours.get((i, k)) for k in r.cells} for i, r in enumerate(rows)]
    columns: list[Column] = []
    papers: dict[str, None] = {}
    for column, layout_column in zip(table.columns, layout.columns):
        columns.append(column)
        ref = layout_column.reported
        if ref is None:
            continue
        spec = ref.spec
        papers[f"paper {spec.paper.id} ({spec.paper.short_name}) Table {spec.number}"] = None
        paper_key, diff_key = f"{column.key}/reported", f"{column.key}/difference"
        columns += [Column(paper_key, "paper", column.group, column.higher_is_better),
                    Column(diff_key, "Δ", column.group, column.higher_is_better)]
        for i, (row, system) in enumerate(zip(rows, systems)):
            if ref.column is not None:         # the paper's rows are the systems
                name = ref.rows.get(system)
                cell = None if name is None else \
                    printed_cell(spec, find_line(spec, "row", name), find_line(spec, "column", ref.column))
            else:                              # the paper's columns are the systems
                name = ref.columns.get(system)
                cell = None if name is None else \
                    printed_cell(spec, find_line(spec, "row", ref.row or ""), find_line(spec, "column", name))
            if cell is None:
                continue
            row.cells[paper_key] = cell
            ranked[i][paper_key] = cell.value if isinstance(cell.value, float) else None
            mine = ours.get((i, column.key))
            if mine is not None and isinstance(cell.value, float):
                row.cells[diff_key] = Cell(format_delta(mine - cell.value, table.scale, table.decimals))
    # inserted from the last: later rows first, so that rows declared at the same position keep their order
    for _, (position, entry) in sorted(enumerate(reported_at), key=lambda x: (x[1][0], x[0]), reverse=True):
        ref = entry.reported
        assert ref is not None and ref.spec is not None
        spec = ref.spec
        papers[f"paper {spec.paper.id} ({spec.paper.short_name}) Table {spec.number}"] = None
        cells: dict[str, Cell] = {}
        for column, layout_column in zip(table.columns, layout.columns):
            if ref.row is not None and layout_column.reported_column is not None:
                cells[column.key] = printed_cell(spec, find_line(spec, "row", ref.row),
                                                 find_line(spec, "column", layout_column.reported_column))
            elif ref.column is not None and layout_column.reported_row is not None:
                cells[column.key] = printed_cell(spec, find_line(spec, "row", layout_column.reported_row),
                                                 find_line(spec, "column", ref.column))
        title = spec.rows[find_line(spec, "row", ref.row)].label if ref.row is not None else \
            spec.columns[find_line(spec, "column", ref.column or "")].label
        label = entry.label or f"{title} (paper {spec.paper.id}, Tab. {spec.number})"
        rows.insert(position, Row(label, cells, group=entry.group))
        ranked.insert(position, {k: c.value if isinstance(c.value, float) else None for k, c in cells.items()})
    comparable = "" if scale == "paper" else " (not comparable in value)"
    notes = [*table.notes, f"{REPORTED_MARK} printed in {', '.join(papers)} (transcribed in reports/papers), shown "
                           f"beside ours; ours ran at scale {scale}{comparable}."]
    if any(c.key.endswith("/difference") for c in columns):
        notes.append("Δ: ours minus the printed number, in the table's units.")
    notes.append("Bold: the best of ours and of the printed numbers, ranked together." if layout.bold_reported else
                 "Bold: the best of ours; printed numbers are not ranked.")
    legend = {**table.legend, REPORTED_MARK: "printed in the paper (see the notes under the table)"}
    out = replace(table, columns=columns, rows=rows, notes=notes, legend=legend, bold_best=False,
                  underline_second=False)
    if not layout.bold_reported:
        return out
    # rank ours and the printed numbers together (the difference columns are text: never ranked)
    values = [Row(r.label, {k: Cell(v) for k, v in ranked[i].items() if v is not None}, r.group, r.kind)
              for i, r in enumerate(rows)]
    flags = emphasis(replace(out, rows=values, bold_best=True, underline_second=table.underline_second))
    return replace(out, rows=[Row(r.label, {k: replace(c, bold=flags.get((i, k), (False, False))[0],
                                                       underline=flags.get((i, k), (False, False))[1])
                                            for k, c in r.cells.items()}, r.group, r.kind)
                              for i, r in enumerate(rows)])


def suite_weights(suite: AblationSuite, scale: str, results_root: str | Path,
                  variants: list[str]) -> dict[str, dict[str, float]]:
    """``{variant id: {dataset: weight}}``: the sampling weights each variant's run used or learned."""
    summary = read_summary(suite, scale, results_root)
    keys = train_keys(summary)
    out: dict[str, dict[str, float]] = {}
    for v in variants:
        if suite.variant(v).method == "none":
            raise ConfigError(f"variant {v!r} is not trained; it has no dataset weights")
        run = train_cell_dir(results_root, keys[v])
        exported = run / "method" / "weights.json"
        if exported.exists():
            out[v] = _weights(exported)
            continue
        record = run / "run.json"
        if not record.exists():
            raise ConfigError(f"{run}: no training run for variant {v!r}")
        data = read_json_object(record, "training record").get("data")
        if not isinstance(data, list) or not data or \
                not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in data):
            raise InputError(record, "'data' must be a non-empty list of {name, ...} objects")
        names = [d["name"] for d in data]
        out[v] = {n: 1.0 / len(names) for n in names}
    return out


def _weights(path: Path) -> dict[str, float]:
    """``{dataset: weight}`` of a method's ``weights.json``: finite numbers only."""
    weights = read_json_object(path, "dataset weights")
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise InputError(path, f"weight of {name!r} must be a finite number, got {weight!r}")
    return {str(k): float(w) for k, w in weights.items()}


def weights_table(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout):
    """Datasets as rows (sorted by the first learned column, descending), one column per variant."""
    variants = [c.benchmark for c in layout.columns]
    weights = suite_weights(suite, scale, results_root, variants)
    order = _dataset_order(weights, variants)
    labels = {v.id: v.label for v in suite.variants}
    columns = [Column(v, labels[v]) for v in variants]
    rows = [Row(n, {v: Cell(weights[v].get(n)) for v in variants}) for n in order]
    rows.append(Row("Sum", {v: Cell(sum(weights[v].values())) for v in variants}, kind="average"))
    caption = layout.caption or f"Dataset weights of suite '{suite.name}' ({scale})"
    return Table(columns=columns, rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                 notes=[f"Scale {scale}; uniform = 1/{len(order)} = {1 / len(order):.4f}."],
                 decimals=layout.decimals or 4, scale=1.0, bold_best=False, row_header="Dataset")


def _dataset_order(weights: dict[str, dict[str, float]], variants: list[str]) -> list[str]:
    """Datasets sorted by the first column whose weights vary (descending)."""
    names = list(next(iter(weights.values())))
    varying = next((w for w in weights.values() if len(set(w.values())) > 1), weights[variants[0]])
    return sorted(names, key=lambda n: -varying.get(n, 0.0))


@register_layout_kind("results")
class ResultsLayout(LayoutKind):
    """Variants as rows, (benchmark or aggregate, metric) as columns, markers against the baseline."""

    needs_rows = True

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return results_table(suite, scale, results_root, layout)


@register_layout_kind("weights")
class WeightsLayout(LayoutKind):
    """Datasets as rows, one column per variant: the sampling weights each run used or learned."""

    columns = "variant"

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return weights_table(suite, scale, results_root, layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return _weights_figure(suite, scale, results_root, layout)


def render_layout(suite: AblationSuite, scale: str, results_root: str | Path, name: str | None = None):
    """The table of layout ``name`` (default layout if None) at ``scale``."""
    layout = load_layout(suite, scale, name)
    return layout_kind(layout.kind).render(suite, scale, results_root, layout)


def layout_figure(suite: AblationSuite, scale: str, results_root: str | Path, name: str | None = None):
    """The figure of layout ``name``; a kind that draws none is refused."""
    layout = load_layout(suite, scale, name)
    figure = layout_kind(layout.kind).figure(suite, scale, results_root, layout)
    if figure is None:
        raise ConfigError(f"layout {layout.name!r} is a {layout.kind} layout, which draws no figure")
    return figure


def weights_figure(suite: AblationSuite, scale: str, results_root: str | Path, name: str | None = None):
    """A grouped bar chart (like paper 000, Figure 3) of a weights layout's variants."""
    layout = load_layout(suite, scale, name)
    if layout.kind != "weights":
        raise ConfigError(f"layout {layout.name!r} is a {layout.kind} layout; a figure needs a weights layout")
    return _weights_figure(suite, scale, results_root, layout)


def _weights_figure(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout):
    from reports.plots import dataset_weight_figure  # lazy (start-up speed): imports PIL, matplotlib

    variants = [c.benchmark for c in layout.columns]
    weights = suite_weights(suite, scale, results_root, variants)
    labels = {v.id: v.label for v in suite.variants}
    order = _dataset_order(weights, variants)
    return dataset_weight_figure({labels[v]: weights[v] for v in variants}, datasets=order,
                                 title=layout.caption or None, reference=1.0 / len(order))
