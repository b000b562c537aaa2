"""Resumable training checkpoints, written atomically.

``<workdir>/checkpoints/step-00000050/`` holds

* ``model/``: the HF model (or LoRA adapter) folder with tokenizer and
  ``harness_encoder.json`` (an evaluable snapshot);
* ``trainer_state.pt``: step, optimizer, scheduler, sampler position, grad scaler;
* ``rank_<r>.pt``: per-process state: RNG states (python, numpy, torch, CUDA), the
  method's state and its weight optimizers (methods such as iDRO keep per-rank state).

All ranks write into a temporary folder; rank 0 renames it into place after a
barrier and then updates ``checkpoints/latest``.  A crash mid-save leaves only a
temporary folder, never a half checkpoint.
"""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from harness.errors import ConfigError
from harness.io import atomic_write_text
from harness.train import distributed as D

CHECKPOINT_DIR = "checkpoints"
LATEST_FILE = "latest"
TRAINER_STATE = "trainer_state.pt"
MODEL_DIR = "model"


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def rng_state(device: torch.device) -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def save_checkpoint(workdir: Path, step: int, *, write_model: Callable[[Path], None],
                    trainer_state: Callable[[], dict[str, Any]], rank_state: dict[str, Any], keep: int) -> Path:
    """Write checkpoint ``step`` (call on every rank); returns its folder."""
    root = workdir / CHECKPOINT_DIR
    final = root / checkpoint_name(step)
    tmp = root / f".{checkpoint_name(step)}.tmp"
    rank = D.rank()
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    D.barrier()
    if rank == 0:
        write_model(tmp / MODEL_DIR)
        torch.save({**trainer_state(), "world_size": D.world_size()}, tmp / TRAINER_STATE)
    torch.save(rank_state, tmp / f"rank_{rank}.pt")
    D.barrier()
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        atomic_write_text(root / LATEST_FILE, final.name + "\n")
        _prune(root, keep)
    D.barrier()
    return final


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(workdir: Path) -> Path | None:
    """The newest complete checkpoint folder, or None."""
    root = workdir / CHECKPOINT_DIR
    marker = root / LATEST_FILE
    if marker.exists():
        path = root / marker.read_text(encoding="utf-8").strip()
        if (path / TRAINER_STATE).exists():
            return path
    done = sorted(p for p in root.glob("step-*") if (p / TRAINER_STATE).exists()) if root.exists() else []
    return done[-1] if done else None


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(trainer_state, this rank's state)``; refuses a checkpoint written by another world size."""
    trainer_state = torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=False)
    saved_world = int(trainer_state.get("world_size", 1))
    if saved_world != D.world_size():
        raise ConfigError(f"{path}: written by {saved_world} process(es), resuming with {D.world_size()}; "
                          "resume with the same number of processes")
    rank_state = torch.load(path / f"rank_{D.rank()}.pt", map_location="cpu", weights_only=False)
    return trainer_state, rank_state
