"""Plots of the DRO methods' per-step trace (iDRO, GroupDRO, their baseline; paper 001).

The trace is ``method/dro_trace.npz`` of a training run (:mod:`methods.clusters`): per optimizer
step, the cluster weights after the update (``weights``), the cluster mean losses of the batch
(``losses``, NaN where a cluster had no sample), the samples per cluster in the batch
(``counts``) and the clusters' sizes among the training queries (``sizes``; they change when
the clusters are recomputed at an episode).  :func:`cluster_weight_figure` draws the weights as a
heat map (clusters x steps) above the cluster losses, the worst-cluster loss and the cluster sizes.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from harness.errors import InputError
from reports.plots import _new_figure

TRACE_KEYS = ("steps", "weights", "losses", "counts", "sizes")


def read_trace(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a ``dro_trace.npz`` (checked: every key present, one row per step, K columns)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no DRO trace here (written by the idro, groupdro and dro-erm methods at the end "
                               "of training)")
    try:
        with np.load(path) as npz:
            trace = {key: np.asarray(npz[key]) for key in npz.files}
    except (OSError, ValueError) as exc:
        raise InputError(path, f"not a readable .npz file: {exc}") from None
    missing = [k for k in TRACE_KEYS if k not in trace]
    if missing:
        raise InputError(path, f"missing array(s) {', '.join(missing)}")
    n, k = trace["weights"].shape if trace["weights"].ndim == 2 else (-1, -1)
    for key in TRACE_KEYS[2:]:
        if trace[key].shape != (n, k):
            raise InputError(path, f"array {key!r} has shape {trace[key].shape}, expected {(n, k)} like 'weights'")
    if trace["steps"].shape != (n,):
        raise InputError(path, f"array 'steps' has shape {trace['steps'].shape}, expected ({n},)")
    return trace


def worst_cluster_loss(trace: dict[str, np.ndarray]) -> np.ndarray:
    """Per step, the highest mean loss among the clusters present in the batch."""
    losses = trace["losses"]
    present = ~np.isnan(losses)
    return np.where(present.any(axis=1), np.nanmax(np.where(present, losses, -np.inf), axis=1), np.nan)


def cluster_weight_figure(trace: dict[str, np.ndarray], title: str | None = None, *, normalise: bool = True,
                          dpi: int = 100):
    """Heat map of the cluster weights over training (normalised per step to sum 1 when ``normalise``:
    iDRO's code weights and greedy GroupDRO's are not a distribution), with the cluster losses, the
    worst-cluster loss and the cluster sizes below."""
    steps, weights = trace["steps"], trace["weights"].astype(float)
    if normalise:
        weights = weights / weights.sum(axis=1, keepdims=True)
    k = weights.shape[1]
    fig = _new_figure(8.0, 7.0, dpi)
    axes = fig.subplots(3, 1, sharex=True, height_ratios=[2.0, 1.4, 1.0])
    extent = (float(steps[0]) - 0.5, float(steps[-1]) + 0.5, k - 0.5, -0.5) if len(steps) else None
    image = axes[0].imshow(weights.T, aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
    fig.colorbar(image, ax=axes[0], label="weight (share)" if normalise else "weight")
    axes[0].set_ylabel("cluster")
    axes[0].set_yticks(range(0, k, max(1, k // 10)))
    axes[0].set_title(title or "Cluster weights over training")
    for c in range(k):
        axes[1].plot(steps, trace["losses"][:, c], lw=0.8, label=f"cluster {c}")
    axes[1].plot(steps, worst_cluster_loss(trace), color="black", lw=1.5, label="worst cluster")
    axes[1].set_ylabel("mean loss")
    if k <= 10:
        axes[1].legend(fontsize="x-small", ncol=min(k + 1, 6))
    sizes = trace["sizes"].astype(float)
    axes[2].stackplot(steps, sizes.T)
    axes[2].set_ylabel("cluster sizes")
    axes[2].set_xlabel("step")
    return fig


def shift_figure(points: list[dict], gaps: list[str], title: str | None = None, *, dpi: int = 100):
    """Paper 001 Figure 2: each target task's score gap (dense minus sparse) against its query intent and its
    document lexical similarity with the source task, one panel each; filled markers ours, crosses the printed
    values.  ``points``: the records of :func:`harness.ablation.layouts.shift.shift_points`."""
    fig = _new_figure(10.0, 4.2, dpi)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key, name in ((axes[0], "query", "query intent similarity"),
                          (axes[1], "documents", "document lexical similarity")):
        for i, gap in enumerate(gaps):
            colour = f"C{i}"
            ours = [(p[key][0], p["gaps"][i][0]) for p in points]
            ax.scatter([x for x, _ in ours], [y for _, y in ours], color=colour, label=f"{gap} (ours)", s=22)
            printed = [(p[key][1], p["gaps"][i][1]) for p in points
                       if p[key][1] is not None and p["gaps"][i][1] is not None]
            if printed:
                ax.scatter([x for x, _ in printed], [y for _, y in printed], color=colour, marker="x",
                           label=f"{gap} (printed)", s=22)
            for p, (x, y) in zip(points, ours):
                ax.annotate(p["label"], (x, y), fontsize=6, alpha=0.7)
        ax.axhline(0.0, color="grey", lw=0.6)
        ax.set_xlabel(f"{name} with the source task")
    axes[0].set_ylabel("gap (dense - sparse)")
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


def alignment_uniformity_figure(points: list[dict], title: str | None = None, *, dpi: int = 100):
    """Paper 001 Figure 5(b): alignment (y) against uniformity (x) of each pretrained model on the target corpora
    (lower is better on both axes: the best models sit at the lower left), a large marker at each model's mean
    over the corpora and small ones per corpus.  ``points``: the records of
    :func:`harness.ablation.layouts.alignment.alignment_points`."""
    fig = _new_figure(5.5, 4.5, dpi)
    ax = fig.subplots()
    for i, p in enumerate(points):
        values = list(p["corpora"].values())
        colour = f"C{i}"
        ax.scatter([u for _, u in values], [a for a, _ in values], color=colour, s=10, alpha=0.4)
        ax.scatter([float(np.mean([u for _, u in values]))], [float(np.mean([a for a, _ in values]))],
                   color=colour, s=70, marker="o", edgecolor="black", label=p["label"])
    ax.set_xlabel(r"$\ell_{uniform}$")
    ax.set_ylabel(r"$\ell_{align}$")
    ax.legend(fontsize=7)
    ax.set_title(title or "Alignment and uniformity before fine-tuning")
    return fig


def coco_gain_figure(points: dict, title: str | None = None, *, dpi: int = 100):
    """Paper 001 Figure 5(a): per target task, the relative reduction of COCO's contrastive loss by COCO
    pretraining (x, %) against the relative zero-shot gain (y, %), one labelled point each, with a least-squares
    line when there are at least two tasks.  ``points``: the record of
    :func:`harness.ablation.layouts.coco_gain.coco_gain_points`."""
    fig = _new_figure(6.0, 4.5, dpi)
    ax = fig.subplots()
    tasks = [t for t in points["tasks"] if np.isfinite(t["reduction"]) and np.isfinite(t["gain"])]
    x = np.array([100.0 * t["reduction"] for t in tasks])
    y = np.array([100.0 * t["gain"] for t in tasks])
    ax.scatter(x, y, s=30, color="C0", label=f"tasks (n = {len(tasks)})")
    for t, xi, yi in zip(tasks, x, y):
        ax.annotate(t["label"], (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if len(tasks) >= 2 and np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
        grid = np.linspace(x.min(), x.max(), 2)
        ax.plot(grid, slope * grid + intercept, color="C3", lw=1.0, label="least-squares fit")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xlabel("reduction of the COCO contrastive loss (%)")
    ax.set_ylabel(f"zero-shot {points['metric']} gain (%)")
    ax.legend(fontsize=7)
    # a layout caption is long: wrapped, not cut at the figure's edge
    ax.set_title(textwrap.fill(title or "COCO: contrastive-loss reduction against zero-shot gain", 70), fontsize=9)
    return fig


def score_size_figure(printed: list[dict], ours: list[dict], *, ylabel: str, title: str | None = None,
                      dpi: int = 100):
    """Paper 001 Figure 1: each system's score against its parameter count (log x axis); crosses the printed
    systems, filled markers ours.  ``printed`` / ``ours``: records ``{label, size, score}`` of
    :func:`harness.ablation.layouts.score_size.score_size_points`."""
    fig = _new_figure(6.0, 4.2, dpi)
    ax = fig.subplots()
    for points, marker, colour, name in ((printed, "x", "C0", "printed"), (ours, "o", "C3", "ours")):
        if not points:
            continue
        ax.scatter([p["size"] for p in points], [p["score"] for p in points], s=30, marker=marker, color=colour,
                   label=name)
        for p in points:
            ax.annotate(p["label"], (p["size"], p["score"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.set_title(title or "Score against model size")
    return fig


def cluster_gain_figure(tasks: list[dict], correlation: dict[str, float], title: str | None = None, *,
                        dpi: int = 100):
    """Paper 001 Figure 5(c): per target task, iDRO's relative training-loss improvement on the nearest source
    query cluster (x, %) against its zero-shot gain on the task (y), one labelled point each; the Pearson and
    Spearman correlations in the legend.  ``tasks``: the records of
    :func:`harness.ablation.layouts.cluster_gain.cluster_gain_points`."""
    fig = _new_figure(6.0, 4.5, dpi)
    ax = fig.subplots()
    x = [100.0 * t["improvement"] for t in tasks]
    y = [t["gain"] for t in tasks]
    r, rho = correlation.get("pearson", float("nan")), correlation.get("spearman", float("nan"))
    ax.scatter(x, y, s=30, color="C0", label=f"tasks (n = {len(tasks)}; Pearson r = {r:.2f}, Spearman ρ = {rho:.2f})")
    for t, xi, yi in zip(tasks, x, y):
        ax.annotate(t["label"], (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if len(set(x)) > 1:       # least-squares line, as a guide to the correlation
        slope, intercept = np.polyfit(x, y, 1)
        ends = np.array([min(x), max(x)])
        ax.plot(ends, slope * ends + intercept, color="C0", lw=0.8, ls="--")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.axvline(0.0, color="grey", lw=0.6)
    metric = tasks[0]["metric"] if tasks else "score"
    ax.set_xlabel("training-loss improvement on the nearest source cluster (%)")
    ax.set_ylabel(f"gain in zero-shot {metric}")
    ax.legend(fontsize=7)
    # a long caption wraps (at drawing time) instead of running off the figure
    ax.set_title(title or "iDRO: source-cluster loss improvement against target gain", fontsize=9, wrap=True)
    return fig
