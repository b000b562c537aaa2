"""Running stages: the runs a method needs before its own, declared as data and scheduled by the engine.

A method does not train anything itself.  It *declares* what it needs (:meth:`Method.stages`) as
:class:`~harness.train.stages.Stage` and :class:`~harness.train.stages.DataStage` values (what they are:
:mod:`harness.train.stages`); this module says when and where they run.

One orchestrator, :func:`train_run`, trains (or reuses) every stage as its own content-keyed run
(claimed, resumable: :mod:`harness.io.claims`), depth first, hands the finished stages to the
method's :meth:`Method.prepare` and then runs the shared :class:`~harness.train.trainer.Trainer`.
The suite runner, the executors' unit graph (``--emit-cells``), ``harness train`` and dry runs all
read the same declarations (:func:`flatten_stages`), so what a dry run shows is what is trained.

Where stages live: a runner sets ``cells_root`` (its ``cells/train``): training stages are cells
there, shared with identical suite cells, and data stages live beside it (``cells/<stage name>``).
Without one (``harness train``, the Python API), training stages go into ``<workdir>/deps/<key>``
and data stages into the cache root.

Torch-free: dry runs and the CLI read declarations without importing torch.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.encoders.cache import cache_root
from harness.io import atomic_write_json
from harness.io.claims import claim
from harness.keys import content_key
from harness.method.compose import Composed, compose
from harness.method.portable import portable_paths
from harness.train.outdir import DEPS_DIR, check_training_folder
from harness.train.result import DONE_FILE, Checkpoint
from harness.train.stages import DataStage, Stage, StageResult

if TYPE_CHECKING:
    from harness.data.collections import TrainingData
    from harness.method import Method
    from harness.train.spec import TrainSpec

log = logging.getLogger(__name__)

STAGE_RECORD_SUFFIX = ".stage.json"


@dataclass(frozen=True)
class PlannedStage:
    """One stage of a flattened plan: its unit key and the keys of the stages it needs first."""

    key: str
    owner: str                      # the method that declared it
    stage: Stage | DataStage
    needs: tuple[str, ...] = ()
    owner_spec: TrainSpec | None = None   # the owner's spec (data stages are built by the owner)

    @property
    def label(self) -> str:
        return self.stage.label


def stage_key(owner: Method, stage: Stage | DataStage, data_fingerprint: str | None) -> str:
    """The content key of a stage: a training stage's run key (shared with an identical suite cell),
    a data stage's key over its owner, name, config and the data."""
    if isinstance(stage, Stage):
        return owner.run_key(stage.method, stage.spec, data_fingerprint)
    # the config as portable paths (harness.method.portable): a data stage keys like a training run
    config: dict[str, Any] = {"owner": owner.name, "stage": stage.name, "config": portable_paths(dict(stage.config)),
                              "data": data_fingerprint}
    if owner.revision > 1:
        config["revision"] = owner.revision
    return content_key(config)


def flatten_stages(method: Method, spec: TrainSpec, data_fingerprint: str | None) -> list[PlannedStage]:
    """Every stage ``method`` needs under ``spec``, those of its stages' methods first (depth first),
    each once, in the order :func:`train_run` runs them."""
    out: dict[str, PlannedStage] = {}

    def visit(owner: Method, owner_spec: TrainSpec) -> list[str]:
        keys: list[str] = []
        for stage in owner.stages(owner_spec):
            needs: list[str] = []
            if isinstance(stage, Stage):
                needs = visit(owner.named(stage.method), stage.spec)
            key = stage_key(owner, stage, data_fingerprint)
            if key not in out:
                out[key] = PlannedStage(key, owner.name, stage, tuple(dict.fromkeys([*keys, *needs])), owner_spec)
            keys.append(key)
        return keys

    visit(method, spec)
    return list(out.values())


def stage_roots(workdir: str | Path, cells_root: Path | None) -> Path:
    """Where training stages live: the runner's ``cells_root``, else ``<workdir>/deps`` (checked first:
    a folder that is not the harness's is refused before anything is written into it)."""
    if cells_root is not None:
        return Path(cells_root)
    check_training_folder(workdir)
    return Path(workdir) / DEPS_DIR


def data_stage_root(stage: DataStage, cells_root: Path | None) -> Path:
    """Where a data stage builds: beside the runner's training cells, else under the cache root."""
    if cells_root is not None:
        return Path(cells_root).parent / stage.name

    return cache_root() / stage.name


def run_stages(method: Method, spec: TrainSpec, data: TrainingData, workdir: str | Path,
               cells_root: Path | None = None) -> tuple[dict[str, StageResult], list[Path]]:
    """Train (or reuse) and build every stage ``method`` declares under ``spec``, in order.

    Returns the finished stages by name and the training-stage run folders (those of the stages'
    own stages included)."""
    results: dict[str, StageResult] = {}
    dependency_runs: list[Path] = []
    for stage in method.stages(spec):
        if isinstance(stage, Stage):
            result, deps = _train_stage(method, stage, spec, data, stage_roots(workdir, cells_root))
            dependency_runs += [*deps, result.path]
        else:
            result = build_data_stage(method, stage, spec, data, cells_root)
        results[stage.name] = result
    return results, dependency_runs


