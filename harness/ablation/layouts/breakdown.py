"""Layout kind ``breakdown``: benchmarks as rows grouped by family or language, systems as columns.

In a suite file::

    table:
      layouts:
        per-language:
          kind: breakdown
          columns: [baseline, top70, relative]     # variant ids (a swept variant gives one column per value)
          options:
            metric: ndcg@10                         # default: the suite's first metric
            group_by: language                      # family (default) | language | none
            # or explicit groups: {groups: {MIRACL: [miracl-ar, ...], BEIR: [...]}}
            averages: true                          # a macro-average row per group (default)

Groups: ``family`` is the benchmark's suite (BEIR, MIRACL, MKQA, C-MTEB, ...), ``language``
the benchmark's ``language`` option (else its BM25 analyzer language from the protocol card).
A cell shows the mean (``mean ± sd`` over seeds for a system with replicates) with the
suite's significance marker against the baseline (the first column when the baseline is
not shown), corrected over every comparison of the table.  The best value of each row is
bold: best-value marks run along the system axis.
"""
from __future__ import annotations

import dataclasses as dc
from pathlib import Path
from typing import Any

import numpy as np

from harness.ablation.axes import FinishedSuite, System, baseline_system, bold_by_value, expand_rows, value_cell
from harness.ablation.layout import LayoutKind, TableLayout, register_layout_kind
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Cell, Column, Row, Table

OPTIONS = ("metric", "group_by", "groups", "averages")
GROUP_BY = ("family", "language", "none")
FAMILY_NAMES = {"beir": "BEIR", "miracl": "MIRACL", "mkqa": "MKQA", "cmteb": "C-MTEB", "c-mteb": "C-MTEB",
                "mteb": "MTEB", "synthetic": "Synthetic", "dureader": "DuReader", "xquad": "XQuAD"}


