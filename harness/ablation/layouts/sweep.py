"""Layout kind ``sweep``: a variant's parameter sweep as a table (value x column) and a line plot with CIs.

In a suite file::

    table:
      layouts:
        k-sweep:
          kind: sweep
          columns: [{benchmark: Avg, metric: ndcg@10}, {benchmark: latin_qa, metric: ndcg@10}]
          options: {variants: [clusters], reference: first, log_x: true}

Rows are the sweep points of each listed variant (default: every variant with a ``sweep``),
grouped by variant.  A cell shows the column's mean (``mean ± sd`` over the seeds for a
variant with replicates) and its delta to the reference: the variant's first value
(``reference: first``, default) or the suite's baseline (``reference: baseline``, which then
gets a row of its own).  Markers come from the suite's paired test (on per-query scores,
averaged over seeds), corrected over every comparison of the table.  The figure draws one
panel per column: the mean per value with a bootstrap CI band (queries resampled within
each benchmark of an aggregate), one line per variant.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ablation.axes import (
    FinishedSuite,
    System,
    baseline_system,
    bold_by_value,
    systems_of,
    value_cell,
    value_text,
)
from harness.ablation.layout import LayoutKind, TableLayout, register_layout_kind
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Column, Row, Table

OPTIONS = ("variants", "reference", "log_x", "level")
REFERENCES = ("first", "baseline")


def swept_variants(suite: AblationSuite, layout: TableLayout) -> list[str]:
    """The variants a sweep layout shows (its ``variants`` option, or every swept variant)."""
    names = layout.options.get("variants")
    if names is None:
        return [v.id for v in suite.variants if v.sweep is not None]
    return [str(n) for n in names]


def _check_options(layout: TableLayout, suite: AblationSuite, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(layout.options) - set(allowed))
    if unknown:
        raise ConfigError(f"layout {layout.name!r}: unknown option(s) {', '.join(unknown)}; "
                          f"options: {', '.join(allowed)}")
    names = layout.options.get("variants")
    if names is not None and (not isinstance(names, list) or not names):
        raise ConfigError(f"layout {layout.name!r}: 'variants' must be a non-empty list of variant ids")
    level = layout.options.get("level", 0.95)
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ConfigError(f"layout {layout.name!r}: 'level' must be a number in (0, 1), got {level!r}")


@register_layout_kind("sweep")
class SweepLayout(LayoutKind):
    """Sweep points as rows, (benchmark or aggregate, metric) as columns; a line plot with CIs."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        _check_options(layout, suite, OPTIONS)
        reference = layout.options.get("reference", "first")
        if reference not in REFERENCES:
            raise ConfigError(f"layout {layout.name!r}: reference must be one of {', '.join(REFERENCES)}, "
                              f"got {reference!r}")
        variants = swept_variants(suite, layout)
        if not variants:
            raise ConfigError(f"layout {layout.name!r}: suite {suite.name!r} has no variant with a 'sweep'")
        known = {v.id: v for v in suite.variants}
        for vid in variants:
            if vid not in known:
                raise ConfigError(f"layout {layout.name!r}: unknown variant {vid!r}")
            if known[vid].sweep is None:
                raise ConfigError(f"layout {layout.name!r}: variant {vid!r} has no 'sweep'")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return sweep_table(suite, scale, results_root, layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return sweep_figure(suite, scale, results_root, layout)


def _compare_column(finished: FinishedSuite, rows: list[System], reference: System, benchmark: str,
                    metric: str) -> dict[str, Any]:
    """``{system id: Comparison}`` of every row with ``reference`` on one column (uncorrected)."""
    from harness.stats.suite import compare_suite  # lazy (start-up speed): imports scipy

    suite = finished.suite
    leaves, aggregates = finished.columns(benchmark)
    systems = [reference, *[s for s in rows if s.id != reference.id]]
    if len(systems) < 2:
        return {}
    results = {leaf: {s.id: finished.evaluation(s, leaf) for s in systems} for leaf in leaves}
    stats = suite.stats
    report = compare_suite(results, [metric], baseline=reference.id, aggregates=aggregates or None,
                           aggregate_method=stats.get("aggregate", "pooled"), options=suite.stats_options(),
                           correction="none", alpha=float(stats.get("alpha", 0.05)))
    return {c.system: c for c in report.comparisons if c.dataset == benchmark}


def sweep_table(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
    from harness.stats.compare import TEST_NAMES  # lazy (start-up speed): imports scipy
    from harness.stats.correction import CORRECTION_NAMES  # lazy (start-up speed): imports scipy
    from harness.stats.replicates import REPLICATE_TEST_NOTE  # lazy (start-up speed): imports scipy
    from harness.stats.suite import ComparisonReport, apply_correction  # lazy (start-up speed): imports scipy
    from reports.comparison import GAIN_MARK, LOSS_MARK, metric_label  # lazy (start-up speed): imports scipy

    finished = FinishedSuite(suite, scale, results_root)
    reference_kind = layout.options.get("reference", "first")
    base = baseline_system(suite)
    groups = [(suite.variant(v), systems_of(suite.variant(v))) for v in swept_variants(suite, layout)]
    bench_labels = {b.id: b.label for b in finished.config.benchmarks}
    columns = [Column(f"{c.benchmark}/{c.metric}", c.label or metric_label(c.metric),
                      group=c.group or bench_labels.get(c.benchmark, c.benchmark)) for c in layout.columns]
    comparisons, where = [], []
    for variant, points in groups:
        reference = points[0] if reference_kind == "first" else base
        for col in layout.columns:
            found = _compare_column(finished, points, reference, col.benchmark, col.metric)
            for system_id, comparison in found.items():
                comparisons.append(comparison)
                where.append((variant.id, system_id, f"{col.benchmark}/{col.metric}"))
    stats = suite.stats
    alpha = float(stats.get("alpha", 0.05))
    correction = stats.get("correction", "holm")
    if comparisons:
        apply_correction(comparisons, correction, "all")
    marks_of = {}
    for (vid, sid, key), c in zip(where, comparisons):
        marks: tuple[str, ...] = ()
        if c.significant(alpha):
            marks = (GAIN_MARK,) if c.delta > 0 else (LOSS_MARK,) if c.delta < 0 else ()
        marks_of[(vid, sid, key)] = (c.delta, marks)
    decimals = layout.decimals or 1
    rows: list[Any] = []
    means: dict[tuple[int, str], float] = {}
    replicated = False
    table_rows: list[tuple[str | None, System, str]] = []
    if reference_kind == "baseline":
        table_rows.append((None, base, "baseline"))
    for variant, points in groups:
        table_rows += [(variant.label, s, "data") for s in points]
    for group, system, kind in table_rows:
        cells = {}
        for col in layout.columns:
            key = f"{col.benchmark}/{col.metric}"
            mean, sd, values = finished.value(system, col.benchmark, col.metric)
            replicated = replicated or len(values) > 1
            delta, marks = marks_of.get((system.variant.id, system.id, key), (None, ()))
            cells[key] = value_cell(mean, sd, 100.0, decimals, delta=delta, marks=marks)
            means[(len(rows), key)] = mean
        label = system.label if kind == "baseline" else _point_label(system)
        rows.append(Row(label, cells, group=group, kind=kind))
    detail = (f"{CORRECTION_NAMES[correction]}-adjusted p over the {len(comparisons)} comparisons of this table"
              if correction != "none" else "unadjusted p") + f" < {alpha:g}, {TEST_NAMES[suite.stats_options().test]}"
    against = "the variant's first value" if reference_kind == "first" else f"{base.label}"
    legend = {GAIN_MARK: f"significantly better than {against} ({detail})"}
    if any(LOSS_MARK in c.marks for r in rows for c in r.cells.values()):
        legend[LOSS_MARK] = f"significantly worse than {against} ({detail})"
    report = ComparisonReport(comparisons, against, [], sorted({c.metric for c in comparisons}), [], {},
                              suite.stats_options(), correction, alpha, "all", stats.get("aggregate", "pooled"))
    notes = [f"Scale {scale}; deltas against {against}.", *(report.describe() if comparisons else [])]
    if replicated:
        notes.append(REPLICATE_TEST_NOTE)
    caption = layout.caption or f"Suite '{suite.name}' ({scale}): sweep"
    table = Table(columns=columns, rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                  legend=legend, notes=notes, decimals=decimals, scale=100.0, row_header="Value")
    return bold_by_value(table, means)


def _point_label(system: System) -> str:
    sweep = system.sweep
    return system.label if sweep is None else f"{sweep.name}={value_text(system.value)}"


def sweep_positions(points: list[System]) -> tuple[list[float], dict[float, str] | None]:
    """x positions of sweep points: the values when all are numbers, else 0, 1, ... with the values as ticks."""
    values = [p.value for p in points]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    return [float(i) for i in range(len(values))], {float(i): value_text(v) for i, v in enumerate(values)}


def sweep_figure(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
    from reports.comparison import metric_label  # lazy (start-up speed): imports scipy
    from reports.plots import line_ci_figure  # lazy (start-up speed): imports PIL, matplotlib

    finished = FinishedSuite(suite, scale, results_root)
    level = float(layout.options.get("level", 0.95))
    bench_labels = {b.id: b.label for b in finished.config.benchmarks}
    panels: dict[str, dict[str, list[tuple[float, float, float, float]]]] = {}
    names, ticks = [], None
    for vid in swept_variants(suite, layout):
        variant = suite.variant(vid)
        points = systems_of(variant)
        xs, labels = sweep_positions(points)
        ticks = labels or ticks
        names.append(variant.sweep.name if variant.sweep else vid)
        for col in layout.columns:
            panel = f"{col.group or bench_labels.get(col.benchmark, col.benchmark)} " \
                    f"{col.label or metric_label(col.metric)}"
            panels.setdefault(panel, {})[variant.label] = [
                (x, *finished.ci(p, col.benchmark, col.metric, level=level)) for x, p in zip(xs, points)]
    xlabel = ", ".join(dict.fromkeys(names))
    return line_ci_figure(panels, xlabel=xlabel, ylabel=f"mean ({int(round(level * 100))}% bootstrap CI)",
                          title=layout.caption or None, x_labels=ticks, log_x=bool(layout.options.get("log_x")))
