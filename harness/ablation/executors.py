"""Suite grids as a graph of units that any scheduler can run: locally, through submitit (Slurm job
arrays, local subprocesses without Slurm) or Ray.

A suite at one scale expands into three kinds of *units*, each keyed by its content key:

``dependency``  a stage a method declares before its own run (tDRO's reference and stage 1, a COCO-pretrained
                model, mined negatives, ...), from :meth:`harness.method.Method.stages`
                (:func:`harness.method.stages.flatten_stages`);
``train``       a training cell (after its dependencies);
``eval``        an evaluation cell (after its training cell).

A unit's dependencies come from the same planner the dry run prints; :func:`waves` orders units into
waves whose members need only earlier waves.  Every unit is run by :func:`run_unit` (``harness
run-cell KEY``), which goes through the runner's claims (:mod:`harness.io.claims`): whatever runs the
units (executors, static shards, concurrent ``harness run`` processes), each run is trained once.

Why units and not whole cells: a scheduler sees each GPU job, its estimate and what it waits for, and
a dependency shared by several cells is one job, not a race.  The table is always built by the
process that launched the grid (:meth:`harness.ablation.runner.SuiteRun.report`).
"""
from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ablation.cells import TrainCell
from harness.ablation.resolve import require_resolved
from harness.ablation.runner import SuiteRun
from harness.ablation.validate import load_validated
from harness.data.collections import load_training_data
from harness.errors import ConfigError
from harness.io.paths import child_of
from harness.method import get_method
from harness.method.stages import PlannedStage, build_data_stage, flatten_stages, is_built, stage_key
from harness.train.plan import estimate_gpu_hours
from harness.train.stages import Stage

log = logging.getLogger("harness.ablation")

EXECUTORS = ("local", "submitit", "ray")
KINDS = ("dependency", "train", "eval")


@dataclass
class Unit:
    """One schedulable piece of a suite: a dependency run, a training cell or an evaluation cell."""

    key: str
    kind: str                       # one of KINDS
    label: str                      # who it is for humans: variant, variant/dependency, variant x benchmark
    method: str | None
    depends_on: list[str] = field(default_factory=list)
    gpu_hours: float | None = None
    done: bool = False
    # what run_unit needs (not serialised)
    cell: Any = None                # TrainCell (train, dependency owner) or EvalCell
    dependency: Any = None          # harness.train.stages.PlannedStage of a dependency unit


def build_units(runner: SuiteRun, cells: Sequence[TrainCell] | None = None, *,
                evaluations: bool = True) -> list[Unit]:
    """The units of ``cells`` (default: every training cell of the run), dependencies before the runs
    that need them; ``evaluations=False`` leaves the eval cells out (they need the benchmarks loaded)."""
    cells = list(runner.train_cells if cells is None else cells)
    units: dict[str, Unit] = {}
    train_keys = {c.key for c in runner.train_cells if c.trains}
    cells_root = runner.root / "cells" / "train"
    for cell in cells:
        if not cell.trains or cell.key in units:
            continue
        method = get_method(cell.method)
        needs: list[str] = []
        for planned in flatten_stages(method, cell.train_spec, cell.data_fingerprint):
            stage = planned.stage
            if planned.key not in units and planned.key not in train_keys:
                if isinstance(stage, Stage):
                    hours = estimate_gpu_hours(stage.spec, get_method(stage.method), stage.frozen_forwards)
                    done = runner.is_trained_key(planned.key)
                else:
                    owner = get_method(planned.owner)
                    hours, done = None, is_built(owner, stage, cell.data_fingerprint, cells_root)
                units[planned.key] = Unit(planned.key, "dependency", f"{cell.variant.id}/{planned.label}",
                                          stage.method if isinstance(stage, Stage) else planned.owner,
                                          list(planned.needs), hours, done, cell, planned)
            if planned.key not in needs:
                needs.append(planned.key)
        units[cell.key] = Unit(cell.key, "train", cell.variant.id, cell.method, needs,
                               estimate_gpu_hours(cell.train_spec, method),
                               runner.is_trained(cell), cell)
    for cell in cells:
        # a dependency that is also a cell of the suite (not selected here) still comes first
        for key in units.get(cell.key, Unit("", "", "", None)).depends_on:
            if key not in units and key in train_keys:
                other = next(c for c in runner.train_cells if c.key == key)
                units.update({u.key: u for u in build_units(runner, [other], evaluations=False)})
    if evaluations:
        selected = {c.key for c in cells}
        for ec in runner.eval_cells:
            if ec.train.key not in selected or ec.key in units:
                continue
            units[ec.key] = Unit(ec.key, "eval", f"{ec.id} x {ec.benchmark.id}", ec.train.method,
                                 [ec.train.key] if ec.train.trains else [], None, runner.is_evaluated(ec), ec)
    return _topological(list(units.values()))


