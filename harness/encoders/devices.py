"""Encoding a corpus on several devices: one worker process per device.

``harness eval --devices cuda:0,cuda:1`` (or ``encoding: {devices: [cuda:0, cuda:1]}`` in a suite
file) hands the shards of the embedding cache (:mod:`harness.encoders.cache`) to one process per
listed device, started with the ``spawn`` method (a CUDA context cannot survive ``fork``).  Each
worker loads the model once on its device, encodes whole shards exactly as a single process would
(the batches are those of the shard's own length sort) and writes each one into the cache entry
atomically; the parent hands out the shards in order, a bounded number at a time (memory stays one
shard of texts per worker), records each finished shard in the entry's metadata and reads the
result back in shard order.  The vectors and the cache key are therefore those of a single-device
run: the device list is not part of the key (the dtype is).

A worker that dies (killed, out of memory) leaves the shards finished so far in the cache; the
error names the shards that were in flight, and the next run encodes only the missing ones.
The same device may be listed twice (``cpu,cpu`` splits the CPU threads between two processes;
``cuda:0,cuda:0`` runs two models on one GPU).  ``auto`` means every visible GPU, else the CPU.
"""
from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.encoders.shards import ShardClaims, check_shard_vectors, write_shard
from harness.encoders.texts import detached
from harness.errors import ConfigError, HarnessError
from harness.progress import bar_disabled

log = logging.getLogger(__name__)

AUTO = "auto"


def parse_devices(value: Any) -> tuple[str, ...]:
    """The device list of ``--devices`` / ``encoding: devices``: a comma-separated string or a list of
    names, each ``cpu``, ``cuda`` or ``cuda:N`` (``cuda`` means ``cuda:0``), or ``auto`` alone.

    Only the spelling is checked here (a suite file may be planned on a machine without the GPUs it
    names); :func:`check_devices` checks that the devices exist, before any encoding."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ConfigError(f"devices must be a comma-separated string or a list of device names, got {value!r}")
    if not items or any(not v for v in items):
        raise ConfigError(f"devices must name at least one device and no empty one, got {value!r}")
    out = []
    for item in items:
        name = item.lower()
        if name == AUTO:
            if len(items) > 1:
                raise ConfigError(f"devices: 'auto' stands alone (every visible GPU, else cpu), got {value!r}")
            return (AUTO,)
        if name == "cuda":
            name = "cuda:0"
        kind, _, index = name.partition(":")
        if kind == "cpu" and not index:
            out.append("cpu")
        elif kind == "cuda" and index.isdigit():
            out.append(f"cuda:{int(index)}")
        else:
            raise ConfigError(f"unknown device {item!r} in devices; use cpu, cuda, cuda:N or auto")
    return tuple(out)


def check_devices(devices: Sequence[str]) -> tuple[str, ...]:
    """``devices`` (as :func:`parse_devices` gives them) with ``auto`` expanded, after checking that every
    CUDA device exists on this machine; a missing one is refused naming it and ``torch.cuda.device_count()``."""
    import torch

    devices = parse_devices(list(devices))
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if devices == (AUTO,):
        return tuple(f"cuda:{i}" for i in range(count)) or ("cpu",)
    for device in devices:
        if device.startswith("cuda:") and int(device.split(":")[1]) >= count:
            visible = f" (valid: {', '.join(f'cuda:{i}' for i in range(count))})" if count else ""
            raise ConfigError(f"device {device!r} does not exist: torch.cuda.device_count() is {count}{visible}"
                              + ("" if count else "; this machine (or this torch build) has no CUDA GPU, "
                                 "use --devices cpu or leave --devices out"))
    return devices


def describe_devices(devices: Sequence[str] | None = None) -> str:
    """One line for ``harness doctor``: the devices an encoding would use (``devices``, default ``auto``)."""
    asked = parse_devices(list(devices)) if devices else (AUTO,)
    chosen = check_devices(asked)
    if len(chosen) == 1:
        why = "; no GPU visible" if asked == (AUTO,) and chosen == ("cpu",) else ""
        return f"{chosen[0]} (in the evaluating process{why})"
    return f"{', '.join(chosen)} ({len(chosen)} worker processes, one per device)"


@dataclass(frozen=True)
class ShardDone:
    """What a worker reports for one finished shard."""

    index: int
    dim: int
    seconds: float
    device: str


# ---------------------------------------------------------------- worker side (runs in the spawned processes)
_WORKER: dict[str, Any] = {}


def _init_worker(encoders: Any, threads: int) -> None:
    """Take one device's encoder from the queue (each process gets a different one) and set torch's threads."""
    import torch

    encoder = encoders.get()
    torch.set_num_threads(max(1, threads))
    device = str(encoder.device)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    _WORKER["encoder"] = encoder
    _WORKER["device"] = device


def _encode_shard(index: int, start: int, texts: list[str], path: str, dim: int | None,
                  batch_size: int | None) -> ShardDone:
    """Encode one shard on this worker's device and write it atomically to ``path``."""
    encoder, device = _WORKER["encoder"], _WORKER["device"]
    started = time.perf_counter()
    try:
        vectors = np.asarray(encoder.encode_docs(texts, batch_size=batch_size, progress=False))
        vectors = check_shard_vectors(vectors, index, start, len(texts), dim)
    except HarnessError as exc:      # as a ConfigError naming the device: it pickles back to the parent as it is
        raise ConfigError(f"encoding on {device}: {exc}") from None
    write_shard(Path(path), vectors)
    return ShardDone(index, int(vectors.shape[1]), time.perf_counter() - started, device)


