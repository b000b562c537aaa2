"""Layout kind ``tradeoff``: effectiveness against the cost of a sparse index, one point per variant.

Learned sparse retrieval trades effectiveness for sparsity (a larger FLOPS weight gives shorter
posting lists and a cheaper index, and usually a lower nDCG).  This kind reads, for each variant,
the metric of one benchmark (the layout's single ``columns:`` entry, the y axis) and a sparsity
statistic that every sparse evaluation stores in its result manifest (``sparse.sparsity``, written
by :func:`harness.retrieval.sparse.sparsity_stats`), and gives

* a table: variant, expected FLOPs per query-document pair, mean non-zeros per query and per
  document, the metric (and the x statistic when it is none of these);
* a figure: the metric (y) against the statistic (x), one labelled point per variant, optionally
  a line through a series of variants (a lambda sweep).

A suite file declares it like this::

    lambda:
      kind: tradeoff
      columns: [{benchmark: scifact, metric: ndcg@10}]   # the y axis; a benchmark or an aggregate
      options:
        x: expected_flops            # or query_nnz, doc_nnz (mean), query_nnz.p90, doc_nnz.max, index_bytes
        variants: [lambda-1e-4, lambda-1e-3, splade]     # the points (default: every sparse variant)
        line: [lambda-1e-4, lambda-1e-3]                 # joined by a line, in this order (optional)
        log_x: auto                  # true, false, or auto (log when the x values span > 20x)

For an aggregate column, a variant's metric is the mean of its per-benchmark means and its
statistic the mean of the members' statistics (a macro average; the notes say so).  Variants
whose results hold no sparsity statistics (BM25, dense models) cannot be points: naming one in
``variants`` is an error; by default they are left out and listed in the notes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ablation.layout import LayoutKind, TableLayout, read_summary, register_layout_kind, result_dir
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError, InputError
from harness.store import load_result
from reports.table import Cell, Column, Row, Table

OPTIONS = ("x", "variants", "line", "log_x")
NNZ_FIELDS = ("mean", "p50", "p90", "p99", "max")
# Statistic name -> (path in manifest["sparse"]["sparsity"], axis / column label, decimals, table scale)
STATISTICS: dict[str, tuple[tuple[str, ...], str, int, float]] = {
    "expected_flops": (("expected_flops",), "Expected FLOPs per query-document pair", 2, 1.0),
    "index_bytes": (("index_bytes",), "Index size (MiB)", 2, 1.0 / 2**20),
    **{f"query_nnz.{f}" if f != "mean" else "query_nnz": (("query_nnz", f), f"Non-zeros per query ({f})", 1, 1.0)
       for f in NNZ_FIELDS},
    **{f"doc_nnz.{f}" if f != "mean" else "doc_nnz": (("doc_nnz", f), f"Non-zeros per document ({f})", 1, 1.0)
       for f in NNZ_FIELDS},
}
TABLE_STATISTICS = ("expected_flops", "query_nnz", "doc_nnz")   # always shown in the table
AUTO_LOG_RATIO = 20.0


@dataclass
class TradeoffPoint:
    """One variant's position: its metric and sparsity statistics (macro-averaged over an aggregate)."""

    variant: str
    label: str
    metric: float
    stats: dict[str, float]          # every name of STATISTICS

    @property
    def flops(self) -> float:
        return self.stats["expected_flops"]


def sparsity_statistic(manifest: dict[str, Any], name: str, where: str | Path = "result") -> float:
    """Statistic ``name`` (see :data:`STATISTICS`) of a stored sparse evaluation's manifest."""
    if name not in STATISTICS:
        raise ConfigError(f"unknown sparsity statistic {name!r}; choose one of {', '.join(STATISTICS)}")
    sparsity = (manifest.get("sparse") or {}).get("sparsity")
    if not isinstance(sparsity, dict):
        raise ConfigError(f"{where}: no sparsity statistics (manifest 'sparse.sparsity'): not a sparse evaluation")
    value: Any = sparsity
    for key in STATISTICS[name][0]:
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(where, f"sparsity statistic {name!r} must be a finite number, got {value!r}")
    return float(value)


def _has_sparsity(manifest: dict[str, Any]) -> bool:
    return isinstance((manifest.get("sparse") or {}).get("sparsity"), dict)


def _names(value: Any, option: str, layout: TableLayout, known: set[str]) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"layout {layout.name!r}: option {option!r} must be a non-empty list of variant ids, "
                          f"got {value!r}")
    unknown = [v for v in value if v not in known]
    if unknown:
        raise ConfigError(f"layout {layout.name!r}: option {option!r} names unknown variant(s) "
                          f"{', '.join(unknown)}")
    if len(set(value)) != len(value):
        raise ConfigError(f"layout {layout.name!r}: option {option!r} names a variant twice")
    return list(value)


