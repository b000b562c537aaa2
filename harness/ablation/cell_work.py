"""The work of a suite's cells: train one training cell, evaluate one evaluation cell, each under its claim.

A finished cell is never redone: a training cell is done once ``cells/train/<key>/`` holds its done file, an
evaluation cell once ``cells/eval/<key>/`` is a result directory.  Each is claimed
(:mod:`harness.io.claims`) while it is worked on, so concurrent runs, shards and executors on the same
results root wait for it and reuse it; the temporary folders that killed writers left are removed first
(:mod:`harness.io.stale`).  The functions take a :class:`harness.ablation.suite_state.SuiteState` (the
cells, their folders, the loaded benchmarks); :class:`harness.ablation.runner.SuiteRun` calls them.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from harness.ablation.cells import EvalCell, TrainCell
from harness.ablation.paths import eval_cell_dir, train_cell_dir
from harness.ablation.provenance import resolved_settings
from harness.ablation.resolve import require_resolved
from harness.ablation.spec import encoding_kwargs
from harness.ablation.suite_state import SuiteState
from harness.data.collections import load_training_data
from harness.errors import ConfigError
from harness.io.claims import claim
from harness.io.results_layout import TRAIN_DONE_FILE
from harness.io.stale import sweep_stale_temps
from harness.method import get_method
from harness.pipeline import ModelSpec, evaluate_model, protocol_kwargs
from harness.train.result import Checkpoint

log = logging.getLogger("harness.ablation")


def sweep_stale(state: SuiteState) -> list[Path]:
    """Remove the temporary folders that killed writers left in ``cells/train`` and ``cells/eval``
    (only those whose writers are known dead: :func:`harness.io.stale.sweep_stale_temps`)."""
    if not state.train_cells:
        return []
    key = state.train_cells[0].key
    removed = []
    for parent in (train_cell_dir(state.root, key).parent, eval_cell_dir(state.root, key).parent):
        removed += sweep_stale_temps(parent)
    return removed


def train_cell(state: SuiteState, cell: TrainCell) -> Checkpoint | None:
    """Train one cell (or load its finished checkpoint); None for untrained variants."""
    return _trained(state, cell) if cell.trains else None


def _trained(state: SuiteState, cell: TrainCell) -> Checkpoint:
    workdir = state.train_dir(cell)
    sweep_stale_temps(workdir.parent, workdir.name)
    if (workdir / TRAIN_DONE_FILE).exists():
        return Checkpoint.load(workdir)
    # Held while the cell trains (its dependencies too): another `harness run`, shard or executor on
    # this results root waits here and then loads the finished run instead of training it again.
    with claim(workdir, f"training cell {cell.variant.id}"):
        if (workdir / TRAIN_DONE_FILE).exists():
            return Checkpoint.load(workdir)
        sweep_stale_temps(workdir)      # e.g. the final model folder a killed run was writing
        return _train_claimed(state, cell, workdir)


def _train_claimed(state: SuiteState, cell: TrainCell, workdir: Path) -> Checkpoint:
    if state.config.dry_run_only and not _has_gpu():
        raise ConfigError(f"scale {state.scale!r} of suite {state.suite.name!r} is a GPU configuration: "
                          "use --dry-run here, or run it on GPUs with accelerate launch")

    require_resolved(cell.data_entries, f"cell {cell.variant.id}: training data")

    method = get_method(cell.method)
    method.cells_root = state.root / "cells" / "train"
    spec = cell.train_spec.replace(progress=state.progress)
    log.info("training %s (%s, %s steps) in %s", cell.variant.id, cell.method, spec.steps, workdir)
    start = time.perf_counter()
    ckpt = method.train(spec, load_training_data(cell.data_entries), workdir)
    log.info("trained %s in %.1fs", cell.variant.id, time.perf_counter() - start)
    return ckpt


def evaluate_cell(state: SuiteState, cell: EvalCell, ckpt: Checkpoint | None = None) -> Path:
    """Evaluate one (training cell, benchmark) pair unless its result exists; returns its result folder.
    ``ckpt``: the training cell's finished checkpoint, if the caller holds it (else it is loaded or trained)."""
    out = state.eval_dir(cell)
    sweep_stale_temps(out.parent, out.name)        # a killed evaluation's half-written result folder
    if state.is_evaluated(cell):
        return out
    with claim(out, f"evaluating {cell.train.variant.id} on {cell.benchmark.id}"):
        if not state.is_evaluated(cell):     # a process we waited for may have stored it
            _evaluate_claimed(state, cell, out, ckpt)
    return out


