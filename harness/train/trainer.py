"""The shared training loop on ``accelerate`` (one CPU process, one GPU, or many via
``accelerate launch`` / ``torchrun``), with the method hooks of METHODS.md section 7.

Per optimizer step: ``grad_accum`` micro-batches, each drawn by the weighted sampler
(the same draw on every rank; each rank takes its slice), built by the method
(default: prompted, tokenized query/positive/negatives rows), encoded view by view
through the method's representation head (optionally through the gradient cache),
turned into per-sample losses by the method (default: InfoNCE with hard + in-batch +
cross-batch negatives), handed to the method hooks, and backpropagated; then gradient
clipping, AdamW and the LR schedule.  Before the steps the method lists, an episode
runs (``Method.run_episode``), preceded by a checkpoint so a kill during it redoes it.

``workdir`` layout: ``run.json`` (spec, method, data; a resumed run must match),
``train_log.jsonl``, ``checkpoints/step-*/`` (resumable), ``episodes/step-*/`` (what
episodes wrote), ``final/`` (the trained model
folder for :class:`~harness.encoders.hf.HFEncoder`), ``method/`` (method outputs),
``done.json`` (written last: the run is finished); outside a suite, ``deps/`` holds the stages the method
declared (``Method.stages``), trained before this one by :mod:`harness.train.stages`
(:mod:`harness.train.outdir`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from harness.errors import ConfigError
from harness.io import atomic_dir, atomic_write_json
from harness.train import distributed as D
from harness.train.checkpoint import (
    MODEL_DIR,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from harness.train.context import TrainContext
from harness.train.logs import LOG_FILE, TrainLogger, read_log
from harness.train.model import build_model, encoder_settings, load_weights, save_model
from harness.train.outdir import DEPS_DIR, RUN_FILE, check_training_folder
from harness.train.result import DONE_FILE, Checkpoint
from harness.train.samplers import WeightedSampler
from harness.train.schedule import make_scheduler
from harness.train.spec import TrainSpec
from harness.train.step import run_micro_batch

if TYPE_CHECKING:
    from harness.train.stages import Prepared, StageResult

log = logging.getLogger(__name__)
FINAL_DIR = "final"
METHOD_DIR = "method"
EPISODE_DIR = "episodes"
_MIXED = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
# A backbone at most this wide trains on one CPU thread unless a thread count was chosen (tiny_model_threads).
TINY_HIDDEN = 64
# A thread count the user chose: --threads / HARNESS_NUM_THREADS (the CLI sets OMP_NUM_THREADS from it), or OpenMP's.
_THREAD_CHOICES = ("HARNESS_NUM_THREADS", "OMP_NUM_THREADS")


def make_accelerator(precision: str = "fp32"):
    """An ``accelerate.Accelerator`` for training: CUDA when present (else CPU, fp32), gloo/nccl set up
    from the launcher's environment; DDP may skip parameters the loss never uses (e.g. BERT's pooler)."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    cuda = torch.cuda.is_available()
    if precision != "fp32" and not cuda:
        log.warning("precision %s needs a GPU; training in fp32 on CPU", precision)
        precision = "fp32"
    from accelerate.state import AcceleratorState

    mixed = _MIXED[precision]
    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") not in (None, mixed):
        # One process may train cells with different precisions (a suite); the process group stays.
        AcceleratorState._reset_state()
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
    accelerator = Accelerator(cpu=not cuda, mixed_precision=mixed, kwargs_handlers=[ddp])
    # One line per trained run says where it ran: the GPU check (scripts/gpu_check.py) reads it from the logs.
    log.info("training on %s (%s, %d process(es))", accelerator.device, precision, accelerator.num_processes)
    return accelerator


def tiny_model_threads(model: torch.nn.Module, device: torch.device) -> int | None:
    """1 for a backbone at most :data:`TINY_HIDDEN` wide trained on a CPU without a chosen thread count, else None.

    The ops of such a model (the quickstart's hidden-32 BERT) last microseconds, so a second intra-op
    thread gains nothing and, on a loaded machine, costs a lot: OpenMP threads wait for each other at
    every op.  Measured on the quickstart's training (2 cores, load average about 10): 2.2 s per step on
    two threads, 0.27 s on one, and 11x the process CPU time.  It also makes the trained numbers the
    same on every machine (torch's default is the core count, and the sums' order depends on it)."""
    if device.type != "cpu" or any(os.environ.get(name) for name in _THREAD_CHOICES):
        return None
    config = getattr(getattr(model, "backbone", model), "config", None)
    hidden = getattr(config, "hidden_size", None)
    return 1 if isinstance(hidden, int) and hidden <= TINY_HIDDEN else None


