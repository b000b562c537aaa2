"""Plots for reports: dataset-weight bars, training curves, per-query difference distributions.

Each ``*_figure`` function builds and returns a matplotlib :class:`~matplotlib.figure.Figure`
(so tests and notebooks can inspect the plotted data before anything is written), and
:func:`save_figure` writes it as PNG and PDF atomically.  Figures are made without pyplot
(no global backend or state; rendering uses the Agg canvas), and saved with fixed metadata so
that the same inputs give the same files.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.errors import InputError
from harness.io import atomic_write

_FIXED_METADATA = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}


def _new_figure(width: float, height: float, dpi: int) -> Figure:
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, stem: str | Path, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``fig`` to ``<stem>.png`` and ``<stem>.pdf`` (atomically); returns the paths.

    The size is the figure's (``figsize * dpi`` pixels for PNG): no tight bounding box, so a
    figure of a given size always gives an image of that size.
    """
    stem = Path(stem)
    paths = []
    for fmt in formats:
        if fmt not in _FIXED_METADATA:
            raise ValueError(f"unsupported format {fmt!r} (png, pdf)")
        path = stem.with_name(f"{stem.name}.{fmt}")
        with atomic_write(path, "wb") as handle:
            fig.savefig(handle, format=fmt, dpi=fig.dpi, metadata=_FIXED_METADATA[fmt])
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# dataset weights (paper 000, Figure 3)


