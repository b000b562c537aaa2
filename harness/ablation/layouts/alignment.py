"""Layout kind ``alignment-uniformity``: paper 001's Figure 5(b) (Appendix H), the alignment and uniformity of
pretrained representations on the target corpora, before fine-tuning.

Each entry of ``encoders`` names a model of the suite's training plan: the run of ``variant`` or one of its
stages (``stage``: a path of stage names, ``warmup/coco`` = the COCO pretraining the BM25 warm-up of that variant
starts from), at its ``end`` (the trained model, read from the finished run) or its ``start`` (the model it starts
from: a stage it starts from, else its spec's ``model``).  For paper 001's coco_dr suite at paper scale::

    encoders:
      - {label: Condenser, variant: coco, stage: warmup/coco, point: start}          # COCO's initialisation
      - {label: "COCO-DR w/o COCO (coCondenser)", variant: baseline, stage: warmup, point: start}
      - {label: "COCO-DR (COCO pretrained)", variant: coco, stage: warmup/coco, point: end}

The columns are ``{benchmark, metric}`` with metric ``align`` or ``uniform``.  For each corpus (a benchmark, or
an aggregate: its benchmarks' corpora pooled) ``documents`` documents are sampled, each giving one positive pair:
two distinct chunks as COCO cuts them (:func:`methods.dro_shift.span_pairs`, chunked with the first encoder's
tokenizer so every encoder sees the same texts; ``span_tokens`` / ``early_close``: COCO's released defaults 30 /
0.1).  Each encoder embeds the spans (its run's pooling, ``max_length`` tokens: 128, paper 001 §5.1); the table
has one row per encoder with ``l_align`` over the pairs and ``l_uniform`` over the first spans (Wang and Isola
2020, alpha 2, t 2; lower is better for both) per column, then each one's mean over the corpora.  The figure
plots alignment against uniformity: one marker per encoder (its mean) and small ones per corpus.  Paper 001
prints no numbers for Figure 5(b), so nothing is printed beside ours.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.layout import (
    LayoutKind,
    TableLayout,
    check_column_benchmarks,
    check_known_options,
    register_layout_kind,
)
from harness.ablation.paths import train_cell_dir
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from harness.method import get_method
from harness.method.stages import stage_key
from harness.train.result import Checkpoint
from harness.train.stages import Stage
from methods import dro_shift
from reports.table import Cell, Column, Row, Table

OPTIONS = ("encoders", "documents", "span_tokens", "early_close", "max_length", "seed")
METRICS = ("align", "uniform")
ENCODER_KEYS = ("label", "variant", "stage", "point")
POINTS = ("start", "end")
MEAN_ROW = "Mean"


def _encoders(layout: TableLayout) -> list[dict[str, Any]]:
    return [dict(e) for e in layout.options.get("encoders") or []]


def _stage_path(entry: dict[str, Any]) -> list[str]:
    return [p for p in str(entry.get("stage") or "").split("/") if p]


@register_layout_kind("alignment-uniformity")
class AlignmentUniformityLayout(LayoutKind):
    """Pretrained models (a variant's run or stage, at its start or end) x corpora: alignment and uniformity."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        where = f"layout {layout.name!r}"
        check_known_options(layout, OPTIONS, where)
        encoders = layout.options.get("encoders")
        if not isinstance(encoders, list) or not encoders:
            raise ConfigError(f"{where}: 'encoders' must be a non-empty list of {{label, variant, stage, point}}")
        for entry in encoders:
            check_encoder_entry(entry, suite, where)
        check_column_benchmarks(layout, suite, scale, where)
        for col in layout.columns:
            if col.metric not in METRICS:
                raise ConfigError(f"{where}: column {col.benchmark!r}: metric must be one of {', '.join(METRICS)}, "
                                  f"got {col.metric!r}")
        documents = layout.options.get("documents", 1000)
        if not isinstance(documents, int) or documents < 2:
            raise ConfigError(f"{where}: 'documents' must be an integer >= 2, got {documents!r}")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
        return alignment_table(alignment_points(suite, scale, results_root, layout), layout, labels)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.plots_dro import alignment_uniformity_figure  # lazy (start-up speed): imports matplotlib

        return alignment_uniformity_figure(alignment_points(suite, scale, results_root, layout),
                                           title=layout.caption or None)


def check_encoder_entry(entry: Any, suite: AblationSuite, where: str) -> None:
    """Refuse (ConfigError naming ``where``) an encoder entry that is not ``{label, variant, stage, point}`` of a
    declared variant."""
    if not isinstance(entry, dict) or set(entry) - set(ENCODER_KEYS) or "variant" not in entry:
        raise ConfigError(f"{where}: an encoder is {{label, variant, stage, point}}, got {entry!r}")
    if entry["variant"] not in {v.id for v in suite.variants}:
        raise ConfigError(f"{where}: encoder variant {entry['variant']!r} is not a variant")
    if entry.get("point", "end") not in POINTS:
        raise ConfigError(f"{where}: encoder point must be one of {', '.join(POINTS)}, got {entry.get('point')!r}")


def encoder_model(suite: AblationSuite, scale: str, results_root: str | Path, entry: dict[str, Any],
                  cells: dict[str, Any]) -> tuple[str, Any]:
    """``(model name or folder, the TrainSpec it was trained or is read under)`` of one ``encoders`` entry."""
    variant = str(entry["variant"])
    cell = cells[variant]
    if not cell.trains:
        if _stage_path(entry):
            raise ConfigError(f"encoder {entry!r}: variant {variant!r} trains nothing at {scale!r}, so has no stage")
        return str(cell.model), None
    method, spec, key = get_method(cell.method), cell.train_spec, cell.key
    for name in _stage_path(entry):
        stages = [s for s in method.stages(spec) if isinstance(s, Stage)]
        stage = next((s for s in stages if s.name == name), None)
        if stage is None:
            raise ConfigError(f"encoder {entry!r}: at {scale!r} the {method.name} run of variant {variant!r} has no "
                              f"stage {name!r} (its stages: {', '.join(s.name for s in stages) or 'none'})")
        key = stage_key(method, stage, cell.data_fingerprint)
        method, spec = get_method(stage.method), stage.spec
    if entry.get("point", "end") == "start":
        # the run starts from the model of a stage it starts from (COCO before the warm-up), else its spec's model
        first = next((s for s in method.stages(spec) if isinstance(s, Stage) and s.starts_from), None)
        if first is None:
            return str(spec.model), spec
        key, spec = stage_key(method, first, cell.data_fingerprint), first.spec
    return str(Checkpoint.load(train_cell_dir(results_root, key)).path), spec


def corpus_texts(suite: AblationSuite, scale: str, name: str) -> list[str]:
    """The documents (title + text) of a benchmark, or pooled over an aggregate's benchmarks."""
    config = suite.scale(scale)
    refs = {b.id: b for b in config.benchmarks}
    leaves = config.aggregate_leaves(name) if name in config.aggregates else [name]
    texts: list[str] = []
    for leaf in leaves:
        texts += load_benchmark_ref(refs[leaf], suite.metrics).dataset.corpus.passages()
    return texts


def corpus_span_pairs(suite: AblationSuite, scale: str, corpora: list[str], model: str, opts: dict[str, Any], *,
                      documents: int) -> dict[str, tuple[list[str], list[str]]]:
    """``{corpus: (first spans, second spans)}``: COCO's positive pairs of each corpus
    (:func:`methods.dro_shift.span_pairs`), chunked with ``model``'s tokenizer so that every encoder sees the same
    spans; ``opts``: the layout's ``documents`` (default ``documents``), ``span_tokens`` (30), ``early_close``
    (0.1) and ``seed`` (0)."""
    from transformers import AutoTokenizer  # lazy (start-up speed)

    from harness.encoders.refs import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(model)[0])
    return {name: dro_shift.span_pairs(corpus_texts(suite, scale, name), tokenizer,
                                       documents=int(opts.get("documents", documents)),
                                       span_tokens=int(opts.get("span_tokens", 30)),
                                       early_close=float(opts.get("early_close", 0.1)), seed=int(opts.get("seed", 0)))
            for name in corpora}


