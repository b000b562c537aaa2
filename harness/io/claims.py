"""Per-run claims: at most one process trains a cell or a dependency (or evaluates an eval cell) at a time.

Before working in a run directory ``<dir>`` a process takes an exclusive ``fcntl.flock`` on the
sibling file ``<dir>.claim`` and holds it until the work is done.  A second process that wants the
same run waits (polling, with a log line that names the holder) and then finds the run finished and
reuses it, so a cell is never trained twice.  The lock belongs to the open file: the kernel drops it
when the holder exits or is killed (SIGKILL included), so a dead worker's claim needs no clean-up —
the next process takes it and resumes the run from its last checkpoint.

While held, the claim file holds a small JSON record (host, pid, start time, what) for humans and
for the waiting log line; it is emptied on release, so a record found by the next holder means the
previous holder died (it is logged as a recovered claim).  Claim files are never deleted: unlinking
a lock file while another process waits on it would let two processes hold "the same" claim.

Why ``flock`` and not ``filelock`` or a lock directory: a kernel lock cannot go stale (no pid or
lease to guess from), and it needs no dependency.  Limits: it is advisory (only processes that use
claims respect it); on Linux NFS clients ``flock`` is emulated with NFS byte-range locks, which
works across hosts with NFSv4 (or v3 with lockd) but a crashed *host* keeps its lock until the
server's lease expires (about 90 s on NFSv4); some file systems (CIFS without ``nobrl``, Lustre
mounted without ``flock``, some FUSE mounts) only lock locally or refuse: there, set
``HARNESS_CLAIMS=off`` and split work with ``--shard`` instead.

Within one process (one thread) claims are re-entrant: the runner claims a cell and the method's
``train`` claims the same directory again without waiting on itself.  ``HARNESS_CLAIM_TIMEOUT``
(seconds) bounds the wait (default: wait as long as the holder works).  In a multi-process launch
(``WORLD_SIZE`` > 1, every rank trains the cell together) claims are skipped: the ranks would wait
on each other inside collectives; run such a launch alone on its results root.

:func:`try_claim` takes a claim only if it is free now (no wait) and hands back a :class:`HeldClaim` to
release later: the embedding caches claim each shard that way (:mod:`harness.encoders.shards`), so
concurrent encodings of one corpus split its shards instead of waiting on each other.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError

log = logging.getLogger(__name__)
CLAIM_SUFFIX = ".claim"
TIMEOUT_ENV = "HARNESS_CLAIM_TIMEOUT"
SWITCH_ENV = "HARNESS_CLAIMS"
_held = threading.local()   # claim path -> depth, per thread (re-entrancy)


class ClaimTimeout(HarnessError, TimeoutError):
    """Another process held a claim for longer than the wait allowed."""


def claim_path(directory: str | Path) -> Path:
    """The lock file of a run directory: a sibling, so the run directory itself stays ours alone."""
    directory = Path(directory)
    return directory.with_name(directory.name + CLAIM_SUFFIX)


def claims_enabled() -> bool:
    value = os.environ.get(SWITCH_ENV, "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false"):
        raise ConfigError(f"{SWITCH_ENV}={value!r}: expected on or off")
    return value in ("on", "1", "true") and int(os.environ.get("WORLD_SIZE", "1")) <= 1


def default_timeout() -> float | None:
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds") from None
    if value < 0:
        raise ConfigError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds >= 0")
    return value


def read_claim(directory: str | Path) -> dict[str, Any] | None:
    """The record of the current (or last, if it died) holder of ``directory``'s claim; None if none."""
    try:
        text = claim_path(directory).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:   # read while the holder was writing it
        return None
    return record if isinstance(record, dict) else None


def describe(record: dict[str, Any] | None) -> str:
    if not record:
        return "an unknown process"
    return f"pid {record.get('pid')} on {record.get('host')} (since {record.get('started')}, {record.get('what')})"


