"""Removing what a killed writer left behind: :func:`~harness.io.atomic.atomic_dir`'s temporary folders.

:func:`~harness.io.atomic.atomic_dir` builds ``<name>`` as ``.<name>.<random>.tmp`` beside it and
moves a replaced folder to ``.<name>.old-<random>/previous`` until the new one is in place.  A writer
killed meanwhile (``kill -9``, a lost node) leaves them; content keys and resume never look at them
again, so without this module they stay for ever (a whole run file each).

Both folders carry a writer record (``.harness-writer``: host, pid, process start) while they
exist.  One is *stale*, and removed, when its writer is known dead:

* the record's host is this host and its pid is gone, or is a different process now (its start
  time differs: the pid was reused); a live process here keeps its folder whatever else is true; or
* the writer ran on another host, ``<name>`` is worked on under a claim (:mod:`harness.io.claims`:
  suite cells and their training runs are), and that claim is free: every writer of ``<name>`` holds
  it while it writes, and the kernel (or the NFS server) drops it when the writer dies.  The claim is
  held (without waiting) while the folder is removed, so no new writer can start on ``<name>``
  meanwhile.

Anything else is kept: a folder without a writer record (not ours, or from an older version), one
whose writer lives, one written from another host whose claim is held or that has no claim.  A
stale ``.old-`` folder whose ``<name>`` is missing (the writer died between the two renames) holds
the previous complete folder: it is put back at ``<name>`` instead of deleted.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.io.atomic import process_start, read_writer
from harness.io.claims import claim_path, claims_enabled

log = logging.getLogger(__name__)

# tempfile's random part: 8 characters of [a-z0-9_]
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?:[a-z0-9_]{8}\.tmp|old-[a-z0-9_]{8})", re.ASCII)


def _writer_dead_here(writer: dict[str, Any]) -> bool:
    """True when the writer ran on this host and its process is gone (or its pid now names another)."""
    if writer.get("host") != socket.gethostname():
        return False
    pid = writer["pid"]
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:      # a live process of another user
        pass
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        if stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X"):      # killed, not yet reaped by its parent
            return True
    recorded, now = writer.get("pid_start"), process_start(pid)
    return recorded is not None and now is not None and recorded != now


@contextlib.contextmanager
def _free_claim(directory: Path) -> Iterator[bool]:
    """Hold ``directory``'s claim lock for the block if it exists and nobody holds it (no waiting);
    yields whether it is held.  Its record is left as it is (the next real claim logs a dead holder)."""
    fd = None
    if claims_enabled():
        with contextlib.suppress(OSError):
            fd = os.open(claim_path(directory), os.O_RDWR)    # never created here: no claim, no claimed writer
    free = False
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free = True
            except OSError:      # held (by this process too: another open file), or no locks here
                free = False
        yield free
    finally:
        if fd is not None:
            os.close(fd)         # drops the lock


def _discard(temp: Path, target: Path, writer: dict[str, Any]) -> None:
    previous = temp / "previous"
    if ".old-" in temp.name and previous.is_dir() and not os.path.lexists(target):
        os.replace(previous, target)
        log.warning("put back %s from %s (its writer, pid %s on %s, died while replacing it)", target, temp.name,
                    writer.get("pid"), writer.get("host"))
    shutil.rmtree(temp, ignore_errors=True)
    log.info("removed %s, left by a dead writer (pid %s on %s)", temp, writer.get("pid"), writer.get("host"))


def sweep_stale_temps(parent: str | Path, name: str | None = None) -> list[Path]:
    """Remove the temporary folders in ``parent`` (of ``name`` only, if given) whose writers are dead;
    returns them.  Never raises for a folder it cannot read or remove (a sweep is housekeeping)."""
    parent = Path(parent)
    try:
        entries = sorted(os.scandir(parent), key=lambda e: e.name)
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = TEMP_NAME.fullmatch(entry.name)
        if match is None or (name is not None and match["name"] != name):
            continue
        temp = Path(entry.path)
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            writer = read_writer(temp)
            if writer is None:
                continue
            target = parent / match["name"]
            if writer.get("host") == socket.gethostname():
                if _writer_dead_here(writer):
                    _discard(temp, target, writer)
                    removed.append(temp)
                continue        # a live process here: kept whatever its claim says
            with _free_claim(target) as free:
                if free and temp.is_dir():
                    _discard(temp, target, writer)
                    removed.append(temp)
        except OSError as exc:
            log.warning("could not remove the leftover %s: %s", temp, exc)
    return removed