def alignment_points(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout
                     ) -> list[dict[str, Any]]:
    """One record per encoder: ``label``, ``model``, ``corpora`` ({corpus: (alignment, uniformity)}) and
    ``pairs`` ({corpus: positive pairs})."""
    from harness.ablation.cells import expand_train_cells  # lazy (start-up speed): loads the training data
    from harness.encoders.hf import load_encoder  # lazy (start-up speed): imports torch

    opts = layout.options
    cells = {c.variant.id: c for c in expand_train_cells(suite, scale)}
    models = [encoder_model(suite, scale, results_root, e, cells) for e in _encoders(layout)]
    max_length = int(opts.get("max_length", 128))
    encoders = [load_encoder(model, pooling=getattr(spec, "pooling", None), doc_max_length=max_length,
                             query_max_length=max_length) for model, spec in models]
    pairs = corpus_span_pairs(suite, scale, list(dict.fromkeys(c.benchmark for c in layout.columns)), models[0][0],
                              opts, documents=1000)
    out = []
    for entry, (model, _), encoder in zip(_encoders(layout), models, encoders):
        label = str(entry.get("label") or f"{entry['variant']} {entry.get('stage') or ''} {entry.get('point', 'end')}")
        out.append({"label": label, "model": model,
                    "corpora": {c: dro_shift.alignment_uniformity(encoder, a, b) for c, (a, b) in pairs.items()},
                    "pairs": {c: len(a) for c, (a, _) in pairs.items()}})
    return out


