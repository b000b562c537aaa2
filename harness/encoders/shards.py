"""One shard of an embedding-cache entry: claimed, checked, then written atomically.

Shared by the caches (:mod:`harness.encoders.cache`, :mod:`harness.encoders.sparse_cache`, one
process) and the device workers (:mod:`harness.encoders.devices`, one process per device), which
write into the same entry.

Concurrent encodings of one entry (two ``harness eval`` runs of the same model and corpus, suite
cells that share a corpus) split its shards with :class:`ShardClaims`: before encoding a shard a
process claims it (:func:`harness.io.claims.try_claim`, an ``flock`` on ``shard-NNNNN.claim`` in the
entry); a shard another live process holds is skipped, and once this process has nothing left to
encode it waits for the other holders' shard files (polling, with a log line naming each holder).  A
holder that dies drops its lock with its process, so its shard is taken over.  Every shard is encoded
once and by one process, so the entry is the one a single process would write.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import numpy as np

from harness.errors import ConfigError
from harness.io import atomic_write
from harness.io.claims import ClaimTimeout, HeldClaim, default_timeout, describe, read_claim, try_claim

log = logging.getLogger(__name__)

SHARD_POLL_SECONDS = 0.5     # how often a process that waits for another one's shard looks again


def write_shard(path: Path, vectors: np.ndarray) -> None:
    """Write one shard's float32 vectors atomically (temp file + rename): a reader sees all of it or nothing."""
    with atomic_write(path, "wb") as handle:
        np.save(handle, vectors, allow_pickle=False)


def check_shard_vectors(vectors: np.ndarray, index: int, start: int, count: int, dim: int | None) -> np.ndarray:
    """``vectors`` of shard ``index`` (rows ``start``..) as contiguous float32, after checking their shape
    (``count`` rows, ``dim`` columns when known) and that every value is finite; ConfigError otherwise."""
    if vectors.ndim != 2 or vectors.shape[0] != count:
        raise ConfigError(f"encoder returned shape {vectors.shape} for {count} documents")
    if dim is not None and vectors.shape[1] != dim:
        raise ConfigError(f"encoder returned dimension {vectors.shape[1]}, cache entry has {dim}")
    if not np.all(np.isfinite(vectors)):
        raise ConfigError(f"encoder returned non-finite values in shard {index} (rows {start}..{start + count - 1})")
    return np.ascontiguousarray(vectors, dtype=np.float32)


def shard_claim_target(entry: Path, index: int) -> Path:
    """What a shard's claim is named after: ``<entry>/shard-NNNNN`` (its lock file is ``shard-NNNNN.claim``)."""
    return entry / f"shard-{index:05d}"


class ShardClaims:
    """The shards of one cache entry that this process encodes, claimed one by one.

    ``shards`` are the indices found missing; ``done(i)`` says whether shard ``i`` is complete on disk
    (it is asked again once the claim is held, since another process may have written it meanwhile).
    :meth:`next` hands out a shard whose claim this process now holds (release it with
    :meth:`release` once the shard is written) or None when nothing is left to encode.  Use it as a
    context manager: leaving the block releases every claim still held.  ``encoded`` counts the shards
    handed out (the shards this process encodes)."""

    def __init__(self, entry: Path, shards: Iterable[int], done: Callable[[int], bool], *, what: str,
                 poll: float | None = None, timeout: float | None = None):
        self.entry = entry
        self.what = what
        self.poll = SHARD_POLL_SECONDS if poll is None else poll
        self.timeout = default_timeout() if timeout is None else timeout
        self.encoded = 0
        self._done = done
        self._todo = deque(shards)
        self._others: list[int] = []             # claimed by another process when we looked
        self._held: dict[int, HeldClaim] = {}

    def __enter__(self) -> ShardClaims:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Release every claim still held (an encoding that failed leaves its shard to the next taker)."""
        while self._held:
            self._held.popitem()[1].release()

    def release(self, index: int) -> None:
        held = self._held.pop(index, None)
        if held is not None:
            held.release()

    def next(self, *, wait: bool = True) -> int | None:
        """The next shard to encode, its claim held; None when every shard is done (by this process or
        others).  With ``wait=False``, None also when the shards left are all held by other processes
        (ask again later); otherwise this waits for them, and takes over any whose holder died."""
        while self._todo:
            index = self._todo.popleft()
            taken = self._take(index)
            if taken is None:
                self._others.append(index)
            elif taken:
                return index
        if not wait:
            return None
        return self._wait_for_others()

    def _take(self, index: int) -> bool | None:
        """Claim shard ``index``: True when it is now ours to encode, False when it turned out done,
        None when another process holds it."""
        held = try_claim(shard_claim_target(self.entry, index), f"{self.what}, shard {index}")
        if held is None:
            return None
        try:
            finished = self._done(index)
        except BaseException:
            held.release()
            raise
        if finished:
            held.release()
            return False
        self._held[index] = held
        self.encoded += 1
        return True

    def _wait_for_others(self) -> int | None:
        started = time.monotonic()
        announced: set[int] = set()
        while self._others:
            for index in list(self._others):
                if self._done(index):               # its holder wrote it (it may still be releasing)
                    self._others.remove(index)
                    continue
                taken = self._take(index)
                if taken is None:
                    continue
                self._others.remove(index)
                if taken:
                    log.warning("taking over shard %d of %s: the process that claimed it stopped without "
                                "writing it", index, self.entry)
                    return index
            waiting = [i for i in self._others if i not in announced]
            for index in waiting:
                log.info("waiting for shard %d of %s: claimed by %s", index, self.entry,
                         describe(read_claim(shard_claim_target(self.entry, index))))
            announced.update(waiting)
            if not self._others:
                break
            if self.timeout is not None and time.monotonic() - started >= self.timeout:
                holders = "; ".join(f"shard {i} by {describe(read_claim(shard_claim_target(self.entry, i)))}"
                                    for i in self._others)
                raise ClaimTimeout(f"{self.what}: still waiting after {self.timeout:g}s for {holders} "
                                   "(HARNESS_CLAIM_TIMEOUT sets the wait)")
            time.sleep(self.poll)
        return None