# ---------------------------------------------------------------- parent side
def worker_encoder(encoder: Any, device: str) -> Any:
    """A copy of ``encoder`` that loads its model on ``device`` (the encoder's ``for_device``)."""
    for_device = getattr(encoder, "for_device", None)
    if for_device is None:
        raise ConfigError(f"{type(encoder).__name__} cannot encode on several devices (it has no for_device); "
                          "leave devices out")
    return for_device(device)


def encode_shards(encoder: Any, devices: Sequence[str], shards: Sequence[tuple[int, int, int]],
                  texts: Callable[[int, int], list[str]], path_of: Callable[[int], Path], *,
                  dim: int | None, batch_size: int | None, on_done: Callable[[ShardDone], None],
                  progress: bool = True, claims: ShardClaims | None = None) -> None:
    """Encode ``shards`` (index, start row, count) with one spawned worker process per device.

    ``texts(start, count)`` gives a shard's passages (called when the shard is handed out, so the
    parent holds at most one shard of texts per worker), ``path_of(index)`` its cache file, which the
    worker writes atomically; ``on_done`` is called in the parent as each shard finishes (any order).
    A dead worker raises ConfigError naming the unfinished shards; the finished ones stay written.

    With ``claims`` (the cache's :class:`~harness.encoders.shards.ShardClaims` over ``shards``) the parent
    claims each shard as it hands it out and releases it once done: shards another process holds are
    left to it, and the parent waits for them only when none of its own is in flight."""
    import torch
    from tqdm.auto import tqdm

    devices = check_devices(devices)
    workers = min(len(devices), len(shards))
    if workers == 0:
        return
    pending: dict[Future, tuple[int, int, int]] = {}
    todo: Iterator[tuple[int, int, int]] = iter(shards)
    rows = {index: (index, start, count) for index, start, count in shards}
    first = claims.next() if claims is not None else None
    if claims is not None and first is None:   # other processes encoded every shard meanwhile: start no worker
        return

    def next_shard() -> tuple[int, int, int] | None:
        nonlocal first
        if claims is None:
            return next(todo, None)
        if first is not None:
            index: int | None = first
            first = None
        else:   # wait for other processes' shards only when none of ours is in flight
            index = claims.next(wait=not pending)
        return None if index is None else rows[index]
    clones = [worker_encoder(encoder, d) for d in devices[:workers]]
    threads = max(1, torch.get_num_threads() // workers)     # the parent's CPU threads, shared out
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    for clone in clones:
        queue.put(clone)
    log.info("encoding %d shard(s) on %s, one process per device", len(shards), ", ".join(devices[:workers]))
    total = sum(count for _, _, count in shards)
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(queue, threads)) as pool, \
            tqdm(total=total, desc=f"encode docs on {workers} devices", unit="text", disable=bar_disabled(progress),
                 leave=False) as bar:
        def submit() -> None:
            shard = next_shard()
            if shard is None:
                return
            index, start, count = shard
            # Copies: pickling a str caches its UTF-8 bytes on it (as tokenising does; harness.encoders.texts).
            future = pool.submit(_encode_shard, index, start, detached(texts(start, count)),
                                 str(path_of(index)), dim, batch_size)
            pending[future] = shard

        try:
            for _ in range(workers):          # one shard in flight per worker: the texts held stay bounded
                submit()
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    index, _start, count = pending[future]
                    done = future.result()              # a dead worker raises here, its shard still pending
                    del pending[future]
                    if dim is None:
                        dim = done.dim
                    elif done.dim != dim:
                        raise ConfigError(f"the worker on {done.device} returned dimension {done.dim} for shard "
                                          f"{index}, other shards have {dim}")
                    on_done(done)
                    if claims is not None:
                        claims.release(index)
                    bar.update(count)
                    submit()
        except BrokenProcessPool:
            lost = sorted(i for i, _, _ in pending.values())
            for future in pending:
                future.cancel()
            raise ConfigError(f"an encoding worker process died (killed or out of memory) while shard(s) "
                              f"{', '.join(map(str, lost))} were being encoded on {', '.join(devices[:workers])}; "
                              "the finished shards are kept in the cache: run again to encode only the rest") from None
        except BaseException:
            for future in pending:
                future.cancel()
            raise