@register_layout_kind("breakdown")
class BreakdownLayout(LayoutKind):
    """Benchmarks as rows grouped by family or language, systems as columns, best per row in bold."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        unknown = sorted(set(layout.options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"layout {layout.name!r}: unknown option(s) {', '.join(unknown)}; "
                              f"options: {', '.join(OPTIONS)}")
        group_by = layout.options.get("group_by", "family")
        if group_by not in GROUP_BY:
            raise ConfigError(f"layout {layout.name!r}: group_by must be one of {', '.join(GROUP_BY)}, "
                              f"got {group_by!r}")
        groups = layout.options.get("groups")
        ids = [b.id for b in suite.scale(scale).benchmarks]
        if groups is not None:
            if not isinstance(groups, dict) or not groups or \
                    not all(isinstance(m, list) and m for m in groups.values()):
                raise ConfigError(f"layout {layout.name!r}: 'groups' maps a group name to a list of benchmark ids")
            missing = sorted({str(b) for m in groups.values() for b in m} - set(ids))
            if missing:
                raise ConfigError(f"layout {layout.name!r}: 'groups' names unknown benchmark(s) "
                                  f"{', '.join(missing)} at scale {scale!r}")
        metric = layout.options.get("metric")
        if metric is not None and not isinstance(metric, str):
            raise ConfigError(f"layout {layout.name!r}: 'metric' must be a metric name, got {metric!r}")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return breakdown_table(suite, scale, results_root, layout)


def benchmark_groups(suite: AblationSuite, scale: str, layout: TableLayout,
                     finished: FinishedSuite | None = None) -> list[tuple[str | None, list[str]]]:
    """``[(group name, benchmark ids), ...]`` in the order the table shows them."""
    cfg = suite.scale(scale)
    explicit = layout.options.get("groups")
    if explicit:
        return [(str(name), [str(b) for b in members]) for name, members in explicit.items()]
    group_by = layout.options.get("group_by", "family")
    if group_by == "none":
        return [(None, [b.id for b in cfg.benchmarks])]
    out: dict[str, list[str]] = {}
    for b in cfg.benchmarks:
        if group_by == "family":
            name = FAMILY_NAMES.get(b.suite.lower(), b.suite)
        else:
            language = b.options.get("language")
            if language is None and finished is not None:
                card = next(iter(finished.runs(baseline_system(suite), b.id)), None)
                language = getattr(getattr(card, "card", None), "bm25_language", None)
            name = str(language or "unknown")
        out.setdefault(name, []).append(b.id)
    return list(out.items())


def breakdown_table(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
    from harness.stats.aggregate import AGGREGATE_DESCRIPTIONS  # lazy (start-up speed): imports scipy
    from harness.stats.compare import TEST_NAMES  # lazy (start-up speed): imports scipy
    from harness.stats.correction import CORRECTION_NAMES  # lazy (start-up speed): imports scipy
    from harness.stats.replicates import REPLICATE_TEST_NOTE, replicate_spread  # lazy (start-up speed): imports scipy
    from harness.stats.suite import compare_suite  # lazy (start-up speed): imports scipy
    from reports.comparison import GAIN_MARK, LOSS_MARK, metric_label  # lazy (start-up speed): imports scipy

    finished = FinishedSuite(suite, scale, results_root)
    cfg = finished.config
    metric = str(layout.options.get("metric") or suite.metrics[0])
    systems: list[System] = expand_rows(suite, [c.benchmark for c in layout.columns])
    base = baseline_system(suite)
    reference = base if any(s.id == base.id for s in systems) else systems[0]
    others = [s for s in systems if s.id != reference.id]
    groups = benchmark_groups(suite, scale, layout, finished)
    averages = bool(layout.options.get("averages", True))
    labels = {b.id: b.label for b in cfg.benchmarks}
    stats = suite.stats
    alpha = float(stats.get("alpha", 0.05))
    correction = stats.get("correction", "holm")
    aggregate_method = stats.get("aggregate", "pooled")

    # one comparison per (row, system): benchmarks, and each group's macro average
    row_specs: list[tuple[str | None, str, list[str], str]] = []      # (group, row label, benchmarks, kind)
    for name, members in groups:
        row_specs += [(name, labels.get(b, b), [b], "data") for b in members]
        if averages and len(members) > 1:
            row_specs.append((name, f"Avg ({len(members)})" if name is None else f"{name} avg ({len(members)})",
                              members, "average"))
    # One comparison pass over exactly the table's cells (each benchmark row and each group average): Holm's
    # family, the draw count it needs and the resolution of decisions at their threshold are this table's.
    comparisons, where = [], []
    report = None
    if others:
        results: dict[str, dict[str, Any]] = {}
        averages_of: dict[str, list[str]] = {}
        cell_of: list[str] = []
        for i, (_group, label, members, _kind) in enumerate(row_specs):
            for b in members:
                if b not in results:
                    results[b] = {s.id: finished.evaluation(s, b) for s in [reference, *others]}
            if len(members) > 1:        # named by its row label in the notes, unless a benchmark has that id
                name = label if label not in labels and label not in averages_of else f"{label} (row {i + 1})"
                averages_of[name] = list(members)
                cell_of.append(name)
            else:
                cell_of.append(members[0])
        report = compare_suite(results, [metric], baseline=reference.id, aggregates=averages_of or None,
                               aggregate_method=aggregate_method, options=suite.stats_options(),
                               correction=correction, alpha=alpha, cells={(d, metric) for d in cell_of})
        for i, dataset in enumerate(cell_of):
            for s in others:
                comparisons.append(report.get(s.id, metric, dataset))
                where.append((i, s.id))
    marks_of: dict[tuple[int, str], tuple[float, tuple[str, ...]]] = {}
    for (i, sid), c in zip(where, comparisons):
        marks: tuple[str, ...] = ()
        if c.significant(alpha):
            marks = (GAIN_MARK,) if c.delta > 0 else (LOSS_MARK,) if c.delta < 0 else ()
        marks_of[(i, sid)] = (c.delta, marks)

    decimals = layout.decimals or 1
    columns = [Column(s.id, s.label) for s in systems]
    rows: list[Any] = []
    means: dict[tuple[int, str], float] = {}
    replicated = False
    for i, (group, label, members, kind) in enumerate(row_specs):
        cells: dict[str, Cell] = {}
        for s in systems:
            if len(members) == 1:
                mean, sd, values = finished.value(s, members[0], metric)
            else:
                parts = [finished.value(s, b, metric)[2] for b in members]
                values = np.mean(np.stack(parts), axis=0)
                mean, sd = replicate_spread(values)
            replicated = replicated or len(values) > 1
            _delta, marks = marks_of.get((i, s.id), (None, ()))
            cells[s.id] = value_cell(mean, sd, 100.0, decimals, marks=marks)
            means[(len(rows), s.id)] = mean
        rows.append(Row(label, cells, group=group, kind="data" if kind == "data" else "average"))
    table = Table(columns=columns, rows=rows, caption="", decimals=decimals, scale=100.0, row_header="Benchmark")
    # best per row among the systems (average rows too: the table model ranks data rows only)
    ranked = bold_by_value(_as_data(table), means, along="row")
    rows = [dc.replace(r, kind=orig.kind) for r, orig in zip(ranked.rows, rows)]
    detail = (f"{CORRECTION_NAMES[correction]}-adjusted p over the {len(comparisons)} comparisons of this table"
              if correction != "none" else "unadjusted p") + f" < {alpha:g}, {TEST_NAMES[suite.stats_options().test]}"
    legend = {}
    if any(GAIN_MARK in c.marks for r in rows for c in r.cells.values()):
        legend[GAIN_MARK] = f"significantly better than {reference.label} ({detail})"
    if any(LOSS_MARK in c.marks for r in rows for c in r.cells.values()):
        legend[LOSS_MARK] = f"significantly worse than {reference.label} ({detail})"
    notes = [f"Scale {scale}; {metric_label(metric)}; best value per row in bold; markers against "
             f"{reference.label}."]
    if report is not None:
        notes += [line for line in report.describe() if not line.startswith(("Aggregates:", "Nested aggregates"))]
        if any(kind == "average" for *_rest, kind in row_specs):
            notes.append(f"Group averages: {AGGREGATE_DESCRIPTIONS[aggregate_method]}.")
    if replicated:
        notes.append(REPLICATE_TEST_NOTE)
    caption = layout.caption or f"Suite '{suite.name}' ({scale}): {metric_label(metric)} per benchmark"
    return Table(columns=columns, rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                 legend=legend, notes=notes, decimals=decimals, scale=100.0, bold_best=False, row_header="Benchmark")


def _as_data(table: Any) -> Any:
    return dc.replace(table, rows=[dc.replace(r, kind="data") for r in table.rows])