def read_weights(path: str | Path) -> dict[str, float]:
    """A ``{"dataset": weight, ...}`` JSON file (e.g. tDRO's learned domain weights)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg}", exc.lineno) from exc
    if not isinstance(data, dict) or not data:
        raise InputError(path, "expected a non-empty JSON object mapping dataset -> weight")
    for name, weight in data.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise InputError(path, f"weight of {name!r} must be a finite number >= 0, got {weight!r}")
    return {name: float(w) for name, w in data.items()}


def dataset_weight_figure(
    weights: Mapping[str, Mapping[str, float]],
    datasets: Sequence[str] | None = None,
    title: str | None = None,
    ylabel: str = "sampling weight",
    reference: float | None = None,
    log_scale: bool = False,
    width: float = 12.0,
    height: float = 4.5,
    dpi: int = 100,
) -> Figure:
    """Grouped bars: datasets on the x-axis, one bar per variant (e.g. uniform, tDRO, ...).

    ``weights`` maps variant -> {dataset -> weight}; every variant must give every dataset
    (write 0 for a dropped one).  ``datasets`` fixes the order (default: first variant's order).
    ``reference`` draws a dashed line, e.g. the uniform weight 1/25.
    """
    if not weights:
        raise ValueError("no variants to plot")
    order = list(datasets) if datasets is not None else list(next(iter(weights.values())))
    for variant, values in weights.items():
        missing = [d for d in order if d not in values]
        extra = [d for d in values if d not in order]
        if missing or extra:
            problem = f"lacks {missing[0]!r}" if missing else f"has {extra[0]!r}, which is not among the datasets"
            raise ValueError(f"variant {variant!r} {problem}")
    fig = _new_figure(width, height, dpi)
    ax = fig.add_subplot()
    n = len(weights)
    bar_width = 0.8 / n
    x = np.arange(len(order))
    for k, (variant, values) in enumerate(weights.items()):
        heights = [float(values[d]) for d in order]
        ax.bar(x - 0.4 + bar_width * (k + 0.5), heights, width=bar_width, label=variant)
    if reference is not None:
        ax.axhline(reference, color="0.3", linestyle="--", linewidth=1, label=f"reference {reference:g}")
    ax.set_xticks(x, order, rotation=60, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.set_ylabel(ylabel)
    if log_scale:
        ax.set_yscale("log")
    else:
        # Headroom above the tallest bar so the legend (drawn at the top) never covers a bar.
        top = max(max(float(v) for v in values.values()) for values in weights.values())
        ax.set_ylim(0, top * (1.15 + 0.1 * ((n + 1) // 4 + 1)))
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, ncols=min(n + (reference is not None), 4), loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    return fig


# ---------------------------------------------------------------------------------------------
# training curves


def read_training_log(path: str | Path, step_key: str = "step") -> list[dict[str, Any]]:
    """Records of a JSONL training log (``{"step": 10, "loss": 2.3, "lr": 1e-4, ...}`` per line).

    Blank lines are skipped; every record needs an integer ``step``.
    """
    path = Path(path)
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"invalid JSON: {exc.msg}", number) from exc
            if not isinstance(record, dict):
                raise InputError(path, "each line must be a JSON object", number)
            step = record.get(step_key)
            if isinstance(step, bool) or not isinstance(step, int):
                raise InputError(path, f"{step_key!r} must be an integer, got {step!r}", number)
            records.append(record)
    return records


def ema(values: npt.ArrayLike, weight: float) -> np.ndarray:
    """Exponential moving average: s_0 = x_0, s_t = w·s_{t-1} + (1-w)·x_t (w = 0: no smoothing)."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    series = np.asarray(values, dtype=np.float64)
    out = np.empty_like(series)
    for i, value in enumerate(series):
        out[i] = value if i == 0 else weight * out[i - 1] + (1.0 - weight) * value
    return out


def scalar_series(records: Sequence[Mapping[str, Any]], scalar: str, step_key: str = "step",
                  run: str = "run") -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one logged scalar, sorted by step.

    A step logged twice (a resumed run rewrites the steps after its last checkpoint) keeps its
    last record; records without the scalar are skipped.
    """
    by_step: dict[int, float] = {}
    for record in records:
        if scalar not in record:
            continue
        value = record[scalar]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"run {run!r}, step {record[step_key]}: {scalar!r} is not a number ({value!r})")
        by_step[int(record[step_key])] = float(value)
    steps = np.array(sorted(by_step), dtype=np.int64)
    return steps, np.array([by_step[s] for s in steps], dtype=np.float64)


def training_curves_figure(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    scalars: Sequence[str] = ("loss",),
    smoothing: float = 0.0,
    step_key: str = "step",
    log_scale: Sequence[str] = (),
    width: float = 8.0,
    height_per_scalar: float = 3.0,
    dpi: int = 100,
    smoothed: Sequence[str] | None = None,
) -> Figure:
    """One panel per scalar (shared step axis), the runs overlaid.

    With ``smoothing`` > 0 each run shows its raw curve faintly and the EMA-smoothed curve on
    top (raw line first, then smoothed, in ``ax.lines``), for the scalars named in ``smoothed``
    (default: all; a schedule such as ``lr`` is better drawn raw).  ``log_scale`` names scalars
    drawn on a log y-axis (e.g. ``lr``).
    """
    if not runs:
        raise ValueError("no runs to plot")
    fig = _new_figure(width, height_per_scalar * len(scalars), dpi)
    axes = fig.subplots(len(scalars), 1, sharex=True, squeeze=False)[:, 0]
    for ax, scalar in zip(axes, scalars):
        plotted = 0
        for k, (name, records) in enumerate(runs.items()):
            steps, values = scalar_series(records, scalar, step_key, name)
            if len(steps) == 0:
                continue
            color = f"C{k % 10}"
            if smoothing > 0 and (smoothed is None or scalar in smoothed):
                ax.plot(steps, values, color=color, alpha=0.3, linewidth=1)
                ax.plot(steps, ema(values, smoothing), color=color, linewidth=1.5, label=name)
            else:
                ax.plot(steps, values, color=color, linewidth=1.5, label=name)
            plotted += 1
        if plotted == 0:
            raise ValueError(f"no run logs {scalar!r}")
        ax.set_ylabel(scalar)
        if scalar in log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[-1].set_xlabel(step_key)
    if smoothing > 0:
        named = "" if smoothed is None else f" ({', '.join(smoothed)})"
        axes[0].set_title(f"EMA smoothing {smoothing:g}{named}", fontsize=9)
    return fig


# ---------------------------------------------------------------------------------------------
# per-query differences


def per_query_differences(a, b, metric: str) -> tuple[list[str], np.ndarray]:
    """(query ids, b − a) for one metric of two :class:`harness.evaluation_result.EvaluationResult`.

    Both must cover the same queries; a mismatch is an error (name the count and an example)
    rather than a silent intersection.
    """
    a_values, b_values = a.metric(metric), b.metric(metric)
    only_a = sorted(set(a_values) - set(b_values))
    only_b = sorted(set(b_values) - set(a_values))
    if only_a or only_b:
        example = (only_a or only_b)[0]
        raise ValueError(f"{metric}: {len(only_a)} queries only in the first result and {len(only_b)} only in "
                         f"the second (e.g. {example!r}); compare results over the same queries")
    ids = list(a.query_ids)
    return ids, np.array([b_values[q] - a_values[q] for q in ids], dtype=np.float64)


def t_interval(differences: npt.ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t confidence interval of the mean difference (the default band in the plot)."""
    from scipy import stats

    d = np.asarray(differences, dtype=np.float64)
    if len(d) < 2:
        raise ValueError("a confidence interval needs at least 2 differences")
    half = stats.t.ppf(0.5 + confidence / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean() - half), float(d.mean() + half)


def per_query_difference_figure(
    differences: Sequence[float],
    ci: tuple[float, float] | None = None,
    confidence: float = 0.95,
    metric: str = "nDCG@10",
    label: str = "B − A",
    bins: int = 30,
    width: float = 10.0,
    height: float = 4.0,
    dpi: int = 100,
) -> Figure:
    """Histogram (left) and sorted per-query bars (right) of per-query differences.

    Both panels mark the mean difference and its confidence interval: ``ci`` as given (e.g. the
    paired bootstrap interval from the statistics module), else a Student-t interval at
    ``confidence``.  Left: ``ax.patches`` are the histogram bins, the first ``ax.lines`` entry
    is the mean.  Right: one bar per query in ascending order, mean as a horizontal line.
    """
    d = np.asarray(differences, dtype=np.float64)
    if len(d) == 0 or not np.all(np.isfinite(d)):
        raise ValueError("differences must be a non-empty array of finite numbers")
    mean = float(d.mean())
    low, high = ci if ci is not None else t_interval(d, confidence)
    band = f"{confidence:.0%} CI" if ci is None else "CI"
    fig = _new_figure(width, height, dpi)
    hist_ax, sorted_ax = fig.subplots(1, 2)

    hist_ax.hist(d, bins=bins, color="C0", alpha=0.8)
    hist_ax.axvline(mean, color="C3", linewidth=1.5, label=f"mean {mean:+.4f}")
    hist_ax.axvspan(low, high, color="C3", alpha=0.15, label=f"{band} [{low:+.4f}, {high:+.4f}]")
    hist_ax.axvline(0.0, color="0.3", linewidth=0.8, linestyle=":")
    hist_ax.set_xlabel(f"{metric} difference ({label})")
    hist_ax.set_ylabel("queries")
    hist_ax.legend(fontsize=8)

    order = np.sort(d)
    colors = np.where(order > 0, "C2", np.where(order < 0, "C3", "0.6"))
    sorted_ax.bar(np.arange(len(order)), order, width=1.0, color=colors)
    sorted_ax.axhline(mean, color="C3", linewidth=1.5)
    sorted_ax.axhspan(low, high, color="C3", alpha=0.15)
    sorted_ax.axhline(0.0, color="0.3", linewidth=0.8, linestyle=":")
    wins, ties, losses = int((d > 0).sum()), int((d == 0).sum()), int((d < 0).sum())
    sorted_ax.set_title(f"{wins} wins / {ties} ties / {losses} losses", fontsize=9)
    sorted_ax.set_xlabel("queries (sorted)")
    sorted_ax.set_ylabel(f"{metric} difference")
    return fig


# ---------------------------------------------------------------------------------------------
# lines with confidence bands (suite sweeps and learning curves)


def line_ci_figure(panels: Mapping[str, Mapping[str, Sequence[tuple[float, float, float, float]]]], *,
                   xlabel: str, ylabel: str = "", title: str | None = None,
                   x_labels: Mapping[float, str] | None = None, log_x: bool = False, scale: float = 100.0,
                   width: float = 4.2, height: float = 3.2, dpi: int = 100) -> Figure:
    """One panel per column (``{panel title: {line name: [(x, mean, low, high), ...]}}``): each line is
    the mean with a shaded band from ``low`` to ``high`` (a CI).  ``x_labels`` names x positions (a
    sweep over strings is plotted at 0, 1, ... with its values as ticks); values are multiplied by
    ``scale`` (fractions shown as percentages)."""
    if not panels:
        raise ValueError("nothing to plot: no panels")
    fig = _new_figure(width * len(panels), height, dpi)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, lines) in zip(axes, panels.items()):
        for line, points in lines.items():
            pts = sorted(points)
            xs = np.array([p[0] for p in pts], dtype=float)
            means, lows, highs = (np.array([p[i] for p in pts], dtype=float) * scale for i in (1, 2, 3))
            drawn = ax.plot(xs, means, marker="o", label=line)
            ax.fill_between(xs, lows, highs, alpha=0.2, color=drawn[0].get_color(), linewidth=0)
        if log_x:
            ax.set_xscale("log")
        if x_labels:
            ax.set_xticks(list(x_labels), [x_labels[x] for x in x_labels])
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    if title:
        fig.suptitle(title)
    return fig
