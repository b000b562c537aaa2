"""Atomic writes: a reader never sees a half-written file or results directory.

Files are written to a temporary sibling and moved into place with ``os.replace``
(atomic on POSIX within one file system).  A whole output directory can be built
the same way with :func:`atomic_dir`.

Three rules keep a user's data safe:

* :func:`atomic_dir` never replaces a directory the harness did not write: the caller
  names what makes a directory its own (``is_ours``, e.g. "holds our manifest"), and
  anything else (an unrelated folder, a file, a link) is refused with
  :class:`OutputExistsError`; only an empty directory is always replaceable.
* Nor one that holds anything besides what the harness wrote: every folder
  :func:`atomic_dir` builds gets a record of its files (``.harness-files``, written last), and
  a folder is replaced only while everything in it is on that record (a user's ``NOTES.md``
  or ``figs/`` dropped into a result folder makes it theirs: refused, naming the files).  A
  folder from before the record existed is judged by the caller's ``owned`` name patterns,
  and refused when the caller has none.
* Files and folders get the modes the process umask allows (``tempfile`` would make
  them 0600/0700), so a colleague sharing a results root can read them.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import fnmatch
import gzip
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, cast

from harness.errors import HarnessError

# In every folder atomic_dir wrote: the files it wrote.  No suffix: model fingerprints hash .json files
# (harness.encoders.backbone), and this file is not part of the model.
RECORD_FILE = ".harness-files"
WRITER_FILE = ".harness-writer"     # in atomic_dir's temporary folders while they are filled: who fills them
SHOWN_FOREIGN = 5                   # foreign files named in a refusal (then a count)


class OutputExistsError(HarnessError, FileExistsError):
    """An output path is taken by something the harness did not write (or may not replace)."""


def check_new_file(path: str | Path, overwrite: bool, flag: str = "--overwrite") -> None:
    """Before any work: refuse an existing output file unless ``overwrite`` (a directory or a link
    to one is never a file to write)."""
    path = Path(path)
    if path.is_dir():
        raise OutputExistsError(f"{path} is a directory; give a file name to write to")
    if os.path.lexists(path) and not overwrite:
        raise OutputExistsError(f"{path} exists; pass {flag} to replace it")


def _umask() -> int:
    # os.umask can only be read by setting it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _honour_umask(path: Path, directory: bool) -> None:
    """``mkstemp``/``mkdtemp`` create 0600/0700; give the modes a plain open()/mkdir() would."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success move it onto ``path``.

    A ``.gz`` suffix writes gzip.  On any exception the temporary file is removed
    and ``path`` is left untouched.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputExistsError(f"{path} is a directory; give a file name to write to")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    _honour_umask(tmp, directory=False)
    binary = "b" in mode
    try:
        if path.suffix == ".gz":
            # mtime=0 keeps gzip output byte-identical across runs.
            raw = open(tmp, "wb")
            # Level 6 (zlib's default trade-off): level 9 is much slower for little gain on runs.
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
            # Both give the write side of IO that writers use (write, writelines, flush).
            handle = cast(IO[Any], gz if binary else _TextGzip(gz, encoding or "utf-8"))
            try:
                yield handle
            finally:
                if not binary:
                    handle.flush()
                gz.close()
                raw.close()
        else:
            with open(tmp, mode, encoding=None if binary else encoding) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


class _TextGzip:
    """Minimal text wrapper over a GzipFile (io.TextIOWrapper would close the raw file early)."""

    def __init__(self, gz: gzip.GzipFile, encoding: str):
        self._gz = gz
        self._encoding = encoding

    def write(self, text: str) -> int:
        self._gz.write(text.encode(self._encoding))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._gz.flush()


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    with atomic_write(path, "w") as handle:
        json.dump(obj, handle, indent=indent, ensure_ascii=False, sort_keys=False, allow_nan=False)
        handle.write("\n")


