"""Layout kinds of the COCO-DR suite (paper 001): ``dro-results`` and ``cluster-weights``.

``dro-results``
    the ``results`` table (variants as rows, (benchmark, metric) columns, paired tests against
    the baseline with the suite's correction) plus a column ``Worst Δ``: for each row, the lowest
    delta against the baseline over the table's benchmark columns of the suite's first metric
    (the reported one, nDCG@10 in COCO-DR; aggregates left out; every benchmark column when none
    has that metric), so a method that gains on average but loses on one dataset shows it, and
    a Recall@100 column is not compared with an nDCG@10 one; a note names that dataset.
``cluster-weights``
    one variant (its single column) trained by a DRO method: the table lists its clusters
    (final weight, mean weight over training, mean batch loss, last size) and the figure is the
    heat map of the weights over training (:func:`reports.plots_dro.cluster_weight_figure`),
    read from ``method/dro_trace.npz`` of the variant's training cell.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness.ablation.layout import (
    LayoutColumn,
    LayoutKind,
    LayoutRowGroup,
    TableLayout,
    read_summary,
    register_layout_kind,
    results_table,
    train_keys,
)
from harness.ablation.paths import train_cell_dir
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Cell, Column, Row, Table

WORST = "worst-delta"
TRACE = "dro_trace.npz"


@register_layout_kind("dro-results")
class DroResultsLayout(LayoutKind):
    """The results table with the worst per-dataset delta against the baseline."""

    needs_rows = True

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        table = results_table(suite, scale, results_root, layout)
        columns = [(c.benchmark, c.metric) for c in layout.columns]
        labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
        return add_worst_delta(table, columns, set(suite.scale(scale).aggregates), suite.metrics[0], labels)


def add_worst_delta(table: Any, columns: list[tuple[str, str]], aggregates: set[str], metric: str,
                    labels: dict[str, str] | None = None) -> Any:
    """Append the ``Worst Δ`` column to a results ``table`` whose cells are keyed ``benchmark/metric``:
    per non-baseline row, the lowest delta over the benchmark ``columns`` of ``metric`` (all benchmark
    columns when none has it; aggregates left out), and a note naming each row's worst dataset."""
    benchmarks = [(b, m) for b, m in columns if b not in aggregates]
    chosen = [(b, m) for b, m in benchmarks if m == metric] or benchmarks
    datasets = {f"{b}/{m}": b for b, m in chosen}
    used = sorted({m for _, m in chosen})
    worst_notes = []
    for row in table.rows:
        deltas = {key: row.cells[key].delta for key in datasets if key in row.cells
                  and row.cells[key].delta is not None}
        if row.kind == "baseline" or not deltas:
            continue
        key = min(deltas, key=lambda k: float(deltas[k] or 0.0))
        row.cells[WORST] = Cell(deltas[key])
        name = datasets[key]
        worst_notes.append(f"{row.label}: {(labels or {}).get(name, name)} ({key.split('/', 1)[1]})")
    table.columns.append(Column(WORST, "Worst Δ", group="vs baseline"))
    table.notes.append(f"Worst Δ: the lowest difference to the baseline over the benchmark columns of "
                       f"{', '.join(used)} (aggregates left out); " + "; ".join(worst_notes) + ".")
    return table


def trace_path(suite: AblationSuite, scale: str, results_root: str | Path, variant: str) -> Path:
    """``method/dro_trace.npz`` of ``variant``'s training cell in a finished suite."""
    keys = train_keys(read_summary(suite, scale, results_root))
    if variant not in keys:
        raise ConfigError(f"summary of suite {suite.name!r} ({scale}) has no cell for variant {variant!r}")
    return train_cell_dir(results_root, keys[variant]) / "method" / TRACE


