"""Running an ablation suite: train (cached) -> evaluate (cached) -> compare -> table.

Results layout under ``results_root``::

    cells/train/<key>/          one training run per training cell (method workdir, resumable)
    cells/eval/<key>/           one result directory per (training cell, benchmark)
    suites/<suite>/<scale>/     table.md, table.tex, comparisons.json, summary.json
        results/<variant>/<benchmark>/   the cell's result under a stable name (per-query values,
                                         metrics, manifest: hard links to cells/eval/<key>/), the
                                         path regression expectations point at

(the paths come from :mod:`harness.ablation.paths`, shared with the table layouts).

Every directory is written atomically and finished cells are never redone, so a
killed run resumes where it stopped (and removes the temporary folders its killed writers left in
``cells/``: :mod:`harness.io.stale`), and ``--shard i/n`` lets several machines that
share ``results_root`` split the cells.  Each train cell, eval cell and dependency is claimed
(:mod:`harness.io.claims`) while it is worked on: concurrent runs wait for it and reuse it.
The table is produced once every cell of the suite has a result.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ablation.axes import baseline_system, replicate_table, suite_systems
from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.cells import EvalCell, TrainCell, expand_eval_cells, expand_train_cells, shard_filter
from harness.ablation.html_report import write_runner_html
from harness.ablation.layout import LayoutColumn, TableLayout, layout_kind
from harness.ablation.paths import cell_result_dir, eval_cell_dir, report_dir, train_cell_dir
from harness.ablation.resolve import require_resolved
from harness.ablation.spec import AblationSuite, encoding_kwargs
from harness.ablation.validate import validate_plan
from harness.benchmark import LoadedBenchmark
from harness.data.collections import load_training_data
from harness.errors import ConfigError
from harness.io import atomic_dir, atomic_write_json, atomic_write_text
from harness.io.claims import claim
from harness.io.results_layout import (
    COMPARISONS_FILE,
    RESOLVED_SUITE_FILE,
    SUMMARY_FILE,
    TABLE_MD,
    TABLE_TEX,
    TRAIN_DONE_FILE,
)
from harness.io.stale import sweep_stale_temps
from harness.method import get_method
from harness.pipeline import ModelSpec, evaluate_model
from harness.protocol import assert_comparable
from harness.retrieval.seismic import parse_backend
from harness.store import MANIFEST_FILE, METRICS_FILE, PER_QUERY_FILE, RESULT_FILES, is_result_dir, load_result
from harness.train.result import Checkpoint
from reports.latex import render_latex
from reports.markdown import render_markdown

log = logging.getLogger("harness.ablation")


@dataclass
class SuiteOutcome:
    suite: str
    scale: str
    report_dir: Path
    complete: bool
    markdown: str | None = None
    latex: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    main_process: bool = True      # False on the other ranks of a launch: they train, the main one evaluates


class SuiteRun:
    """One suite at one scale over one results root; cells can be run one by one (pytest items)."""

    def __init__(self, suite: AblationSuite, scale: str, results_root: str | Path = "results",
                 cache_dir: str | Path | None = None, progress: bool = True, load_data: bool = True):
        self.suite = suite
        self.scale = scale
        self.config = suite.scale(scale)
        self.root = Path(results_root)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.progress = progress
        self.train_cells: list[TrainCell] = expand_train_cells(suite, scale, load_data=load_data)
        self._benchmarks: dict[str, LoadedBenchmark] = {}
        self._eval_cells: list[EvalCell] | None = None

    # ------------------------------------------------------------------ paths and state
    @property
    def report_dir(self) -> Path:
        return report_dir(self.root, self.suite.name, self.scale)

    def train_dir(self, cell: TrainCell) -> Path:
        return train_cell_dir(self.root, cell.key)

    def eval_dir(self, cell: EvalCell) -> Path:
        return eval_cell_dir(self.root, cell.key)

    def benchmark(self, bid: str) -> LoadedBenchmark:
        if bid not in self._benchmarks:
            ref = next(b for b in self.config.benchmarks if b.id == bid)
            loaded = load_benchmark_ref(ref, self.suite.metrics)
            extra = evaluation_card_fields(self.config.evaluation)
            if extra:      # the scale's evaluation settings hold for every variant: part of the protocol
                loaded.card = loaded.card.with_(extra={**dict(loaded.card.extra), **extra})
            self._benchmarks[bid] = loaded
        return self._benchmarks[bid]

    @property
    def eval_cells(self) -> list[EvalCell]:
        if self._eval_cells is None:
            cards = {b.id: self.benchmark(b.id).card.fingerprint() for b in self.config.benchmarks}
            self._eval_cells = expand_eval_cells(self.train_cells, self.config.benchmarks, cards)
        return self._eval_cells

    def sweep_stale(self) -> list[Path]:
        """Remove the temporary folders that killed writers left in ``cells/train`` and ``cells/eval``
        (only those whose writers are known dead: :func:`harness.io.stale.sweep_stale_temps`)."""
        if not self.train_cells:
            return []
        key = self.train_cells[0].key
        removed = []
        for parent in (train_cell_dir(self.root, key).parent, eval_cell_dir(self.root, key).parent):
            removed += sweep_stale_temps(parent)
        return removed

    def is_trained(self, cell: TrainCell) -> bool:
        return not cell.trains or (self.train_dir(cell) / TRAIN_DONE_FILE).exists()

    def is_trained_key(self, key: str) -> bool:
        """Whether the training run (a cell or a dependency) of ``key`` has finished."""
        return (train_cell_dir(self.root, key) / TRAIN_DONE_FILE).exists()

    def is_evaluated(self, cell: EvalCell) -> bool:
        return is_result_dir(self.eval_dir(cell))

    # ------------------------------------------------------------------ work
    def train(self, cell: TrainCell):
        """Train one cell (or load its finished checkpoint); None for untrained variants."""
        if not cell.trains:
            return None

        workdir = self.train_dir(cell)
        sweep_stale_temps(workdir.parent, workdir.name)
        if (workdir / TRAIN_DONE_FILE).exists():
            return Checkpoint.load(workdir)
        # Held while the cell trains (its dependencies too): another `harness run`, shard or executor on
        # this results root waits here and then loads the finished run instead of training it again.
        with claim(workdir, f"training cell {cell.variant.id}"):
            if (workdir / TRAIN_DONE_FILE).exists():
                return Checkpoint.load(workdir)
            sweep_stale_temps(workdir)      # e.g. the final model folder a killed run was writing
            return self._train_claimed(cell, workdir)

    def _train_claimed(self, cell: TrainCell, workdir: Path):
        if self.config.dry_run_only and not _has_gpu():
            raise ConfigError(f"scale {self.scale!r} of suite {self.suite.name!r} is a GPU configuration: "
                              "use --dry-run here, or run it on GPUs with accelerate launch")

        require_resolved(cell.data_entries, f"cell {cell.variant.id}: training data")

        method = get_method(cell.method)
        method.cells_root = self.root / "cells" / "train"
        spec = cell.train_spec.replace(progress=self.progress)
        log.info("training %s (%s, %s steps) in %s", cell.variant.id, cell.method, spec.steps, workdir)
        start = time.perf_counter()
        ckpt = method.train(spec, load_training_data(cell.data_entries), workdir)
        log.info("trained %s in %.1fs", cell.variant.id, time.perf_counter() - start)
        return ckpt

    def evaluate(self, cell: EvalCell, ckpt=None) -> Path:
        """Evaluate one (training cell, benchmark) pair unless its result exists."""
        out = self.eval_dir(cell)
        sweep_stale_temps(out.parent, out.name)        # a killed evaluation's half-written result folder
        if self.is_evaluated(cell):
            return out
        with claim(out, f"evaluating {cell.train.variant.id} on {cell.benchmark.id}"):
            if not self.is_evaluated(cell):     # a process we waited for may have stored it
                self._evaluate_claimed(cell, out, ckpt)
        return out

    def _evaluate_claimed(self, cell: EvalCell, out: Path, ckpt) -> None:
        tc = cell.train
        settings = tc.evaluation
        sparse = {k: settings[k] for k in ("sparse_backend", "quantization") if k in settings}
        encoding = encoding_kwargs(settings.get("encoding") or {})
        if tc.trains:
            ckpt = ckpt or self.train(tc)
            if cell.step is not None:
                ckpt = self.checkpoint_at(tc, ckpt, cell.step)
            method = get_method(tc.method)
            encoder = method.encoder(ckpt)
            if encoding and getattr(encoder, "kind", "dense") == "dense":
                encoder = method.encoder(ckpt, **encoding)
            spec = ModelSpec(cell.id, encoder=encoder, **sparse)
        else:
            spec = ModelSpec(tc.model, **sparse)
            if encoding and not (spec.is_lexical or spec.is_sparse):
                spec.overrides = encoding
        loaded = self.benchmark(cell.benchmark.id)
        log.info("evaluating %s on %s", cell.id, cell.benchmark.id)
        record: dict[str, Any] = {"suite": self.suite.name, "scale": self.scale, "variant": tc.variant.id,
                                  "train_key": tc.key, "benchmark": cell.benchmark.id, "train_config": tc.config}
        if cell.step is not None:
            record["step"] = cell.step
        if settings:
            record["evaluation"] = settings
        if tc.variant_evaluation:       # part of the eval key (harness.ablation.cells.eval_key)
            record["variant_evaluation"] = tc.variant_evaluation
        evaluate_model(spec, loaded, out, cache_dir=self.cache_dir, suite_name=cell.benchmark.suite,
                       extra_manifest={"cell": record}, progress=self.progress)

    def checkpoint_at(self, cell: TrainCell, final, step: int):
        """The finished run's intermediate checkpoint of ``step`` as a Checkpoint an encoder loads."""
        import dataclasses

        # lazy (start-up speed): imports torch, tqdm
        from harness.train.checkpoint import CHECKPOINT_DIR, MODEL_DIR, checkpoint_name

        folder = self.train_dir(cell) / CHECKPOINT_DIR / checkpoint_name(step)
        if not (folder / MODEL_DIR).is_dir():
            raise ConfigError(f"{folder}: training cell {cell.variant.id} kept no checkpoint of step {step} (the run "
                              f"finished before the checkpoints axis asked for it); delete {self.train_dir(cell)} "
                              "to train it again with its checkpoints kept")
        return dataclasses.replace(final, path=folder / MODEL_DIR, step=step)

    def run_cell(self, cell: TrainCell) -> None:
        """Train one cell and evaluate it on every benchmark."""
        ckpt = self.train(cell)
        for ec in self.eval_cells:
            if ec.train.key == cell.key:
                self.evaluate(ec, ckpt)

    # ------------------------------------------------------------------ report
    def pending(self) -> list[str]:
        return [f"{c.id} x {c.benchmark.id}" for c in self.eval_cells if not self.is_evaluated(c)]

    def report(self) -> SuiteOutcome:
        """Compare every variant with the baseline and write the tables (all cells must be done)."""
        pending = self.pending()
        if pending:
            return SuiteOutcome(self.suite.name, self.scale, self.report_dir, False, pending=pending)

        report, results = self._compare()
        table = self._table(report)
        markdown, latex = render_markdown(table), render_latex(table)
        summary = self._summary(report, results)
        # Two processes finishing the same suite would race to rename the result links into place.
        with claim(self.report_dir, f"tables of {self.suite.name} ({self.scale})"):
            atomic_write_text(self.report_dir / TABLE_MD, markdown)
            atomic_write_text(self.report_dir / TABLE_TEX, latex)
            atomic_write_json(self.report_dir / COMPARISONS_FILE, report.to_dict())
            atomic_write_json(self.report_dir / SUMMARY_FILE, summary)
            self._link_results()
            sections = self._axes_reports()     # sweep and learning-curve tables and plots, if the suite has axes
            if sections:
                markdown = "\n".join([markdown, *sections])
                atomic_write_text(self.report_dir / TABLE_MD, markdown)

            write_runner_html(self)     # html/ next to table.md; a failure is logged as an error, tables stand
        return SuiteOutcome(self.suite.name, self.scale, self.report_dir, True, markdown, latex, summary)

    def _axes_reports(self) -> list[str]:
        """The ``sweep`` and ``curve`` layouts of a suite with those axes, over its aggregates (else every
        benchmark) and metrics: ``sweep.md``/``curve.md`` and their ``.tex``, plots as PNG and PDF; returns the
        Markdown sections appended to ``table.md`` (none for a suite without axes)."""
        from reports.plots import save_figure  # lazy (start-up speed): imports PIL, matplotlib

        cfg = self.config
        targets = list(cfg.aggregates) or [b.id for b in cfg.benchmarks]
        columns = [LayoutColumn(t, m) for t in targets for m in self.suite.metrics]
        kinds = []
        if any(v.sweep is not None for v in self.suite.variants):
            kinds.append(("sweep", "parameter sweeps"))
        if any(self.suite.checkpoints_for(v, self.scale) is not None for v in self.suite.variants):
            kinds.append(("curve", "learning curves"))
        sections = []
        for kind, what in kinds:
            caption = f"Suite '{self.suite.name}' (scale {self.scale}): {what}"
            layout = TableLayout(kind, kind, caption, columns)
            impl = layout_kind(kind)
            impl.check(layout, self.suite, self.scale)
            table = impl.render(self.suite, self.scale, self.root, layout)
            text = render_markdown(table)
            atomic_write_text(self.report_dir / f"{kind}.md", text)
            atomic_write_text(self.report_dir / f"{kind}.tex", render_latex(table))
            save_figure(impl.figure(self.suite, self.scale, self.root, layout), self.report_dir / kind)
            sections.append(text)
        return sections

    def _link_results(self) -> None:
        """Expose every eval cell as ``results/<variant>/<benchmark>`` (content keys are not stable names)."""
        import os
        import shutil

        for cell in self.eval_cells:
            source = self.eval_dir(cell)
            with atomic_dir(cell_result_dir(self.report_dir, cell.id, cell.benchmark.id),
                            is_ours=is_result_dir, what="a harness result", owned=RESULT_FILES) as tmp:
                for name in (PER_QUERY_FILE, METRICS_FILE, MANIFEST_FILE):
                    try:
                        os.link(source / name, tmp / name)
                    except OSError:  # another file system, or links not allowed: copy
                        shutil.copy2(source / name, tmp / name)

    def _compare(self):
        from harness.stats import compare_suite  # lazy (start-up speed): imports scipy
        from harness.stats.replicates import average_replicates  # lazy (start-up speed): imports scipy

        stats = dict(self.suite.stats)
        systems = suite_systems(self.suite)
        labels = {s.id: s.label for s in systems}
        results: dict[str, dict[str, Any]] = {}      # every finished cell, by its own label (the summary)
        compared: dict[str, dict[str, Any]] = {}     # one result per system: replicates averaged per query
        self._replicates: dict[str, dict[str, list[Any]]] = {}
        for b in self.config.benchmarks:
            per_variant = {}
            per_system: dict[str, list[Any]] = {}
            reference = None
            for ec in self.eval_cells:
                if ec.benchmark.id != b.id:
                    continue
                stored = load_result(self.eval_dir(ec))
                if reference is None:
                    reference = stored
                else:
                    assert_comparable(reference.card, stored.card, what=f"results on {b.label}")
                per_variant[ec.train.label if ec.step is None else f"{ec.train.label} @ step {ec.step}"] = stored
                if ec.step is None:
                    per_system.setdefault(ec.train.system, []).append(stored)
            results[b.label] = per_variant
            self._replicates[b.label] = {labels[s]: runs for s, runs in per_system.items() if len(runs) > 1}
            compared[b.label] = {labels[s.id]: (per_system[s.id][0] if len(per_system[s.id]) == 1 else
                                                average_replicates(per_system[s.id], what=f"{s.id} on {b.label}"))
                                 for s in systems}
        options = self.suite.stats_options()
        bench_labels = {b.id: b.label for b in self.config.benchmarks}
        aggregates = {name: [bench_labels.get(m, m) for m in members]
                      for name, members in self.config.aggregates.items()}
        report = compare_suite(compared, self.suite.metrics, baseline=labels[baseline_system(self.suite).id],
                               aggregates=aggregates or None, aggregate_method=stats.get("aggregate", "pooled"),
                               options=options, correction=stats.get("correction", "holm"),
                               alpha=float(stats.get("alpha", 0.05)))
        return report, results

    def _table(self, report):
        from reports.comparison import comparison_table  # lazy (start-up speed): imports scipy

        caption = f"Ablation suite '{self.suite.name}' (scale {self.scale}): variants vs baseline " \
                  f"'{baseline_system(self.suite).label}'; deltas in parentheses."
        table = comparison_table(report, caption=caption, label=f"tab:{self.suite.name}-{self.scale}")
        replicated = getattr(self, "_replicates", {})
        if any(replicated.values()):
            bench_labels = {b.id: b.label for b in self.config.benchmarks}
            aggregates = {name: [bench_labels.get(m, m) for m in members]
                          for name, members in self.config.aggregates.items()}
            table = replicate_table(table, replicated, self.suite.metrics, aggregates, grouped=True)
        return table

    def _summary(self, report, results) -> dict[str, Any]:
        scores = {bench: {variant: stored.metrics for variant, stored in per_variant.items()}
                  for bench, per_variant in results.items()}
        cells = []
        for c in self.train_cells:
            # "dir" is relative to the results root: the summary of the same suite is the same anywhere
            entry: dict[str, Any] = {"variant": c.variant.id, "method": c.method, "key": c.key,
                                     "dir": self.train_dir(c).relative_to(self.root).as_posix() if c.trains else None}
            if c.replicate is not None and (c.system != c.variant.id or c.seed is not None or c.steps):
                entry.update({"declared": c.declared, "system": c.system, "seed": c.seed, "steps": c.steps,
                              "final_step": c.spec.steps if c.spec is not None else None})
            cells.append(entry)
        return {"suite": self.suite.name, "version": self.suite.version, "scale": self.scale,
                "baseline": self.suite.baseline, "metrics": self.suite.metrics, "scores": scores,
                "cells": cells, "correction": report.correction, "test": report.options.test,
                "cards": {bench: next(iter(pv.values())).card.to_dict() for bench, pv in results.items()}}