def _fraction(value: float, values: list[float], log: bool = False) -> float:
    """Where ``value`` lies between the smallest and largest of ``values`` (0..1; 0.5 when they are equal)."""
    low, high = min(values), max(values)
    if log:
        value, low, high = math.log(value), math.log(low), math.log(high)
    return 0.5 if high == low else (value - low) / (high - low)


@register_layout_kind("tradeoff")
class TradeoffLayout(LayoutKind):
    """A metric against a sparsity statistic, one point per variant (see the module docstring)."""

    columns = "benchmark"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        unknown = sorted(set(layout.options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"layout {layout.name!r}: unknown option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(OPTIONS)}")
        if len(layout.columns) != 1:
            raise ConfigError(f"layout {layout.name!r}: a tradeoff layout has exactly one column (the y axis: "
                              f"{{benchmark, metric}}), got {len(layout.columns)}")
        x = layout.options.get("x", "expected_flops")
        if x not in STATISTICS:
            raise ConfigError(f"layout {layout.name!r}: option x {x!r} is not a sparsity statistic; choose one of "
                              f"{', '.join(STATISTICS)}")
        known = {v.id for v in suite.variants}
        points = _names(layout.options["variants"], "variants", layout, known) if "variants" in layout.options \
            else None
        if "line" in layout.options:
            line = _names(layout.options["line"], "line", layout, known)
            missing = [v for v in line if points is not None and v not in points]
            if missing:
                raise ConfigError(f"layout {layout.name!r}: option 'line' names variant(s) that are not points "
                                  f"(option 'variants'): {', '.join(missing)}")
        log_x = layout.options.get("log_x", "auto")
        if log_x not in (True, False, "auto"):
            raise ConfigError(f"layout {layout.name!r}: option log_x must be true, false or auto, got {log_x!r}")
        cfg = suite.scale(scale)
        column = layout.columns[0]
        if column.benchmark not in cfg.aggregates and column.benchmark not in {b.id for b in cfg.benchmarks}:
            raise ConfigError(f"layout {layout.name!r}: {column.benchmark!r} is neither a benchmark nor an "
                              f"aggregate of scale {scale!r}")

    # ------------------------------------------------------------------------------------------ data
    def points(self, suite: AblationSuite, scale: str, results_root: str | Path,
               layout: TableLayout) -> tuple[list[TradeoffPoint], list[str]]:
        """The points of the layout and the variants left out (no sparsity statistics)."""
        cfg = suite.scale(scale)
        summary = read_summary(suite, scale, results_root)
        column = layout.columns[0]
        members = cfg.aggregates.get(column.benchmark) or [column.benchmark]
        explicit = "variants" in layout.options
        wanted = list(layout.options["variants"]) if explicit else [v.id for v in suite.variants]
        labels = {v.id: v.label for v in suite.variants}
        points, skipped = [], []
        for variant in wanted:
            stored = [load_result(result_dir(suite, scale, results_root, summary, variant, b)) for b in members]
            if not all(_has_sparsity(s.manifest) for s in stored):
                if explicit:
                    where = next(s.path for s in stored if not _has_sparsity(s.manifest))
                    raise ConfigError(f"layout {layout.name!r}: variant {variant!r} has no sparsity statistics in "
                                      f"{where} (a dense or lexical model cannot be a point; remove it from "
                                      f"option 'variants')")
                skipped.append(variant)
                continue
            values = []
            for s in stored:
                if column.metric not in s.metrics:
                    raise ConfigError(f"{s.path}: no metric {column.metric!r} (stored: {', '.join(s.metrics)})")
                values.append(float(s.metrics[column.metric]))
            stats = {name: sum(sparsity_statistic(s.manifest, name, s.path) for s in stored) / len(stored)
                     for name in STATISTICS}
            points.append(TradeoffPoint(variant, labels[variant], sum(values) / len(values), stats))
        if not points:
            raise ConfigError(f"layout {layout.name!r}: no variant of suite {suite.name!r} ({scale}) has sparsity "
                              f"statistics on {column.benchmark!r}")
        return points, skipped

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.comparison import metric_label  # lazy (start-up speed): imports scipy

        points, skipped = self.points(suite, scale, results_root, layout)
        column = layout.columns[0]
        x = layout.options.get("x", "expected_flops")
        shown = [x] + [s for s in TABLE_STATISTICS if s != x] if x not in TABLE_STATISTICS else list(TABLE_STATISTICS)
        short = {"expected_flops": "FLOPs", "query_nnz": "nnz / query", "doc_nnz": "nnz / doc"}
        columns = [Column(s, short.get(s, STATISTICS[s][1]), group="Sparsity", higher_is_better=False) for s in shown]
        bench_labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
        metric_key = f"{column.benchmark}/{column.metric}"
        columns.append(Column(metric_key, column.label or metric_label(column.metric),
                              group=column.group or bench_labels.get(column.benchmark, column.benchmark)))
        rows = []
        for p in points:
            cells = {s: Cell(p.stats[s] * STATISTICS[s][3], decimals=STATISTICS[s][2]) for s in shown}
            cells[metric_key] = Cell(p.metric * 100.0, decimals=layout.decimals or 1)
            rows.append(Row(p.label, cells, kind="baseline" if p.variant == suite.baseline else "data"))
        notes = [f"Scale {scale}; results of {Path(results_root) / 'suites' / suite.name / scale}.",
                 f"{metric_label(column.metric)} x 100; FLOPs: expected multiplications per query-document pair, "
                 "sum over terms of P(query has the term) x P(document has the term); nnz: mean non-zeros "
                 "per text.  Paired tests against the baseline are in the results layouts."]
        if column.benchmark in suite.scale(scale).aggregates:
            notes.append(f"{column.benchmark}: mean over its benchmarks of each variant's metric and statistics.")
        if skipped:
            labels = {v.id: v.label for v in suite.variants}
            notes.append("Not sparse (no statistics), left out: " + ", ".join(labels[v] for v in skipped) + ".")
        caption = layout.caption or f"Suite '{suite.name}' ({scale}): {metric_label(column.metric)} against cost"
        return Table(columns=columns, rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                     notes=notes, decimals=1, scale=1.0, row_header="Variant")

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.comparison import metric_label  # lazy (start-up speed): imports scipy
        from reports.plots import _new_figure  # lazy (start-up speed): imports PIL, matplotlib

        points, _ = self.points(suite, scale, results_root, layout)
        column = layout.columns[0]
        x = layout.options.get("x", "expected_flops")
        fig = _new_figure(6.4, 4.4, 150)
        ax = fig.add_subplot(1, 1, 1)
        by_id = {p.variant: p for p in points}
        line = [by_id[v] for v in layout.options.get("line", []) if v in by_id]
        if len(line) > 1:
            ax.plot([p.stats[x] for p in line], [p.metric for p in line], color="0.6", linewidth=1.2, zorder=1)
        xs = [p.stats[x] for p in points]
        log_x = layout.options.get("log_x", "auto")
        if log_x is True or (log_x == "auto" and min(xs) > 0 and max(xs) / min(xs) > AUTO_LOG_RATIO):
            if min(xs) <= 0:
                raise ConfigError(f"layout {layout.name!r}: log_x needs positive {x} values, got {min(xs)}")
            ax.set_xscale("log")
        # Points closer than this (axes fractions) share one label, their names one per line.
        clusters: list[tuple[float, float, TradeoffPoint, list[str]]] = []
        ys = [p.metric for p in points]
        for p in points:
            marker, colour = ("s", "C3") if p.variant == suite.baseline else \
                ("o", "C0") if p in line else ("D", "C2")
            ax.scatter([p.stats[x]], [p.metric], marker=marker, color=colour, s=36, zorder=2)
            fx, fy = _fraction(p.stats[x], xs, ax.get_xscale() == "log"), _fraction(p.metric, ys)
            near = next((c for c in clusters if abs(fx - c[0]) < 0.12 and abs(fy - c[1]) < 0.07), None)
            if near is None:
                clusters.append((fx, fy, p, [p.label]))
            else:
                near[3].append(p.label)
        for fx, _fy, p, names in clusters:
            right = fx > 0.7                         # labels of the rightmost points go to their left
            ax.annotate("\n".join(names), (p.stats[x], p.metric), textcoords="offset points", fontsize=7,
                        xytext=(-6 if right else 6, -4), ha="right" if right else "left", va="top")
        ax.margins(x=0.08, y=0.08)
        bench = {b.id: b.label for b in suite.scale(scale).benchmarks}.get(column.benchmark, column.benchmark)
        ax.set_xlabel(STATISTICS[x][1])
        ax.set_ylabel(f"{metric_label(column.metric)} ({bench})")
        ax.set_title(layout.caption or f"{suite.name} ({scale})", fontsize=9)
        ax.grid(True, linewidth=0.4, alpha=0.5)
        return fig


__all__ = ["TradeoffLayout", "TradeoffPoint", "STATISTICS", "sparsity_statistic"]