def _train_stage(owner: Method, stage: Stage, owner_spec: TrainSpec, data: TrainingData,
                 root: Path) -> tuple[StageResult, list[Path]]:
    method = owner.named(stage.method)
    run_dir = root / stage_key(owner, stage, data.fingerprint())
    spec = stage.spec.replace(progress=owner_spec.progress)
    runner = _validated(method, spec)
    # Claimed around the stage's own stages and data too: a process that waited here finds the run done.
    with claim(run_dir, f"stage {stage.label} of {owner.name}"):
        ckpt, deps = _train_claimed(method, runner, spec, data, run_dir, cells_root=root)
    return StageResult(stage, run_dir, ckpt), deps


def build_data_stage(owner: Method, stage: DataStage, spec: TrainSpec, data: TrainingData,
                     cells_root: Path | None) -> StageResult:
    """Build (or find built) a data stage of ``owner`` and record it as built."""
    root = data_stage_root(stage, cells_root)
    key = stage_key(owner, stage, data.fingerprint())
    record = _record(owner, stage, data.fingerprint(), cells_root)
    with claim(root / key, f"{stage.label} for {owner.name}"):
        # The owner keys its own pieces (e.g. one mined pool per source) under ``root``: building again
        # reuses what exists, so the record (named by the key) only saves the scan.
        if not record.is_file():
            owner.build_stage(stage, spec, data, root)
            atomic_write_json(record, {"key": key, "owner": owner.name, "stage": stage.name,
                                       "config": dict(stage.config), "data": data.fingerprint()})
    return StageResult(stage, root)


def _record(owner: Method, stage: DataStage, data_fingerprint: str | None, cells_root: Path | None) -> Path:
    """The file that records a data stage as built for this data."""
    key = stage_key(owner, stage, data_fingerprint)
    return data_stage_root(stage, cells_root) / f"{key}{STAGE_RECORD_SUFFIX}"


def is_built(owner: Method, stage: DataStage, data_fingerprint: str | None, cells_root: Path | None) -> bool:
    """Whether a data stage was built for this data (its record exists)."""
    return _record(owner, stage, data_fingerprint, cells_root).is_file()


def train_run(method: Method, spec: TrainSpec, data: TrainingData, workdir: str | Path,
              cells_root: Path | None = None) -> Checkpoint:
    """Train ``method``'s run in ``workdir`` after its stages (or resume it, or return it finished).

    ``method.validate(spec)`` refuses a configuration before anything is loaded or written; the
    stages are trained or built (:func:`run_stages`); a ``starts_from`` stage's model becomes the
    run's starting model; ``method.prepare`` turns the stages into the data, the dataset weights and
    the values its hooks read; then the shared trainer runs.  One process per run folder at a time:
    a waiter resumes or reuses what the holder left."""
    runner = _validated(method, spec)
    check_training_folder(workdir)      # a user's folder is refused before its claim file or any stage is written
    with claim(workdir, f"training {method.name}"):
        ckpt, _ = _train_claimed(method, runner, spec, data, Path(workdir), cells_root)
    return ckpt


def _validated(method: Method, spec: TrainSpec) -> Method | Composed:
    """What the trainer runs for ``method`` under ``spec`` (around another method's per-sample loss when the
    options name a ``base``: harness.method.compose), refused before anything is loaded or written."""
    runner = compose(method, method.resolve_options(dict(spec.method_options)))
    runner.validate(spec)
    return runner


def _train_claimed(method: Method, runner: Method | Composed, spec: TrainSpec, data: TrainingData,
                   workdir: Path, cells_root: Path | None) -> tuple[Checkpoint, list[Path]]:
    from harness.train.trainer import Trainer  # lazy (start-up speed): imports torch

    results, deps = run_stages(method, spec, data, workdir, cells_root)
    for result in results.values():
        if isinstance(result.stage, Stage) and result.stage.starts_from:
            spec = spec.replace(model=str(result.model))
    prepared = method.prepare(spec, data, results)
    if not (workdir / DONE_FILE).exists():
        log.info("training %s in %s", method.name, workdir)
    trainer = Trainer(spec, prepared.data, workdir, method=runner, stages=results, prepared=prepared,
                      dependency_runs=deps)
    return trainer.run(), deps


def describe_stages(method: Method, spec: TrainSpec, data_fingerprint: str | None) -> list[dict[str, Any]]:
    """The flattened stages as JSON-able entries (``harness train --dry-run``): what each trains or builds."""
    out = []
    for planned in flatten_stages(method, spec, data_fingerprint):
        stage = planned.stage
        entry: dict[str, Any] = {"name": stage.name, "label": stage.label, "key": planned.key,
                                 "declared_by": planned.owner, "needs": list(planned.needs)}
        if isinstance(stage, Stage):
            entry.update({"method": stage.method, "steps": stage.spec.steps, "model": stage.spec.model,
                          "starts_from": stage.starts_from, "spec_fingerprint": stage.spec.fingerprint()})
        else:
            entry["config"] = dict(stage.config)
        out.append(entry)
    return out


__all__ = ["PlannedStage", "build_data_stage", "describe_stages", "flatten_stages", "is_built", "run_stages",
           "stage_key", "train_run"]