def _topological(units: list[Unit]) -> list[Unit]:
    by_key = {u.key: u for u in units}
    order: list[Unit] = []
    state: dict[str, int] = {}

    def visit(u: Unit) -> None:
        if state.get(u.key) == 2:
            return
        if state.get(u.key) == 1:
            raise ConfigError(f"units depend on each other in a cycle at {u.label} ({u.key})")
        state[u.key] = 1
        for k in u.depends_on:
            if k in by_key:
                visit(by_key[k])
        state[u.key] = 2
        order.append(u)

    for u in units:
        visit(u)
    return order


def waves(units: Sequence[Unit]) -> list[list[Unit]]:
    """Units grouped so that each wave needs only units of earlier waves (finished units count as wave 0)."""
    level: dict[str, int] = {}
    for u in _topological(list(units)):
        level[u.key] = 1 + max((level.get(k, -1) for k in u.depends_on), default=-1)
    out: list[list[Unit]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for u in units:
        out[level[u.key]].append(u)
    return out


# ---------------------------------------------------------------------- running one unit
def run_unit(runner: SuiteRun, unit: Unit) -> None:
    """Run one unit in this process (claimed: a unit someone else runs is waited for and reused)."""
    if unit.kind == "train":
        runner.train(unit.cell)
    elif unit.kind == "eval":
        runner.evaluate(unit.cell)
    elif unit.kind == "dependency":
        cell: TrainCell = unit.cell
        planned: PlannedStage = unit.dependency
        require_resolved(cell.data_entries, f"cell {cell.variant.id}: training data")
        data = load_training_data(cell.data_entries)
        owner = get_method(planned.owner)
        if stage_key(owner, planned.stage, data.fingerprint()) != unit.key:
            raise ConfigError(f"dependency {unit.label}: its data changed since the plan was made ({unit.key})")
        cells_root = runner.root / "cells" / "train"
        stage = planned.stage
        if isinstance(stage, Stage):
            # a training stage is a run like any other, keyed and claimed in the runner's cells
            method = get_method(stage.method)
            method.cells_root = cells_root
            method.train(stage.spec.replace(progress=runner.progress), data, cells_root / unit.key)
        else:
            assert planned.owner_spec is not None
            owner.cells_root = cells_root
            build_data_stage(owner, stage, planned.owner_spec, data, cells_root)
    else:  # pragma: no cover - KINDS is closed
        raise ConfigError(f"unknown unit kind {unit.kind!r}")


def find_unit(runner: SuiteRun, key: str) -> Unit:
    """The unit of ``key`` in the run (a key prefix of 8+ characters is enough if it is unique)."""
    found: list[Unit] = []
    for evaluations in (False, True):       # eval cells need the benchmarks loaded: only if needed
        units = build_units(runner, evaluations=evaluations)
        exact = [u for u in units if u.key == key]
        found = exact or ([u for u in units if u.key.startswith(key)] if len(key) >= 8 else [])
        if found:
            break
    if len(found) == 1:
        return found[0]
    if not found:
        raise ConfigError(f"no cell or dependency with key {key!r} in suite {runner.suite.name!r} at scale "
                          f"{runner.scale!r} (harness run {runner.suite.name} --emit-cells lists them)")
    raise ConfigError(f"key prefix {key!r} matches {len(found)} units; give more of it")


# ---------------------------------------------------------------------- commands
def cell_command(suite_arg: str, scale: str, results_root: Path, cache_dir: Path | None, key: str) -> list[str]:
    """The ``harness run-cell`` command line of one unit (the current interpreter, so any environment works)."""
    cmd = [sys.executable, "-m", "harness", "run-cell", key, "--suite", suite_arg, "--scale", scale,
           "--results-root", str(results_root), "--no-progress"]
    if cache_dir is not None:
        cmd += ["--cache-dir", str(cache_dir)]
    return cmd


def suite_argument(name_or_path: str) -> str:
    """A suite argument that works from any directory: a shipped suite's name, else an absolute path."""
    path = Path(name_or_path)
    return str(path.resolve()) if path.suffix else str(name_or_path)


def emit_cells(runner: SuiteRun, units: Sequence[Unit], suite_arg: str) -> dict[str, Any]:
    """The grid as JSON for an outside scheduler: units in a runnable order with their dependencies,
    waves, GPU-hour estimates and the command that runs each; ``report_command`` builds the table last."""
    root = runner.root.resolve()
    cache = runner.cache_dir.resolve() if runner.cache_dir else None
    grouped = waves(units)
    wave_of = {u.key: i for i, wave in enumerate(grouped) for u in wave}
    cells = []
    for u in units:
        cmd = cell_command(suite_arg, runner.scale, root, cache, u.key)
        cells.append({"key": u.key, "kind": u.kind, "label": u.label, "method": u.method,
                      "depends_on": list(u.depends_on), "wave": wave_of[u.key],
                      "gpu_hours": None if u.gpu_hours is None else round(u.gpu_hours, 3),
                      "status": "done" if u.done else "pending", "command": cmd, "shell": shlex.join(cmd)})
    report = [sys.executable, "-m", "harness", "run", suite_arg, "--scale", runner.scale,
              "--results-root", str(root), "--no-progress"] + (["--cache-dir", str(cache)] if cache else [])
    hours = [u.gpu_hours for u in units if u.gpu_hours is not None and u.kind != "eval"]
    return {"schema": "harness.cells/1", "suite": runner.suite.name, "version": runner.suite.version,
            "scale": runner.scale, "results_root": str(root), "cells": cells,
            "waves": [[u.key for u in wave] for wave in grouped],
            "estimated_gpu_hours": round(sum(hours), 3) if hours else None,
            "report_command": report, "report_shell": shlex.join(report)}


# ---------------------------------------------------------------------- executors
JobFunction = Callable[[str, str, str, "str | None", str], str]


def run_cell_job(suite_arg: str, scale: str, results_root: str, cache_dir: str | None, key: str) -> str:
    """The function a submitit/Ray job runs: one unit by key, in a fresh process (or on another node)."""
    suite = load_validated(suite_arg, scale)
    runner = SuiteRun(suite, scale, results_root, cache_dir, progress=False)
    unit = find_unit(runner, key)
    run_unit(runner, unit)
    return unit.key


@dataclass
class GridOptions:
    suite_arg: str
    scale: str
    results_root: Path
    cache_dir: Path | None
    workers: int = 1
    folder: Path | None = None       # submitit's logs and pickles (default: <results root>/submitit)
    timeout_min: int = 24 * 60
    gpus_per_job: int = 1
    slurm_partition: str | None = None
    # what a submitit/Ray job calls with (suite_arg, scale, results_root, cache_dir, key): tests time the
    # scheduling with a trivial one; it must be importable (or picklable) where the jobs run
    job: JobFunction = run_cell_job


Failures = list[tuple[Unit, str]]


def run_grid(runner: SuiteRun, units: Sequence[Unit], executor: str, options: GridOptions,
             progress: Callable[[str], None] | None = None) -> None:
    """Run every pending unit wave by wave on ``executor``; raise naming the units that failed."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if options.workers < 1:
        raise ConfigError(f"--workers {options.workers}: expected >= 1")
    say = progress or (lambda message: log.info("%s", message))
    # Ray is connected once for the whole grid (a local instance takes seconds to start), lazily: a grid
    # with nothing left to run starts nothing
    ray_grid = _RayGrid(options, say) if executor == "ray" else None
    submit: Callable[[SuiteRun, list[Unit], GridOptions], Failures] = (
        ray_grid.run if ray_grid is not None else {"local": _local, "submitit": _submitit}[executor])
    try:
        for i, wave in enumerate(waves(units), start=1):
            pending = [u for u in wave if not u.done and not _finished(runner, u)]
            if not pending:
                continue
            say(f"wave {i}: {len(pending)} unit(s) on {executor} ({', '.join(sorted({u.kind for u in pending}))})")
            start = time.perf_counter()
            failures = submit(runner, pending, options)
            if failures:
                lines = "; ".join(f"{u.label} ({u.kind} {u.key[:12]}): {why}" for u, why in failures)
                raise ConfigError(f"{len(failures)} unit(s) failed in wave {i}: {lines}")
            say(f"wave {i} done in {time.perf_counter() - start:.1f}s")
    finally:
        if ray_grid is not None:
            ray_grid.close()


def _finished(runner: SuiteRun, unit: Unit) -> bool:
    if unit.kind == "eval":
        return runner.is_evaluated(unit.cell)
    planned = unit.dependency
    if planned is not None and not isinstance(planned.stage, Stage):
        return is_built(get_method(planned.owner), planned.stage, unit.cell.data_fingerprint,
                        runner.root / "cells" / "train")
    return runner.is_trained_key(unit.key)


def _local(runner: SuiteRun, units: list[Unit], options: GridOptions) -> Failures:
    """One worker: in this process; more: ``harness run-cell`` subprocesses, ``workers`` at a time."""
    if options.workers == 1:
        for u in units:
            run_unit(runner, u)
        return []
    import subprocess

    def one(u: Unit) -> tuple[Unit, str] | None:
        cmd = cell_command(options.suite_arg, options.scale, options.results_root, options.cache_dir, u.key)
        done = subprocess.run(cmd, capture_output=True, text=True)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return u, last
        return None

    with ThreadPoolExecutor(max_workers=options.workers) as pool:
        return [f for f in pool.map(one, units) if f is not None]


def _submitit(runner: SuiteRun, units: list[Unit], options: GridOptions) -> Failures:
    """A job array per wave through submitit's AutoExecutor: Slurm where ``sbatch`` is found, else local
    subprocesses (at most ``workers`` at a time)."""
    try:
        import submitit
    except ImportError:
        raise ConfigError("--executor submitit needs the optional extra 'cluster' "
                          "(pip install 'retrieval-harness[cluster]', or scripts/setup.sh --dev)") from None
    folder = options.folder or child_of(options.results_root, "submitit", runner.suite.name, runner.scale,
                                        what="suite or scale name")
    executor = submitit.AutoExecutor(folder=str(folder))
    params: dict[str, Any] = {"name": f"harness-{runner.suite.name}", "timeout_min": options.timeout_min}
    if executor.cluster == "slurm":
        params.update(slurm_array_parallelism=options.workers, gpus_per_node=options.gpus_per_job)
        if options.slurm_partition:
            params["slurm_partition"] = options.slurm_partition
        batches = [units]
    else:
        # the local executor starts every job of an array at once: hand it `workers` at a time
        batches = [units[i:i + options.workers] for i in range(0, len(units), options.workers)]
    executor.update_parameters(**params)
    failures: Failures = []
    root, cache = str(options.results_root), str(options.cache_dir) if options.cache_dir else None
    for batch in batches:
        jobs = executor.map_array(worker_job, [options.job] * len(batch), [options.suite_arg] * len(batch),
                                  [options.scale] * len(batch), [root] * len(batch), [cache] * len(batch),
                                  [u.key for u in batch])
        for u, job in zip(batch, jobs):
            log.info("%s %s: %s job %s", u.kind, u.label, executor.cluster, job.job_id)
        for u, job in zip(batch, jobs):
            try:
                job.result()
            except Exception as exc:  # noqa: BLE001 - a job's error is reported with its unit
                lines = str(exc).strip().splitlines()
                failures.append((u, f"{lines[-1] if lines else type(exc).__name__} (logs in {folder})"))
    return failures


RAY_LOG_GRACE_S = 3.0
RAY_MISSING = ("--executor ray needs the package 'ray': pip install 'retrieval-harness[cluster]' (submitit and "
               "Ray; or the extra 'ray' alone), or scripts/setup.sh --dev")


def _require_ray() -> Any:
    # Ray reads these when it is imported: every line a job logs reaches the user (Ray's default merges
    # lines that differ only in their numbers, i.e. metrics and keys), without colour codes in a log file
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not sys.stderr.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def worker_job(job: JobFunction, suite_arg: str, scale: str, results_root: str, cache_dir: str | None,
               key: str) -> str:
    """What a submitit job or Ray task runs: ``job`` in a fresh worker process set up like ``harness
    run-cell``: our log lines on stderr (submitit's job log; Ray forwards them to the driver) and torch
    threads from ``HARNESS_NUM_THREADS`` (without it, two local jobs on two cores each took every core for
    torch: the quickstart's training took 22 minutes instead of 45 s)."""
    harness_log = logging.getLogger("harness")
    if not harness_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        harness_log.addHandler(handler)
        harness_log.setLevel(logging.INFO)
        harness_log.propagate = False
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    threads = os.environ.get("HARNESS_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))
    try:
        return job(suite_arg, scale, results_root, cache_dir, key)
    finally:
        for each in harness_log.handlers:
            each.flush()


class _RayGrid:
    """The Ray side of :func:`run_grid`: the cluster ``RAY_ADDRESS`` names (``auto``: the one ``ray start``
    made on this machine), or the one this process is already connected to, else a local instance of
    ``workers`` CPUs started here, without dashboard, and shut down when the grid ends.  Each unit is one
    task in a fresh worker process (``max_calls=1``: a GPU and the memory of a model are given back when
    the unit ends); at most ``workers`` run at a time, a new one starting as soon as any finishes."""

    def __init__(self, options: GridOptions, say: Callable[[str], None]) -> None:
        self.ray = _require_ray()
        self.options = options
        self.say = say
        self.started = False
        self.task: Any = None

    def _connect(self) -> None:
        ray, options = self.ray, self.options
        where = "the Ray connection this process already has"
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS")
            if address:
                ray.init(address=address, log_to_driver=True)
                where = f"the Ray cluster at {address}"
            else:
                # "local": a new instance even if another process on this machine runs one
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")     # no usage report leaves the machine
                ray.init(address="local", num_cpus=options.workers, include_dashboard=False, log_to_driver=True,
                         logging_level=logging.WARNING)
                where = "a local Ray instance"
            self.started = True
        resources = ray.cluster_resources()
        gpus = float(resources.get("GPU", 0))
        self.say(f"ray: {where} ({float(resources.get('CPU', 0)):g} CPU(s), {gpus:g} GPU(s))")
        self.task = ray.remote(num_cpus=1, num_gpus=options.gpus_per_job if gpus > 0 else 0, max_calls=1)(worker_job)

    def run(self, runner: SuiteRun, units: list[Unit], options: GridOptions) -> Failures:
        if self.task is None:
            self._connect()
        ray = self.ray
        root, cache = str(options.results_root), str(options.cache_dir) if options.cache_dir else None
        todo, failures = list(units), []
        running: dict[Any, Unit] = {}
        try:
            while todo or running:
                while todo and len(running) < options.workers:
                    u = todo.pop(0)
                    running[self.task.remote(options.job, options.suite_arg, options.scale, root, cache, u.key)] = u
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    u = running.pop(ref)
                    try:
                        ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - a task's error is reported with its unit
                        failures.append((u, _ray_error(exc)))
        except BaseException:
            for ref in running:                 # interrupted: nothing keeps running behind the user's back
                ray.cancel(ref, force=True)
            raise
        return failures

    def close(self) -> None:
        if self.started:
            if self.task is not None:
                # Ray forwards workers' output asynchronously (log monitor -> GCS -> this process): without
                # a pause, the last unit's final lines were lost to the shutdown (11 of 12 "stored" lines)
                time.sleep(RAY_LOG_GRACE_S)
            self.ray.shutdown()
            self.started = False
        self.task = None


def _ray_error(exc: BaseException) -> str:
    """One line for a failed task: the job's own exception (Ray wraps it with the remote traceback)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        lines = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