# --------------------------------------------------------------------------- what a folder holds
def _walk(folder: Path) -> tuple[list[str], list[str]]:
    """Relative POSIX paths of the files (links included) and folders below ``folder``; links not followed."""
    files: list[str] = []
    dirs: list[str] = []

    def visit(directory: Path, prefix: str) -> None:
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = prefix + entry.name
                if not prefix and entry.name in (RECORD_FILE, WRITER_FILE):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(rel)
                    visit(Path(entry.path), rel + "/")
                else:
                    files.append(rel)

    visit(folder, "")
    return files, dirs


def write_record(folder: str | Path, **extra: Any) -> None:
    """Record every file and folder now below ``folder`` as written by the harness (plus ``extra``
    fields, e.g. what a download is of); :func:`atomic_dir` calls it after its body."""
    folder = Path(folder)
    files, dirs = _walk(folder)
    atomic_write_json(folder / RECORD_FILE, {"written_by": "retrieval-harness", **extra, "dirs": dirs,
                                             "files": files}, indent=1)


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """The record :func:`write_record` left in ``folder``; None if absent or not a record of ours."""
    path = Path(folder) / RECORD_FILE
    try:
        if path.is_symlink() or not path.is_file():
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(record, dict) and record.get("written_by") == "retrieval-harness"
            and isinstance(record.get("files"), list) and isinstance(record.get("dirs"), list)):
        return None
    return record


def foreign_entries(folder: str | Path, owned: Sequence[str] | None = None) -> list[str] | None:
    """What in ``folder`` the harness did not write (folders end in ``/``; their content is not listed).

    By the folder's record (:func:`write_record`); a folder without one (written before records
    existed) by ``owned``, ``fnmatch`` patterns of the relative paths of the files the caller writes.
    None when neither is there: nothing tells what is the harness's."""
    folder = Path(folder)
    record = read_record(folder)
    if record is not None:
        files, dirs = set(record["files"]), set(record["dirs"])

        def ours(rel: str, is_dir: bool) -> bool:
            return rel in (dirs if is_dir else files)
    elif owned is not None:
        patterns = tuple(owned)

        def ours(rel: str, is_dir: bool) -> bool:
            return is_dir or any(fnmatch.fnmatchcase(rel, p) for p in patterns)
    else:
        return None
    foreign: list[str] = []

    def visit(directory: Path, prefix: str) -> None:
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = prefix + entry.name
                if not prefix and entry.name == RECORD_FILE:
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if not ours(rel, is_dir):
                    foreign.append(rel + "/" if is_dir else rel)
                elif is_dir:
                    visit(Path(entry.path), rel + "/")

    visit(folder, "")
    return foreign


def _foreign_message(path: Path, foreign: list[str]) -> str:
    shown = ", ".join(foreign[:SHOWN_FOREIGN]) + (", ..." if len(foreign) > SHOWN_FOREIGN else "")
    return (f"{path} holds {len(foreign)} file(s) the harness did not write ({shown}); refusing to replace or "
            f"delete it (move them out of the folder, or choose another output folder)")


