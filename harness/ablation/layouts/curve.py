"""Layout kind ``curve``: learning curves from the intermediate checkpoints of the ``checkpoints`` axis.

In a suite file::

    variants:
      - {id: uniform, method: uniform, checkpoints: {every: 20}}
    table:
      layouts:
        curve:
          kind: curve
          columns: [{benchmark: Avg, metric: ndcg@10}]
          options: {variants: [uniform]}       # default: every variant with checkpoints
          # optional: names of the points in step order, the finished run last (e.g. a paper's
          # Epi-1 .. Epi-4 for checkpoints [0, 45000, 90000] and the finished run)
          # options: {labels: [Epi-1, Epi-2, Epi-3, Epi-4]}

The figure has one panel per column: the metric against the training step (every kept
checkpoint and the finished run), one line per system (each sweep point of a swept variant
is its own line), with a bootstrap CI band from the per-query scores (averaged over the
seeds of a variant with replicates).  The table lists the same numbers: one row per step,
grouped by system, ``mean ± sd`` over seeds where there are replicates.  The checkpoints are
evaluated from the saved runs, never retrained.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ablation.axes import FinishedSuite, System, bold_by_value, systems_of, value_cell
from harness.ablation.layout import LayoutKind, TableLayout, register_layout_kind
from harness.ablation.layouts.sweep import _check_options
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Column, Row, Table

OPTIONS = ("variants", "level", "labels")


def curve_variants(suite: AblationSuite, scale: str, layout: TableLayout) -> list[str]:
    names = layout.options.get("variants")
    if names is None:
        return [v.id for v in suite.variants if suite.checkpoints_for(v, scale) is not None]
    return [str(n) for n in names]


@register_layout_kind("curve")
class CurveLayout(LayoutKind):
    """Training steps as rows (grouped by system), (benchmark or aggregate, metric) as columns; a figure of
    the learning curves."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        _check_options(layout, suite, OPTIONS)
        labels = layout.options.get("labels")
        if labels is not None and (not isinstance(labels, list) or not labels
                                   or not all(isinstance(x, str) and x for x in labels)):
            raise ConfigError(f"layout {layout.name!r}: 'labels' must be a non-empty list of point names "
                              f"(step order, the finished run last), got {labels!r}")
        variants = curve_variants(suite, scale, layout)
        if not variants:
            raise ConfigError(f"layout {layout.name!r}: no variant of suite {suite.name!r} has 'checkpoints' at "
                              f"scale {scale!r}")
        known = {v.id: v for v in suite.variants}
        for vid in variants:
            if vid not in known:
                raise ConfigError(f"layout {layout.name!r}: unknown variant {vid!r}")
            if suite.checkpoints_for(known[vid], scale) is None:
                raise ConfigError(f"layout {layout.name!r}: variant {vid!r} has no 'checkpoints' at scale {scale!r}")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return curve_table(suite, scale, results_root, layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return curve_figure(suite, scale, results_root, layout)


def curve_points(finished: FinishedSuite, system: System) -> list[tuple[int, int | None]]:
    """``[(step, checkpoint step or None for the finished run), ...]`` in step order."""
    steps, final = finished.steps(system)
    if final is None:
        raise ConfigError(f"{system.id}: the suite summary records no checkpoints for it; rerun the suite "
                          f"(harness run {finished.suite.name} --scale {finished.scale}) to rewrite it")
    return [(s, s) for s in steps] + [(int(final), None)]


def point_labels(layout: TableLayout, points: list[tuple[int, int | None]], system: System) -> list[str]:
    """The row label of each point: the layout's ``labels`` in step order, else ``step N`` (``(final)``)."""
    names = layout.options.get("labels")
    if names is None:
        return [f"step {step}" + ("" if checkpoint is not None else " (final)") for step, checkpoint in points]
    if len(names) != len(points):
        raise ConfigError(f"layout {layout.name!r}: {len(names)} labels for the {len(points)} points of {system.id} "
                          f"(steps {', '.join(str(s) for s, _ in points)})")
    return [f"{name} (step {step})" for name, (step, _) in zip(names, points)]


def curve_table(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
    from harness.stats.replicates import REPLICATE_TEST_NOTE  # lazy (start-up speed): imports scipy
    from reports.comparison import metric_label  # lazy (start-up speed): imports scipy

    finished = FinishedSuite(suite, scale, results_root)
    bench_labels = {b.id: b.label for b in finished.config.benchmarks}
    columns = [Column(f"{c.benchmark}/{c.metric}", c.label or metric_label(c.metric),
                      group=c.group or bench_labels.get(c.benchmark, c.benchmark)) for c in layout.columns]
    decimals = layout.decimals or 1
    rows: list[Any] = []
    means: dict[tuple[int, str], float] = {}
    replicated = False
    for vid in curve_variants(suite, scale, layout):
        for system in systems_of(suite.variant(vid)):
            points = curve_points(finished, system)
            for label, (_, checkpoint) in zip(point_labels(layout, points, system), points):
                cells = {}
                for col in layout.columns:
                    key = f"{col.benchmark}/{col.metric}"
                    mean, sd, values = finished.value(system, col.benchmark, col.metric, checkpoint)
                    replicated = replicated or len(values) > 1
                    cells[key] = value_cell(mean, sd, 100.0, decimals)
                    means[(len(rows), key)] = mean
                rows.append(Row(label, cells, group=system.label))
    notes = [f"Scale {scale}; every value is evaluated from the saved checkpoint of that step (no retraining); "
             "no significance tests."]
    if replicated:
        notes.append(REPLICATE_TEST_NOTE.split(";")[0] + ".")
    caption = layout.caption or f"Suite '{suite.name}' ({scale}): learning curves"
    table = Table(columns=columns, rows=rows, caption=caption, label=f"tab:{suite.name}-{layout.name}-{scale}",
                  notes=notes, decimals=decimals, scale=100.0, row_header="Step")
    return bold_by_value(table, means)


def curve_figure(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
    from reports.comparison import metric_label  # lazy (start-up speed): imports scipy
    from reports.plots import line_ci_figure  # lazy (start-up speed): imports PIL, matplotlib

    finished = FinishedSuite(suite, scale, results_root)
    level = float(layout.options.get("level", 0.95))
    bench_labels = {b.id: b.label for b in finished.config.benchmarks}
    panels: dict[str, dict[str, list[tuple[float, float, float, float]]]] = {}
    for vid in curve_variants(suite, scale, layout):
        for system in systems_of(suite.variant(vid)):
            points = curve_points(finished, system)
            for col in layout.columns:
                panel = f"{col.group or bench_labels.get(col.benchmark, col.benchmark)} " \
                        f"{col.label or metric_label(col.metric)}"
                panels.setdefault(panel, {})[system.label] = [
                    (float(step), *finished.ci(system, col.benchmark, col.metric, checkpoint, level=level))
                    for step, checkpoint in points]
    return line_ci_figure(panels, xlabel="training step", ylabel=f"mean ({int(round(level * 100))}% bootstrap CI)",
                          title=layout.caption or None)