@register_layout_kind("cluster-weights")
class ClusterWeightsLayout(LayoutKind):
    """One DRO variant's clusters: final/mean weight, mean loss, size; the figure is the weight heat map."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        super().check(layout, suite, scale)
        if len(layout.columns) != 1:
            raise ConfigError(f"layout {layout.name!r} of kind cluster-weights shows one variant; its columns "
                              f"name {len(layout.columns)}")
        variant = suite.variant(layout.columns[0].benchmark)
        if variant.method not in ("idro", "groupdro", "dro-erm"):
            raise ConfigError(f"layout {layout.name!r}: variant {variant.id!r} is trained by {variant.method!r}, "
                              "which keeps no cluster weights (idro, groupdro or dro-erm do)")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.plots_dro import read_trace  # lazy (start-up speed): imports PIL, matplotlib

        variant = layout.columns[0].benchmark
        trace = read_trace(trace_path(suite, scale, results_root, variant))
        weights = trace["weights"].astype(float)
        share = weights / weights.sum(axis=1, keepdims=True)
        columns = [Column("final", "final weight"), Column("share", "final share"), Column("mean", "mean share"),
                   Column("loss", "mean loss"), Column("size", "queries")]
        rows = []
        for c in range(weights.shape[1]):
            losses = trace["losses"][:, c]
            mean_loss = float(np.nanmean(losses)) if (~np.isnan(losses)).any() else None
            rows.append(Row(f"cluster {c}", {"final": Cell(float(weights[-1, c])), "share": Cell(float(share[-1, c])),
                                             "mean": Cell(float(share[:, c].mean())), "loss": Cell(mean_loss),
                                             "size": Cell(str(int(trace["sizes"][-1, c])))}))
        label = suite.variant(variant).label
        return Table(columns=columns, rows=rows, caption=layout.caption or f"Cluster weights of {label}",
                     label=f"tab:{suite.name}-{layout.name}-{scale}", decimals=layout.decimals or 3, scale=1.0,
                     bold_best=False, row_header="Cluster",
                     notes=[f"Scale {scale}; {len(trace['steps'])} steps; shares = weights / their sum per step; "
                            "mean loss over the steps where the cluster was in the batch."])

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        # lazy (start-up speed): imports PIL, matplotlib
        from reports.plots_dro import cluster_weight_figure, read_trace

        variant = layout.columns[0].benchmark
        trace = read_trace(trace_path(suite, scale, results_root, variant))
        return cluster_weight_figure(trace, layout.caption or suite.variant(variant).label)


DATASET_ROWS_OPTIONS = ("metric", "labels")


@register_layout_kind("dataset-rows")
class DatasetRowsLayout(LayoutKind):
    """Datasets as rows, variants as columns (paper 001's Tables 2 and 7): one metric, every benchmark of the
    scale, then its aggregates; values and markers are those of the ``results`` table of the same variants
    (paired tests against the suite's baseline, the suite's correction over the cells shown).

    Options: ``metric`` (default: the suite's first metric), ``labels`` ({variant id: column label}, e.g.
    ``{coco-idro: Full, coco: -iDRO, idro: -COCO}``)."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        unknown = sorted(set(layout.options) - set(DATASET_ROWS_OPTIONS))
        if unknown:
            raise ConfigError(f"layout {layout.name!r}: unknown option(s) {', '.join(unknown)}; options: "
                              f"{', '.join(DATASET_ROWS_OPTIONS)}")
        labels = layout.options.get("labels") or {}
        if not isinstance(labels, dict) or set(labels) - {c.benchmark for c in layout.columns}:
            raise ConfigError(f"layout {layout.name!r}: option labels must map the layout's column variants to "
                              "labels")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        metric = str(layout.options.get("metric") or suite.metrics[0])
        cfg = suite.scale(scale)
        variants = [c.benchmark for c in layout.columns]
        names = [b.id for b in cfg.benchmarks] + list(cfg.aggregates)
        inner = TableLayout(layout.name, "results", layout.caption, [LayoutColumn(n, metric) for n in names],
                            [LayoutRowGroup(None, variants)], layout.decimals)
        table = results_table(suite, scale, results_root, inner)
        by_label = {r.label: r for r in table.rows}
        variant_labels = {v.id: v.label for v in suite.variants}
        shown = dict(layout.options.get("labels") or {})
        columns = [Column(v, str(shown.get(v, variant_labels[v]))) for v in variants]
        bench_labels = {b.id: b.label for b in cfg.benchmarks}
        rows = []
        for name in names:
            key = f"{name}/{metric}"
            cells = {v: by_label[variant_labels[v]].cells[key] for v in variants
                     if key in by_label[variant_labels[v]].cells}
            kind = "average" if name in cfg.aggregates else "data"
            rows.append(Row(bench_labels.get(name, name), cells, kind=kind))
        return Table(columns=columns, rows=rows, caption=table.caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                     legend=table.legend, notes=table.notes, decimals=table.decimals, scale=table.scale,
                     bold_best=False, row_header="Dataset")