def _evaluate_claimed(state: SuiteState, cell: EvalCell, out: Path, ckpt: Checkpoint | None) -> None:
    tc = cell.train
    settings = tc.evaluation
    sparse = {k: settings[k] for k in ("sparse_backend", "quantization") if k in settings}
    encoding = encoding_kwargs(settings.get("encoding") or {})
    # the variant's own prompts win over the card's (and those over the registry's): harness.pipeline.build_encoder
    # applies a card's prompt only where the encoder's keywords leave it unset
    prompts = dict(settings.get("prompts") or {})
    loaded = state.benchmark(cell.benchmark.id)
    if tc.trains:
        ckpt = ckpt or _trained(state, tc)
        if cell.step is not None:
            ckpt = checkpoint_at(state, tc, ckpt, cell.step)
        method = get_method(tc.method)
        encoder = method.encoder(ckpt)
        dense = getattr(encoder, "kind", "dense") == "dense"
        if prompts and not dense:
            raise ConfigError(f"variant {tc.variant.id!r}: 'prompts' sets a dense encoder's prompts; "
                              f"{cell.id} is a {getattr(encoder, 'kind', '?')} model")
        # A trained model saves no prompt and its training lengths (harness.train.model.encoder_settings): the
        # card's prompts and evaluation lengths are the protocol it is evaluated under, as every released
        # model on the card is (harness.pipeline.build_encoder); the variant's own settings win over the card's.
        kwargs = {**protocol_kwargs(loaded.card), **(encoding if dense else {}), **prompts}
        if kwargs:
            encoder = method.encoder(ckpt, **kwargs)
        spec = ModelSpec(cell.id, encoder=encoder, **sparse)
    else:
        spec = ModelSpec(tc.model, **sparse)
        if (encoding or prompts) and not (spec.is_lexical or spec.is_sparse):
            spec.overrides = {**encoding, **prompts}
        elif prompts:
            raise ConfigError(f"variant {tc.variant.id!r}: 'prompts' sets a dense encoder's prompts; {tc.model!r} "
                              "is not a dense model")
    log.info("evaluating %s on %s", cell.id, cell.benchmark.id)
    record: dict[str, Any] = {"suite": state.suite.name, "scale": state.scale, "variant": tc.variant.id,
                              "train_key": tc.key, "benchmark": cell.benchmark.id, "train_config": tc.config}
    if cell.step is not None:
        record["step"] = cell.step
    if settings:
        record["evaluation"] = settings
    if tc.variant_evaluation:       # part of the eval key (harness.ablation.cells.eval_key)
        record["variant_evaluation"] = tc.variant_evaluation
    # every resolved setting of the system and of the stages it trained first, each with its source
    record["settings"] = settings_record(state, tc.system)
    evaluate_model(spec, loaded, out, cache_dir=state.cache_dir, suite_name=cell.benchmark.suite,
                   extra_manifest={"cell": record}, progress=state.progress)


def settings_record(state: SuiteState, system: str) -> list[dict[str, Any]]:
    """The provenance of ``system``'s settings as its results' manifests keep it (computed once per run)."""
    if state.provenance is None:
        state.provenance = {}
        for setting in resolved_settings(state.suite, state.scale):
            entry = dataclasses.asdict(setting)
            state.provenance.setdefault(entry.pop("system"), []).append(entry)
    return state.provenance.get(system, [])


def checkpoint_at(state: SuiteState, cell: TrainCell, final: Checkpoint, step: int) -> Checkpoint:
    """The finished run's intermediate checkpoint of ``step`` as a Checkpoint an encoder loads."""
    # lazy (start-up speed): imports torch, tqdm
    from harness.train.checkpoint import CHECKPOINT_DIR, MODEL_DIR, checkpoint_name

    folder = state.train_dir(cell) / CHECKPOINT_DIR / checkpoint_name(step)
    if not (folder / MODEL_DIR).is_dir():
        raise ConfigError(f"{folder}: training cell {cell.variant.id} kept no checkpoint of step {step} (the run "
                          f"finished before the checkpoints axis asked for it); delete {state.train_dir(cell)} "
                          "to train it again with its checkpoints kept")
    return dataclasses.replace(final, path=folder / MODEL_DIR, step=step)


def run_cell(state: SuiteState, cell: TrainCell) -> None:
    """Train one cell and evaluate it on every benchmark."""
    ckpt = train_cell(state, cell)
    for ec in state.eval_cells:
        if ec.train.key == cell.key:
            evaluate_cell(state, ec, ckpt)


def _has_gpu() -> bool:
    import torch  # lazy (start-up speed): only a GPU-only scale asks

    return torch.cuda.is_available()
