"""Layout kind ``coco-gain``: paper 001's Figure 5(a) (§5.4 "Pretraining versus Zero-Shot"), the reduction of
COCO's sequence contrastive loss on each target corpus against the zero-shot gain on that task.

Paper 001 §5.4: "we plot the reduction of the sequence contrastive learning loss after using COCO pretraining on
BEIR corpora (versus pretraining only on MARCO corpus), as well as the corresponding zero-shot improvements on
each BEIR task ... On BioASQ, COCO reduces contrastive loss by 50% which yields 22% gains in zero-shot."  The
paper prints no numbers for the figure (only that BioASQ example), so nothing is printed beside ours.

Per target task (a layout column ``{benchmark, metric}``; a benchmark, or an aggregate whose corpora are pooled):

* **loss reduction** ``(L_before - L_after) / L_before``: ``L`` is COCO's loss (:func:`methods.coco.coco_loss`,
  the released loss: dot product, no temperature, in-batch negatives, both directions) over positive pairs cut
  from the corpus as COCO cuts them (:func:`methods.dro_shift.span_pairs`: ``documents`` documents,
  ``span_tokens`` / ``early_close``, chunked with the ``before`` model's tokenizer so both models see the same
  spans).  The loss depends on the batch (its negatives), so the pairs are split into fixed seeded batches of
  ``batch_size`` pairs (2 x ``batch_size`` spans; the incomplete last batch is dropped unless it is the only
  one), the same batches for both models, and ``L`` is the mean of the batch losses.  Each model embeds the
  spans with the pooling and normalisation of the spec it was trained or is read under (``max_length`` tokens:
  128, paper 001 §5.1), without gradients, in eval mode.
* **zero-shot gain** ``(m_with - m_without) / m_without`` of the column's metric, read from the stored
  evaluations of the finished suite (the per-query mean; an aggregate as the results tables form it).

``encoders`` names the two pretrained models with the entry schema of the ``alignment-uniformity`` layout
(:mod:`harness.ablation.layouts.alignment`); ``gain`` the two fine-tuned variants.  For paper 001's coco_dr suite
at paper scale::

    encoders:
      before: {label: "coCondenser (MS MARCO only)", variant: baseline, stage: warmup, point: start}
      after: {label: "COCO pretrained", variant: coco, stage: warmup/coco, point: end}
    gain: {with: coco-idro, without: idro}      # Table 2: Full against -COCO

Defaults: ``documents`` 1024 and ``batch_size`` 128 pairs (a CPU-sized batch; paper 001's COCO batch is about
2,048 spans, 200 per GPU x 8, which a suite at paper scale sets), ``seed`` 0.  The table has one row per task
(the losses, the reduction, the metric without and with, the gain) and the Pearson and Spearman correlations of
reduction and gain across the tasks in its notes (paper 001: "a notable correlation"); the figure plots gain
against reduction, one labelled point per task, with a least-squares line.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.ablation.layout import (
    LayoutKind,
    TableLayout,
    check_column_benchmarks,
    check_known_options,
    register_layout_kind,
)
from harness.ablation.layouts.alignment import check_encoder_entry, corpus_span_pairs, encoder_model
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from reports.table import Cell, Column, Row, Table

OPTIONS = ("encoders", "gain", "documents", "span_tokens", "early_close", "max_length", "seed", "batch_size")
ENCODER_ROLES = ("before", "after")
GAIN_ROLES = ("with", "without")
DEFAULT_GAIN = {"with": "coco-idro", "without": "idro"}     # paper 001 Table 2: Full against -COCO
DEFAULT_DOCUMENTS = 1024
DEFAULT_BATCH = 128
_BATCH_STREAM = 0xC0C05A      # the random stream of the loss batches


def _gain(layout: TableLayout) -> dict[str, str]:
    return {**DEFAULT_GAIN, **dict(layout.options.get("gain") or {})}


def _positive_int(layout: TableLayout, name: str, default: int, least: int) -> int:
    value = layout.options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"layout {layout.name!r}: {name!r} must be an integer >= {least}, got {value!r}")
    return value


@register_layout_kind("coco-gain")
class CocoGainLayout(LayoutKind):
    """Target tasks as rows: COCO's contrastive loss before and after COCO pretraining on the task's corpus, and
    the zero-shot gain of the +COCO row over the row without it (paper 001 Figure 5(a))."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        where = f"layout {layout.name!r}"
        check_known_options(layout, OPTIONS, where)
        encoders = layout.options.get("encoders")
        if not isinstance(encoders, dict) or set(encoders) != set(ENCODER_ROLES):
            raise ConfigError(f"{where}: 'encoders' must be {{before: {{variant, stage, point}}, after: {{...}}}}, "
                              f"got {encoders!r}")
        for role in ENCODER_ROLES:
            check_encoder_entry(encoders[role], suite, f"{where} encoder {role!r}")
        gain = layout.options.get("gain", DEFAULT_GAIN)
        if not isinstance(gain, dict) or set(gain) - set(GAIN_ROLES):
            raise ConfigError(f"{where}: 'gain' must be {{with: variant, without: variant}}, got {gain!r}")
        variants = {v.id for v in suite.variants}
        for role, variant in _gain(layout).items():
            if variant not in variants:
                raise ConfigError(f"{where}: gain {role!r} variant {variant!r} is not a variant of suite "
                                  f"{suite.name!r}")
        check_column_benchmarks(layout, suite, scale, where)
        for col in layout.columns:
            if col.metric not in suite.metrics:
                raise ConfigError(f"{where}: column {col.benchmark!r}: metric {col.metric!r} is not a metric of the "
                                  f"suite ({', '.join(suite.metrics)})")
        if len({c.metric for c in layout.columns}) > 1:
            raise ConfigError(f"{where}: every column must have the same metric (the gain's), got "
                              f"{', '.join(sorted({c.metric for c in layout.columns}))}")
        _positive_int(layout, "documents", DEFAULT_DOCUMENTS, 2)
        _positive_int(layout, "batch_size", DEFAULT_BATCH, 1)

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return coco_gain_table(coco_gain_points(suite, scale, results_root, layout), layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.plots_dro import coco_gain_figure  # lazy (start-up speed): imports matplotlib

        return coco_gain_figure(coco_gain_points(suite, scale, results_root, layout), title=layout.caption or None)


def loss_batches(pairs: int, batch_size: int, seed: int) -> list[list[int]]:
    """Fixed batches of pair indices: a seeded permutation of the ``pairs`` cut into ``batch_size`` pieces, the
    incomplete last one dropped (every batch has as many negatives) unless it is the only one."""
    import numpy as np  # lazy (start-up speed)

    order = [int(i) for i in np.random.default_rng([seed, _BATCH_STREAM]).permutation(pairs)]
    if pairs <= batch_size:
        return [order]
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(pairs // batch_size)]


def contrastive_loss(first: Any, second: Any, batches: list[list[int]]) -> float:
    """Mean over ``batches`` of COCO's loss (:func:`methods.coco.coco_loss`) of the embedded pairs
    ``(first[i], second[i])`` of each batch."""
    import torch  # lazy (start-up speed)

    from methods.coco import coco_loss

    x, y = torch.as_tensor(first), torch.as_tensor(second)
    with torch.no_grad():
        losses = [float(coco_loss(x[b], y[b])) for b in batches]
    return sum(losses) / len(losses)


def loss_reduction(before: float, after: float) -> float:
    """``(before - after) / before``: the relative reduction of the loss (NaN when ``before`` is 0)."""
    return (before - after) / before if before else math.nan


def relative_gain(with_: float, without: float) -> float:
    """``(with_ - without) / without``: the relative zero-shot gain (NaN when ``without`` is 0)."""
    return (with_ - without) / without if without else math.nan


def correlations(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Pearson and Spearman correlations of loss reduction and gain over the tasks where both are finite:
    ``{n, pearson: (r, p), spearman: (rho, p)}`` (``None`` each with fewer than 3 tasks)."""
    pairs = [(p["reduction"], p["gain"]) for p in points if math.isfinite(p["reduction"]) and math.isfinite(p["gain"])]
    out: dict[str, Any] = {"n": len(pairs), "pearson": None, "spearman": None}
    if len(pairs) < 3:
        return out
    from scipy import stats  # lazy (start-up speed)

    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    pearson, spearman = stats.pearsonr(x, y), stats.spearmanr(x, y)
    out["pearson"] = (float(pearson[0]), float(pearson[1]))
    out["spearman"] = (float(spearman[0]), float(spearman[1]))
    return out


def coco_gain_points(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout
                     ) -> dict[str, Any]:
    """``{tasks: [one record per column], encoders: {role: (label, model)}, gain: {role: label}, metric,
    batch_size}``; a task record has ``benchmark``, ``label``, ``before`` / ``after`` (losses), ``reduction``,
    ``without`` / ``with`` (metric means), ``gain``, ``pairs`` and ``batches``."""
    from harness.ablation.axes import FinishedSuite, systems_of  # lazy (start-up speed)
    from harness.ablation.cells import expand_train_cells  # lazy (start-up speed): loads the training data
    from harness.encoders.hf import load_encoder  # lazy (start-up speed): imports torch

    opts = layout.options
    entries = {role: dict(opts["encoders"][role]) for role in ENCODER_ROLES}
    cells = {c.variant.id: c for c in expand_train_cells(suite, scale)}
    models = {role: encoder_model(suite, scale, results_root, e, cells) for role, e in entries.items()}
    max_length = int(opts.get("max_length", 128))
    batch_size = int(opts.get("batch_size", DEFAULT_BATCH))
    seed = int(opts.get("seed", 0))
    # the loss of each model as it was trained or is read: its spec's pooling and normalisation
    encoders = {role: load_encoder(model, pooling=getattr(spec, "pooling", None),
                                   normalize=getattr(spec, "normalize", None), doc_max_length=max_length,
                                   query_max_length=max_length)
                for role, (model, spec) in models.items()}
    corpora = list(dict.fromkeys(c.benchmark for c in layout.columns))
    pairs = corpus_span_pairs(suite, scale, corpora, models["before"][0], opts, documents=DEFAULT_DOCUMENTS)
    losses: dict[str, dict[str, float]] = {}
    batches: dict[str, list[list[int]]] = {}
    for name, (first, second) in pairs.items():
        if len(first) < 2:
            raise ConfigError(f"layout {layout.name!r}: corpus {name!r} gives {len(first)} span pair(s); the "
                              "contrastive loss needs at least 2")
        batches[name] = loss_batches(len(first), batch_size, seed)
        losses[name] = {role: contrastive_loss(enc.encode_docs(first, progress=False),
                                               enc.encode_docs(second, progress=False), batches[name])
                        for role, enc in encoders.items()}
    gain = _gain(layout)
    finished = FinishedSuite(suite, scale, results_root)
    systems = {role: next(iter(systems_of(suite.variant(v)))) for role, v in gain.items()}
    labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
    tasks = []
    for col in layout.columns:
        before, after = losses[col.benchmark]["before"], losses[col.benchmark]["after"]
        values = {role: float(finished.value(s, col.benchmark, col.metric)[0]) for role, s in systems.items()}
        tasks.append({"benchmark": col.benchmark, "label": col.label or labels.get(col.benchmark) or col.benchmark,
                      "before": before, "after": after, "reduction": loss_reduction(before, after),
                      "without": values["without"], "with": values["with"],
                      "gain": relative_gain(values["with"], values["without"]),
                      "pairs": len(pairs[col.benchmark][0]),
                      "batches": [len(b) for b in batches[col.benchmark]]})
    variant_labels = {v.id: v.label for v in suite.variants}
    return {"tasks": tasks, "metric": layout.columns[0].metric if layout.columns else "", "batch_size": batch_size,
            "encoders": {role: (str(entries[role].get("label") or
                                    f"{entries[role]['variant']} {entries[role].get('stage') or ''} "
                                    f"{entries[role].get('point', 'end')}"), models[role][0])
                         for role in ENCODER_ROLES},
            "gain": {role: variant_labels[v] for role, v in gain.items()}}


def _percent(value: float) -> Cell:
    return Cell(100.0 * value if math.isfinite(value) else None, decimals=1)


def coco_gain_table(points: dict[str, Any], layout: TableLayout) -> Any:
    """Tasks as rows: COCO's loss before and after, its relative reduction, the metric without and with COCO and
    the relative gain; the correlations across tasks in the notes."""
    metric = points["metric"]
    without, with_ = points["gain"]["without"], points["gain"]["with"]
    columns = [Column("loss/before", "before", group="COCO loss", higher_is_better=False),
               Column("loss/after", "after", group="COCO loss", higher_is_better=False),
               Column("loss/reduction", "reduction %", group="COCO loss"),
               Column(f"{metric}/without", without, group=f"zero-shot {metric}"),
               Column(f"{metric}/with", with_, group=f"zero-shot {metric}"),
               Column(f"{metric}/gain", "gain %", group=f"zero-shot {metric}")]
    rows = [Row(t["label"], {"loss/before": Cell(t["before"], decimals=4), "loss/after": Cell(t["after"], decimals=4),
                             "loss/reduction": _percent(t["reduction"]),
                             f"{metric}/without": Cell(t["without"], decimals=4),
                             f"{metric}/with": Cell(t["with"], decimals=4), f"{metric}/gain": _percent(t["gain"])})
            for t in points["tasks"]]
    corr = correlations(points["tasks"])
    if corr["pearson"] is None:
        correlation = f"Correlation of reduction and gain: not computed ({corr['n']} task(s); it needs 3)."
    else:
        (r, p_r), (rho, p_rho) = corr["pearson"], corr["spearman"]
        correlation = (f"Correlation of reduction and gain across the {corr['n']} tasks: Pearson r = {r:.3f} "
                       f"(p = {p_r:.3g}), Spearman rho = {rho:.3f} (p = {p_rho:.3g}) (paper 001 §5.4: \"a notable "
                       "correlation\"; it prints no value).")
    (before_label, before_model), (after_label, after_model) = (points["encoders"][r] for r in ENCODER_ROLES)
    sizes = "; ".join(f"{t['label']}: {t['pairs']} pairs, {len(t['batches'])} batch(es)" for t in points["tasks"])
    notes = [f"COCO's contrastive loss (dot product, no temperature, in-batch negatives, both directions) of the "
             f"model before COCO ({before_label} = {before_model}) and after it ({after_label} = {after_model}) on "
             "positive pairs cut from each task's corpus as COCO cuts them, over the same fixed seeded batches of "
             f"{points['batch_size']} pairs for both; reduction = (before - after) / before.  {sizes}.",
             f"Zero-shot gain = ({with_} - {without}) / {without} of the stored {metric} means.",
             correlation,
             "Paper 001 prints no numbers for Figure 5(a): only §5.4's example (BioASQ: loss reduced by 50%, "
             "22% zero-shot gain)."]
    return Table(columns=columns, rows=rows,
                 caption=layout.caption or "COCO's contrastive-loss reduction against the zero-shot gain",
                 label=f"tab:{layout.name}", notes=notes, decimals=4, scale=1.0, bold_best=False, row_header="Task")