class Trainer:
    """Train ``method`` under ``spec`` on ``data`` in ``workdir`` (resuming if possible)."""

    def __init__(self, spec: TrainSpec, data, workdir: str | Path, method, accelerator=None, *,
                 stages: Mapping[str, StageResult] | None = None, prepared: Prepared | None = None,
                 dependency_runs: Sequence[Path] = ()):
        self.spec, self.data, self.method = spec, data, method
        self.workdir = Path(workdir)
        self.accelerator = accelerator
        self.stages = dict(stages or {})
        self.prepared = prepared
        # The stage runs trained for this run under ``deps/`` (harness train): accepted beside it, nothing else.
        self.dependency_runs = tuple(Path(p) for p in dependency_runs)
        self.step_losses: list[float] = []     # this process's view of the logged losses (for tests)

    # ------------------------------------------------------------------ set-up
    def run_record(self) -> dict[str, Any]:
        return {"method": self.method.name, "spec_fingerprint": self.spec.fingerprint(),
                "data_fingerprint": self.data.fingerprint(), "spec": self.spec.result_dict(),
                "data": self.data.describe()}

    def _check_workdir(self) -> None:
        record = self.run_record()
        path = self.workdir / RUN_FILE
        if path.exists():
            old = json.loads(path.read_text(encoding="utf-8"))
            for key in ("method", "spec_fingerprint", "data_fingerprint"):
                if old.get(key) != record[key]:
                    diff = _spec_diff(old.get("spec", {}), record["spec"]) if key == "spec_fingerprint" else ""
                    raise ConfigError(f"{self.workdir} holds a run with a different {key.split('_')[0]} "
                                      f"({old.get(key)} vs {record[key]}){diff}; use another output folder")
        elif D.rank() == 0:
            atomic_write_json(path, record)

    def _refuse_foreign_workdir(self) -> None:
        """Train only into a new or empty folder, one holding a run of ours (``run.json``), or one holding
        only ``deps/`` with the dependency runs this method obtained for this run (``harness train`` of
        tDRO, a COCO variant, ...): checkpoints are pruned and replaced there, so a user's unrelated
        folder must not be used."""
        deps = (self.workdir / DEPS_DIR).resolve()
        own = {run.name for run in self.dependency_runs if run.parent.resolve() == deps}
        check_training_folder(self.workdir, own)

    def _make_accelerator(self):
        return self.accelerator if self.accelerator is not None else make_accelerator(self.spec.precision)

    def _optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        for name, p in model.named_parameters():
            if p.requires_grad:
                (no_decay if p.ndim < 2 or name.endswith(".bias") else decay).append(p)
        groups = [{"params": decay, "weight_decay": self.spec.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        custom = self.method.make_optimizer(self.spec, groups)     # e.g. LAMB (a method's own optimizer)
        if custom is not None:
            return custom
        # One kernel over all parameters: fused on a GPU; on a CPU the multi-tensor (foreach) path, which
        # PyTorch picks only for CUDA by default (the one-tensor loop took as long as backward on the
        # quickstart's tiny model; the result is bitwise the same, tests/train/test_optimizer_step.py).
        kwargs = {"fused": True} if next(model.parameters()).is_cuda else {"foreach": True}
        return torch.optim.AdamW(groups, lr=self.spec.lr, betas=self.spec.adam_betas, eps=self.spec.adam_eps,
                                 **kwargs)

    # ------------------------------------------------------------------ main loop
    def run(self):
        """Train to ``spec.steps`` (resuming from the newest checkpoint) and return the finished run."""
        if (self.workdir / DONE_FILE).exists():
            self._check_workdir()
            return Checkpoint.load(self.workdir)
        self._refuse_foreign_workdir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._setup()
        spec = self.spec
        start = 0
        ckpt = latest_checkpoint(self.workdir)
        if ckpt is not None:
            start = self._resume(ckpt)
        elif spec.save_initial:
            # step 0: the model before any step (e.g. the warm-up stage's it starts from), before a step-0 episode
            # runs, so the checkpoint is the curve's first point and a kill during that episode resumes here
            self._save(0)
        logger = TrainLogger(self.workdir, enabled=self.acc.is_main_process, resume_step=start,
                             total_steps=spec.steps, tensorboard=spec.tensorboard, progress=spec.progress)
        started = time.time()
        last_saved = start
        episodes = self._episode_steps()
        restarts = self._optimizer_restarts(episodes)
        threads, previous_threads = tiny_model_threads(self.model, self.acc.device), torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            for step in range(start, spec.steps):
                if step in episodes:
                    if step != last_saved:
                        self._save(step)       # a kill during the episode resumes here and redoes it
                        last_saved = step
                    self._episode(step)
                if step in restarts:
                    # after the checkpoint above (which holds the state before it), so a resumed run clears it again
                    self._restart_optimizer()
                record = self._train_step(step)
                self.step_losses.append(record["loss"])
                logger.write(record, persist=(step + 1) % spec.log_every == 0 or step + 1 == spec.steps)
                if spec.save_every and (step + 1) % spec.save_every == 0 and step + 1 < spec.steps:
                    self._save(step + 1)
                    last_saved = step + 1
        finally:
            logger.close()
            if threads is not None:
                torch.set_num_threads(previous_threads)
        if last_saved != spec.steps:
            self._save(spec.steps)
        return self._finish(time.time() - started)

    def _setup(self) -> None:
        """Accelerator, seeds, model, optimizer, schedule, sampler, context; the method's ``configure``."""
        from accelerate.utils import set_seed

        spec = self.spec
        acc = self.acc = self._make_accelerator()
        self._check_workdir()
        spec.micro_batch_size(acc.num_processes)  # validates divisibility
        set_seed(spec.seed)
        self.head = self.method.representation_head(spec)
        self.model, self.tokenizer, self.enc = build_model(spec, head=self.head)
        self.model.to(acc.device)
        # from_pretrained returns the backbone in eval mode: without this, dropout would never be active.
        self.model.train(spec.dropout)
        optimizer = self._optimizer(self.model)
        factor = self.method.lr_factor(spec)     # a method's own schedule (e.g. restarts per episode)
        self.scheduler = (make_scheduler(optimizer, spec.steps, spec.warmup_steps, spec.schedule, spec.min_lr_ratio)
                          if factor is None else torch.optim.lr_scheduler.LambdaLR(optimizer, factor))
        global_micro = spec.batch_size // spec.grad_accum
        prepared = self.prepared
        weights: Any = (prepared.dataset_weights if prepared is not None and prepared.dataset_weights is not None
                        else self.method.dataset_weights(spec, self.data))
        self.sampler = WeightedSampler(self.data.sizes, weights, global_micro, spec.seed, spec.sampling)
        for name, size in zip(self.data.names, self.data.sizes):
            if spec.sampling == "homogeneous" and size < global_micro and acc.is_main_process:
                log.warning("source %s has %d rows, fewer than a global micro-batch of %d: its batches repeat "
                            "rows, and a repeated positive is a false in-batch negative", name, size, global_micro)
        mixed = acc.mixed_precision != "no"
        self.ctx = TrainContext(spec=spec, data=self.data, model=self.model, tokenizer=self.tokenizer,
                                device=acc.device, options=self.method.resolve_options(dict(spec.method_options)),
                                sampler=self.sampler, rank=acc.process_index, world_size=acc.num_processes,
                                autocast=acc.autocast if mixed else None, encoding=dict(self.enc),
                                stages=self.stages, prepared=dict(prepared.values) if prepared is not None else {})
        self.method.configure(self.ctx)
        self.wrapped, self.optimizer = acc.prepare(self.model, optimizer)
        # the fp16 loss scaler as built, before any step (a restart returns to it); None without one
        scaler = getattr(acc, "scaler", None)
        self.fresh_scaler = dict(scaler.state_dict()) if scaler is not None else None

    def _restart_optimizer(self) -> None:
        """Start the optimizer afresh (``Method.optimizer_restarts``): its state cleared and the fp16 loss scaler
        back to its initial scale and growth tracker, as a new training process has (each round of OpenMatch/
        COCO-DR's ANCE/drivers/run_ann.py is one: apex ``amp.initialize`` builds a new dynamic loss scaler)."""
        getattr(self.optimizer, "optimizer", self.optimizer).state.clear()
        if self.fresh_scaler is not None:
            self.acc.scaler.load_state_dict(self.fresh_scaler)

    def _train_step(self, step: int) -> dict[str, Any]:
        """One optimizer step (``grad_accum`` micro-batches); returns the log record."""
        spec, acc, ctx = self.spec, self.acc, self.ctx
        world = acc.num_processes
        t0 = time.time()
        ctx.step = step
        loss_scale = acc.scaler.scale if getattr(acc, "scaler", None) is not None else None

        def sync(last: bool):
            return contextlib.nullcontext() if last or world == 1 else acc.no_sync(self.wrapped)

        def step_weights():
            for name, wo in ctx.weight_optimizers.items():
                wo.step(spec.grad_accum)
                self.method.on_weight_step(name, ctx)

        loss_sum, sample_sum = 0.0, 0.0
        counts = np.zeros(len(self.data), dtype=np.int64)
        for micro in range(spec.grad_accum):
            ctx.micro_step = micro
            examples = self.sampler.next_batch()
            batch = ctx.batch = self.method.make_batch(examples, ctx, step * spec.grad_accum + micro)
            res = run_micro_batch(self.wrapped, ctx, self.method, backward=acc.backward, sync=sync,
                                  step_weights=step_weights, gradcache_chunk=spec.gradcache_chunk_size,
                                  loss_scale=loss_scale)
            loss_sum += res.loss
            sample_sum += res.mean_sample_loss
            groups = batch.global_group_ids if batch.global_group_ids is not None else batch.group_ids
            counts += np.bincount(groups, minlength=len(self.data))
        grad_norm = None
        if spec.max_grad_norm > 0:
            grad_norm = float(acc.clip_grad_norm_(self.wrapped.parameters(), spec.max_grad_norm))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        ctx.step, ctx.batch = step + 1, None
        self.method.on_step_end(ctx)
        means = D.all_reduce_sum(torch.tensor([loss_sum, sample_sum], dtype=torch.float64)) / (world * spec.grad_accum)
        seconds = time.time() - t0
        return {"step": step + 1, "loss": float(means[0]), "infonce": float(means[1]), "lr": lr,
                "grad_norm": grad_norm, "examples_per_s": spec.batch_size / max(seconds, 1e-9), "seconds": seconds,
                "counts": {n: int(c) for n, c in zip(self.data.names, counts) if c},
                "method": self.method.scalars()}

    # ------------------------------------------------------------------ checkpoints
    def _training_info(self, step: int) -> dict[str, Any]:
        enc = self.enc
        return {"method": self.method.name, "step": step, "encoding": {k: v for k, v in enc.items() if k != "path"},
                "base_model": enc["path"], "similarity": self.spec.similarity,
                "instruction_template": self.spec.instruction_template if self.spec.use_instructions else "",
                "spec": self.spec.result_dict(), "spec_fingerprint": self.spec.fingerprint(),
                "data": [{"name": d["name"], "rows": d["rows"]} for d in self.data.describe()],
                "data_fingerprint": self.data.fingerprint(),
                **({"head": self.head.describe()} if self.head is not None else {})}

    # ------------------------------------------------------------------ episodes
    def _episode_steps(self) -> set[int]:
        steps = sorted(set(self.method.episode_steps(self.spec)))
        bad = [s for s in steps if not isinstance(s, int) or not 0 <= s < self.spec.steps]
        if bad:
            raise ConfigError(f"method {self.method.name!r}: episode steps {bad} are not steps of a "
                              f"{self.spec.steps}-step run (0 .. {self.spec.steps - 1})")
        return set(steps)

    def _optimizer_restarts(self, episodes: set[int]) -> set[int]:
        steps = set(self.method.optimizer_restarts(self.spec))
        bad = sorted(steps - episodes)
        if bad:
            raise ConfigError(f"method {self.method.name!r}: optimizer restarts {bad} are not episode steps")
        return steps

    def _episode(self, step: int) -> None:
        """Run the method's episode before ``step`` into a fresh ``episodes/step-*`` folder.

        The episode draws from its own RNG (forked, seeded by the run seed and the step), so
        the training stream is the same with or without a redone episode."""
        directory = self.workdir / EPISODE_DIR / f"step-{step:08d}"
        if self.acc.is_main_process:
            if directory.exists():
                shutil.rmtree(directory)       # a redone episode starts clean
            directory.mkdir(parents=True)
        D.barrier()
        ctx = self.ctx
        ctx.step, ctx.batch = step, None
        devices = [self.acc.device] if self.acc.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.spec.seed * 1_000_003 + step)
            started = time.time()
            self.method.run_episode(ctx, directory)
        D.barrier()
        log.info("episode before step %d took %.1fs", step, time.time() - started)

    def _save(self, step: int) -> None:
        acc, ctx = self.acc, self.ctx
        settings = encoder_settings(self.spec, self.enc)

        def write_model(directory: Path) -> None:
            save_model(self.model, self.tokenizer, directory, settings, self._training_info(step))

        def trainer_state() -> dict[str, Any]:
            state = {"step": step, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                     "sampler": self.sampler.state_dict(), "spec_fingerprint": self.spec.fingerprint()}
            if getattr(acc, "scaler", None) is not None:
                state["scaler"] = acc.scaler.state_dict()
            return state

        rank_state = {"rng": rng_state(acc.device), "method": self.method.state_dict(),
                      "weight_optimizers": {n: wo.state_dict() for n, wo in ctx.weight_optimizers.items()}}
        save_checkpoint(self.workdir, step, write_model=write_model, trainer_state=trainer_state,
                        rank_state=rank_state, keep=self.spec.keep_checkpoints)

    def _resume(self, path: Path) -> int:
        acc, ctx = self.acc, self.ctx
        trainer_state, rank_state = load_checkpoint(path)
        if trainer_state["spec_fingerprint"] != self.spec.fingerprint():
            raise ConfigError(f"{path}: checkpoint was written under another spec")
        load_weights(self.model, path / MODEL_DIR)
        self.optimizer.load_state_dict(trainer_state["optimizer"])
        self.scheduler.load_state_dict(trainer_state["scheduler"])
        self.sampler.load_state_dict(trainer_state["sampler"])
        if "scaler" in trainer_state and getattr(acc, "scaler", None) is not None:
            acc.scaler.load_state_dict(trainer_state["scaler"])
        saved_wo = rank_state["weight_optimizers"]
        if set(saved_wo) != set(ctx.weight_optimizers):
            raise ConfigError(f"{path}: weight optimizers {sorted(saved_wo)} do not match the method's "
                              f"{sorted(ctx.weight_optimizers)}")
        for name, state in saved_wo.items():
            ctx.weight_optimizers[name].load_state_dict(state)
        self.method.load_state_dict(rank_state["method"])
        set_rng_state(rank_state["rng"], acc.device)
        step = int(trainer_state["step"])
        log.info("resumed %s from %s (step %d)", self.workdir, path.name, step)
        return step

    def _finish(self, seconds: float):
        spec, acc = self.spec, self.acc
        if acc.is_main_process:
            merge = spec.lora is not None and spec.lora.merge_on_save
            with atomic_dir(self.workdir / FINAL_DIR, is_ours=lambda p: (p / "harness_encoder.json").is_file(),
                            what="a model folder written by the trainer") as tmp:
                save_model(self.model, self.tokenizer, tmp, encoder_settings(spec, self.enc),
                           self._training_info(spec.steps), merge_lora=merge)
            (self.workdir / METHOD_DIR).mkdir(exist_ok=True)
            self.method.export(self.ctx, self.workdir / METHOD_DIR)
            records = read_log(self.workdir / LOG_FILE)
            atomic_write_json(self.workdir / DONE_FILE, {
                "model_dir": FINAL_DIR, "method": self.method.name, "step": spec.steps,
                "spec_fingerprint": spec.fingerprint(), "data_fingerprint": self.data.fingerprint(),
                "info": {"final_loss": records[-1]["loss"] if records else None,
                         "seconds_this_session": seconds, "processes": acc.num_processes}})
        D.barrier()
        return Checkpoint.load(self.workdir)


def _spec_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return f" (changed: {', '.join(changed)})" if changed else ""