def evaluation_card_fields(settings: dict[str, Any]) -> dict[str, Any]:
    """Protocol-card ``extra`` fields of evaluation settings that change numbers (defaults add none, so default
    cards keep their fingerprints): a non-fp32 dtype or the int8 backend, a sparse backend other than exact,
    the impact quantisation of lucene-impact."""
    from harness.encoders.hf import encoding_card_fields  # lazy (start-up speed): imports torch, tqdm

    extra = encoding_card_fields(encoding_kwargs(settings.get("encoding") or {}))
    backend = settings.get("sparse_backend")
    if backend is not None and parse_backend(backend)[0] != "exact":
        extra["sparse_backend"] = backend
    if backend is not None and parse_backend(backend)[0] == "lucene-impact":
        extra["impact_quantization"] = settings.get("quantization", "pyserini")
    return extra


def _launch() -> tuple[int, int]:
    """(processes, rank) of a multi-process launch, from the launcher's environment (1, 0 otherwise)."""
    import os

    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def select_cells(runner: SuiteRun, shard: tuple[int, int] = (1, 1), only: list[str] | None = None) -> list[TrainCell]:
    """The training cells of ``--shard`` and ``--only``: a declared variant id selects all its cells, a
    system or cell id selects those; an unknown name is refused."""
    cells = shard_filter(runner.train_cells, shard)
    if only:
        names = {n for c in runner.train_cells for n in (c.variant.id, c.system, c.declared)}
        unknown = sorted(set(only) - names)
        if unknown:
            raise ConfigError(f"--only names unknown variant(s): {', '.join(unknown)}")
        cells = [c for c in cells if {c.variant.id, c.system, c.declared} & set(only)]
    return cells