@contextlib.contextmanager
def claim(directory: str | Path, what: str = "run", *, timeout: float | None = None,
          poll: float = 0.5) -> Iterator[bool]:
    """Hold the exclusive claim on ``directory`` for the duration of the block.

    Waits while another process holds it (``timeout`` seconds at most, default
    ``HARNESS_CLAIM_TIMEOUT`` or forever; :class:`ClaimTimeout` after that).  Yields True when this
    process had to wait for someone else (the caller should then expect the work to be done)."""
    if not claims_enabled():
        yield False
        return
    path = claim_path(directory)
    depth = _depths()
    key = str(path.resolve())
    if depth.get(key):
        depth[key] += 1
        try:
            yield False
        finally:
            depth[key] -= 1
        return
    timeout = default_timeout() if timeout is None else timeout
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        waited = _acquire(fd, path, what, timeout, poll)
        _take(fd, directory, what)
        depth[key] = 1
        try:
            yield waited
        finally:
            depth.pop(key, None)
            os.ftruncate(fd, 0)    # an empty record: released cleanly
    finally:
        os.close(fd)               # closing drops the lock


class HeldClaim:
    """A claim taken by :func:`try_claim`, held until :meth:`release` (or until this process exits).

    Release it from the thread that took it (re-entrancy is counted per thread)."""

    def __init__(self, path: Path | None, fd: int | None = None, key: str | None = None):
        self.path = path
        self._fd = fd
        self._key = key
        self._released = False

    def release(self) -> None:
        """Give the claim up (its record is emptied: released cleanly); a second call does nothing."""
        if self._released:
            return
        self._released = True
        depth = _depths()
        if self._key is not None and depth.get(self._key):
            depth[self._key] -= 1
            if not depth[self._key]:
                depth.pop(self._key)
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)     # closing drops the lock


def try_claim(directory: str | Path, what: str = "run") -> HeldClaim | None:
    """Take the claim on ``directory`` if no other process holds it now, without waiting.

    Returns the :class:`HeldClaim` (release it when the work is done), or None while another live
    process holds the claim.  A claim left by a dead holder is taken (and logged as recovered), as
    :func:`claim` does.  With claims off (``HARNESS_CLAIMS=off``, a multi-process launch) every call
    gets a handle that holds nothing; a claim this thread already holds is re-entered."""
    if not claims_enabled():
        return HeldClaim(None)
    path = claim_path(directory)
    depth = _depths()
    key = str(path.resolve())
    if depth.get(key):
        depth[key] += 1
        return HeldClaim(path, None, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if not _try_lock(fd, path):
            os.close(fd)
            return None
        _take(fd, directory, what)
    except BaseException:
        os.close(fd)
        raise
    depth[key] = 1
    return HeldClaim(path, fd, key)


def _depths() -> dict[str, int]:
    depth: dict[str, int] = _held.__dict__.setdefault("depth", {})
    return depth


def _take(fd: int, directory: str | Path, what: str) -> None:
    """Write this process's record into a claim whose lock it now holds (logging a dead holder's record)."""
    stale = _read_fd(fd)
    if stale:
        # The lock is free but a record is left: its holder died without releasing.
        log.warning("recovered the claim on %s left by %s (it exited without releasing)", directory,
                    describe(stale))
    _write_fd(fd, {"host": socket.gethostname(), "pid": os.getpid(), "what": what,
                   "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})


def _try_lock(fd: int, path: Path) -> bool:
    """Lock ``fd`` exclusively if no one else holds it; False when someone does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise ConfigError(f"cannot lock {path} ({exc.strerror}): this file system does not support "
                              f"flock; set {SWITCH_ENV}=off and split work with --shard") from exc
        raise


def _acquire(fd: int, path: Path, what: str, timeout: float | None, poll: float) -> bool:
    start = time.monotonic()
    waited = False
    while True:
        if _try_lock(fd, path):
            if waited:
                log.info("took the claim on %s after waiting %.1fs", path, time.monotonic() - start)
            return waited
        if not waited:
            log.info("waiting for %s: %s is claimed by %s", what, path, describe(_read_fd(fd)))
            waited = True
        if timeout is not None and time.monotonic() - start >= timeout:
            raise ClaimTimeout(f"{what}: {path} is still claimed by {describe(_read_fd(fd))} after "
                               f"{timeout:g}s ({TIMEOUT_ENV} sets the wait)")
        time.sleep(poll)


def _read_fd(fd: int) -> dict[str, Any] | None:
    size = os.fstat(fd).st_size
    raw = os.pread(fd, size, 0) if size else b""
    try:
        record = json.loads(raw.decode("utf-8")) if raw.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _write_fd(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record).encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