def alignment_table(points: list[dict[str, Any]], layout: TableLayout, labels: dict[str, str] | None = None
                    ) -> Any:
    """Encoders as rows; each layout column (a corpus and align or uniform), then each metric's mean over the
    layout's corpora."""
    labels = labels or {}
    corpora = list(dict.fromkeys(c.benchmark for c in layout.columns))
    metrics = [m for m in METRICS if any(c.metric == m for c in layout.columns)]
    columns = [Column(f"{c.benchmark}/{c.metric}", c.label or c.metric, higher_is_better=False,
                      group=c.group or labels.get(c.benchmark) or c.benchmark) for c in layout.columns]
    columns += [Column(f"{MEAN_ROW}/{m}", m, group=f"{MEAN_ROW} ({len(corpora)} corpora)", higher_is_better=False)
                for m in metrics]
    rows = []
    for p in points:
        cells = {f"{c.benchmark}/{c.metric}": Cell(p["corpora"][c.benchmark][METRICS.index(c.metric)], decimals=3)
                 for c in layout.columns}
        for m in metrics:
            values = [p["corpora"][c][METRICS.index(m)] for c in corpora]
            cells[f"{MEAN_ROW}/{m}"] = Cell(sum(values) / len(values), decimals=3)
        rows.append(Row(p["label"], cells))
    pairs = ", ".join(f"{labels.get(c, c)}: {n}" for c, n in points[0]["pairs"].items()) if points else ""
    notes = ["Alignment (mean squared distance of positive pairs) and uniformity (log mean exp(-2 squared "
             "distance) over distinct spans) of L2-normalised embeddings (paper 001 Appendix H; Wang and Isola "
             "2020), before fine-tuning; lower is better for both.  Positive pairs: two chunks of one document as "
             f"COCO cuts them (the paper does not say which pairs it uses); pairs per corpus: {pairs}.",
             "Models: " + "; ".join(f"{p['label']} = {p['model']}" for p in points) + "."]
    return Table(columns=columns, rows=rows,
                 caption=layout.caption or "Alignment and uniformity of the pretrained representations",
                 label=f"tab:{layout.name}", notes=notes, decimals=3, scale=1.0, bold_best=False,
                 row_header="Model")