def run_suite(suite: AblationSuite, scale: str = "tiny", results_root: str | Path = "results", *,
              shard: tuple[int, int] = (1, 1), only: list[str] | None = None,
              cache_dir: str | Path | None = None, progress: bool = True, validate: bool = True) -> SuiteOutcome:
    """Run (or resume) every cell of this shard, then write the table if the suite is complete.

    The whole plan is validated first (:func:`harness.ablation.validate.validate_plan`): every problem
    is reported at once, before the first cell trains or anything is written (``validate=False``: the
    caller did, e.g. with :func:`harness.ablation.validate.load_validated`)."""
    if validate:
        validate_plan(suite, scale)
    runner = SuiteRun(suite, scale, results_root, cache_dir, progress)
    cells = select_cells(runner, shard, only)
    world, rank = _launch()
    if rank == 0:
        runner.sweep_stale()
    if world > 1:
        # Under ``accelerate launch``/``torchrun`` every process trains each cell together (DDP);
        # evaluation and the tables then run on the main process alone, so the other processes
        # never wait in a collective while it encodes corpora.
        for cell in {c.key: c for c in cells}.values():
            runner.train(cell)
        if rank != 0:
            return SuiteOutcome(suite.name, scale, runner.report_dir, False, main_process=False,
                                pending=[f"evaluation runs on the main process (this is rank {rank} of {world})"])
    done_keys: set[str] = set()
    total = len(cells)
    for i, cell in enumerate(cells, start=1):
        if cell.key in done_keys:
            continue
        state = "cached" if runner.is_trained(cell) and all(
            runner.is_evaluated(ec) for ec in runner.eval_cells if ec.train.key == cell.key) else "running"
        log.info("[%d/%d] %s: %s", i, total, cell.variant.id, state)
        runner.run_cell(cell)
        done_keys.add(cell.key)
    outcome = runner.report()
    if outcome.complete:
        _write_json_lock(runner)
    return outcome


def _write_json_lock(runner: SuiteRun) -> None:
    """Record the resolved suite (cells and their configs) next to the table, for provenance."""
    payload = {"suite": runner.suite.raw, "scale": runner.scale,
               "cells": {c.variant.id: {"key": c.key, "config": c.config} for c in runner.train_cells}}
    atomic_write_text(runner.report_dir / RESOLVED_SUITE_FILE, json.dumps(payload, indent=2, default=str) + "\n")
