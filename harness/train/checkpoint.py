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

Loading never runs code from the files: both ``.pt`` files are read with
``torch.load(weights_only=True)`` (PyTorch's restricted unpickler: tensors, numbers,
strings, lists, tuples, dicts, None; no other globals).  A checkpoint folder may come
from a shared results root or a downloaded run, so anything else (a crafted pickle, or a
checkpoint of format 1, which pickled numpy RNG arrays) is refused with an
:class:`~harness.errors.InputError` instead of being unpickled.  Everything saved is
therefore plain data: the numpy RNG key is stored as a tensor, not an ndarray.
"""
from __future__ import annotations

import os
import pickle
import random
import re
import shutil
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ConfigError, InputError
from harness.io import atomic_write_text
from harness.train import distributed as D

CHECKPOINT_DIR = "checkpoints"
LATEST_FILE = "latest"
TRAINER_STATE = "trainer_state.pt"
MODEL_DIR = "model"
# 2: plain data only (loadable with weights_only=True); 1 (no "format" key): pickled numpy arrays.
FORMAT = 2


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every RNG this process draws from, as tensors and plain Python values only."""
    legacy = np.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)   # legacy=True always gives the MT19937 tuple
    kind, key, pos, has_gauss, gauss = legacy
    state = {"python": random.getstate(),
             "numpy": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)},
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
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
        state = {**trainer_state(), "world_size": D.world_size(), "format": FORMAT}
        check_plain(state, "trainer state")
        torch.save(state, tmp / TRAINER_STATE)
    check_plain(rank_state, "rank state")
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


# Exact types (not subclasses: np.float64 is a float, a namedtuple a tuple, and neither loads back).
_LEAVES = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)


def check_plain(value: Any, where: str) -> None:
    """Refuse (at save time) anything ``torch.load(weights_only=True)`` could not read back.

    A method whose ``state_dict()`` returns e.g. a numpy array would otherwise write a
    checkpoint that cannot be resumed; convert such values with ``.tolist()`` or to tensors.
    """
    kind = type(value)
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            check_plain(key, f"{where} key")
            check_plain(item, f"{where}[{key!r}]")
    elif kind in (list, tuple, torch.Size):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
    elif kind not in _LEAVES and not isinstance(value, torch.Tensor):
        raise TypeError(f"{where} is a {kind.__module__}.{kind.__qualname__}; checkpoint state holds only "
                        "tensors, numbers, strings, None, lists, tuples and dicts")


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
    """``(trainer_state, this rank's state)``; refuses a checkpoint written by another world size.

    Raises :class:`InputError` for a file that is not a safe checkpoint of this format
    (nothing in it is executed)."""
    trainer_state = _load_state(path / TRAINER_STATE)
    if trainer_state.get("format") != FORMAT:
        raise InputError(path / TRAINER_STATE, f"checkpoint format {trainer_state.get('format', 1)} was written "
                         f"by an older version of the harness (this version reads format {FORMAT}); delete "
                         f"{path.parent} (all its checkpoints share the old format) to retrain from the start")
    saved_world = int(trainer_state.get("world_size", 1))
    if saved_world != D.world_size():
        raise ConfigError(f"{path}: written by {saved_world} process(es), resuming with {D.world_size()}; "
                          "resume with the same number of processes")
    rank_state = _load_state(path / f"rank_{D.rank()}.pt")
    return trainer_state, rank_state


def _load_state(file: Path) -> dict[str, Any]:
    """One ``.pt`` file through PyTorch's restricted unpickler (no code runs, no globals beyond plain data)."""
    if not file.is_file():
        raise InputError(file, "checkpoint file is missing; the checkpoint is incomplete, delete its folder")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # Name what was refused, without torch's advice to retry with weights_only=False.
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(exc))
        what = (f"it references {found.group(1)}" if found else
                "it holds objects other than tensors and plain data" + (f": {detail.group(1)}" if detail else ""))
        raise InputError(file, f"not a safe checkpoint ({what}; loading it could run code, so it was not "
                         "loaded); if an older version of the harness wrote it, delete its folder to retrain, "
                         "and never resume checkpoints from an untrusted source") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:  # truncated or not a torch file at all
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(file, f"not a readable checkpoint ({reason}); delete its folder to retrain") from None
    if not isinstance(state, dict):
        raise InputError(file, f"not a checkpoint state (a {type(state).__name__}, expected a mapping)")
    return state