def check_replaceable(path: str | Path, is_ours: Callable[[Path], bool] | None, what: str = "a harness output",
                      overwrite: bool = True, *, owned: Sequence[str] | None = None) -> None:
    """Refuse (with :class:`OutputExistsError`) to replace ``path`` unless it is absent, an empty
    directory, or a directory ``is_ours`` recognises that holds nothing but what the harness wrote
    (:func:`foreign_entries`; ``owned``: the caller's name patterns for a folder without a record),
    and ``overwrite`` allows replacing it."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        raise OutputExistsError(f"{path} exists and is not a directory; refusing to replace it "
                                f"(choose another output path)")
    if not any(path.iterdir()):
        return
    if is_ours is None or not is_ours(path):
        raise OutputExistsError(f"{path} exists and is not {what}; refusing to replace or delete it "
                                f"(choose a new folder, or remove it yourself)")
    foreign = foreign_entries(path, owned)
    if foreign is None:
        raise OutputExistsError(f"{path} looks like {what} but has no record of the files the harness wrote "
                                f"there (written by an older version?); refusing to replace it (remove it yourself, "
                                f"or choose another folder)")
    if foreign:
        raise OutputExistsError(_foreign_message(path, foreign))
    if not overwrite:
        raise OutputExistsError(f"{path} already holds {what}; pass --overwrite to replace it")


# --------------------------------------------------------------------------- who fills a temporary folder
def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), to tell a reused pid from the
    process that wrote a record; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()      # after "pid (comm) ": state is field 3, starttime 22
    return fields[19] if len(fields) > 19 else None


def _write_writer(folder: Path) -> None:
    """Say who fills ``folder`` (host, pid, process start), so a later run can tell a dead writer's
    leftover from a folder a live one is still filling (:mod:`harness.io.stale`)."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start(os.getpid()),
              "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    (folder / WRITER_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")


def read_writer(folder: str | Path) -> dict[str, Any] | None:
    """The writer record of one of :func:`atomic_dir`'s temporary folders; None if it has none."""
    try:
        record = json.loads((Path(folder) / WRITER_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


@contextlib.contextmanager
def atomic_dir(path: str | Path, overwrite: bool = True, *, is_ours: Callable[[Path], bool] | None = None,
               what: str = "a harness output", owned: Sequence[str] | None = None,
               record: dict[str, Any] | None = None) -> Iterator[Path]:
    """Build a directory under a temporary name, then rename it onto ``path``.

    Yields the temporary directory; write everything into it.  After the body the folder's
    record of files is written (:func:`write_record`, with ``record``'s extra fields).  On success
    ``path`` is created, or an existing one replaced if it is an empty directory, or ``is_ours(path)``
    says the harness wrote it and it holds nothing the harness did not write (see
    :func:`check_replaceable`; ``owned``: name patterns for a folder from before records), and
    ``overwrite``; anything else at ``path`` is refused *before* the body runs, so no work is wasted
    and nothing is deleted.  On failure the temporary directory is deleted and ``path`` is untouched:
    a results directory is either complete or absent.

    The temporary folder is ``.<name>.<random>.tmp`` beside ``path``, the replaced one is moved to
    ``.<name>.old-<random>/previous`` until the new one is in place; both carry a writer record
    while they exist, so a run after a crash removes them (:func:`harness.io.stale.sweep_stale_temps`).
    """
    path = Path(path)
    check_replaceable(path, is_ours, what, overwrite, owned=owned)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        _honour_umask(tmp, directory=True)
        _write_writer(tmp)
        yield tmp
        write_record(tmp, **(record or {}))
        (tmp / WRITER_FILE).unlink()
        # Checked again: something may have appeared at ``path`` while the body ran.
        check_replaceable(path, is_ours, what, overwrite, owned=owned)
        if os.path.lexists(path):
            _swap(path, tmp, owned)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap(path: Path, tmp: Path, owned: Sequence[str] | None) -> None:
    """Move the previous ``path`` aside, check once more (now that nobody can add to it) that it held
    only our files, put ``tmp`` in its place, then delete the previous one."""
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    previous = old / "previous"
    try:
        _write_writer(old)
        os.replace(path, previous)
    except BaseException:
        shutil.rmtree(old, ignore_errors=True)
        raise
    try:
        foreign = foreign_entries(previous, owned) if previous.is_dir() and any(previous.iterdir()) else []
        if foreign:
            raise OutputExistsError(_foreign_message(path, foreign))
        if foreign is None:
            raise OutputExistsError(f"{path} lost the record of the files the harness wrote there; refusing to "
                                    f"replace it")
        os.replace(tmp, path)
    except BaseException:
        os.replace(previous, path)      # put the previous folder back
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
