"""Figures drawn for the report itself: per-query differences of each system against the baseline, and the
training curves of the systems the suite trained."""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.evaluation_result import EvaluationResult
from harness.stats.align import align
from reports.comparison import metric_label
from reports.html.model import Plot, SystemInfo
from reports.plots import (
    per_query_difference_figure,
    per_query_differences,
    read_training_log,
    training_curves_figure,
)

CURVE_SCALARS = ("loss", "lr")          # what every trained run logs (harness.train.logs)


def training_curve_plot(train_logs: Mapping[str, Path]) -> Plot | None:
    """The trained systems' loss and learning rate per step (raw faintly, EMA-smoothed on top), one PNG;
    None when no system was trained (or none logged a step)."""
    runs = {label: records for label, path in train_logs.items() if path.is_file()
            for records in [read_training_log(path)] if records}
    if not runs:
        return None
    smoothing = 0.9 if max(len(r) for r in runs.values()) >= 50 else 0.0
    fig = training_curves_figure(runs, scalars=CURVE_SCALARS, smoothing=smoothing, width=9.0, height_per_scalar=2.6,
                                 dpi=90, smoothed=("loss",))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi, metadata={"Software": None})
    return Plot(f"Training curves: loss and learning rate per step ({len(runs)} trained system(s), from each run's "
                "train_log.jsonl)", "training-curves.png", buffer.getvalue())


def difference_plots(systems: Sequence[SystemInfo], benchmarks: Sequence[str], metric: str,
                     results: Mapping[tuple[str, str], EvaluationResult], missing: str = "error") -> list[Plot]:
    """One PNG per non-baseline system: its per-query ``metric`` differences to the baseline, pooled over
    ``benchmarks`` (histogram and sorted bars, mean with a Student-t 95% interval).  Queries are paired as the
    suite's tests paired them (``missing``: its stats option; ``zero`` scores a query one side did not answer
    as 0)."""
    base = systems[0]
    plots = []
    for system in systems[1:]:
        parts = []
        for bench in benchmarks:
            a, b = results[(base.id, bench)], results[(system.id, bench)]
            if metric in a.per_query and metric in b.per_query:
                if missing == "error":
                    parts.append(per_query_differences(a, b, metric)[1])
                else:
                    parts.append(align(a, b, metric=metric, missing=missing).diff)
        d = np.concatenate(parts) if parts else np.zeros(0)
        if len(d) < 2:
            continue
        fig = per_query_difference_figure(d.tolist(), metric=metric_label(metric),
                                          label=f"{system.label} − {base.label}", width=9.0, height=3.2, dpi=90)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=fig.dpi, metadata={"Software": None})
        slug = "".join(ch if ch.isalnum() else "-" for ch in system.id)
        plots.append(Plot(f"Per-query {metric_label(metric)} differences: {system.label} vs {base.label} "
                          f"({len(d)} queries, {len(parts)} benchmark(s))", f"diff-{slug}.png", buffer.getvalue()))
    return plots
