"""Atomic writes: a reader never sees a half-written file or results directory.

Files are written to a temporary sibling and moved into place with ``os.replace``
(atomic on POSIX within one file system).  A whole output directory can be built
the same way with :func:`atomic_dir`.

Two rules keep a user's data safe:

* :func:`atomic_dir` never replaces a directory the harness did not write: the caller
  names what makes a directory its own (``is_ours``, e.g. "holds our manifest"), and
  anything else (an unrelated folder, a file, a link) is refused with
  :class:`OutputExistsError`; only an empty directory is always replaceable.
* Files and folders get the modes the process umask allows (``tempfile`` would make
  them 0600/0700), so a colleague sharing a results root can read them.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from harness.errors import HarnessError


class OutputExistsError(HarnessError, FileExistsError):
    """An output path is taken by something the harness did not write (or may not replace)."""


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


def check_replaceable(path: str | Path, is_ours: Callable[[Path], bool] | None, what: str = "a harness output",
                      overwrite: bool = True) -> None:
    """Refuse (with :class:`OutputExistsError`) to replace ``path`` unless it is absent, an empty
    directory, or a directory ``is_ours`` recognises (and ``overwrite`` allows replacing it)."""
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
    if not overwrite:
        raise OutputExistsError(f"{path} already holds {what}; pass --overwrite to replace it")


@contextlib.contextmanager
def atomic_dir(path: str | Path, overwrite: bool = True, *, is_ours: Callable[[Path], bool] | None = None,
               what: str = "a harness output") -> Iterator[Path]:
    """Build a directory under a temporary name, then rename it onto ``path``.

    Yields the temporary directory; write everything into it.  On success ``path`` is
    created, or an existing one replaced if it is an empty directory or ``is_ours(path)``
    says the harness wrote it (and ``overwrite``); anything else at ``path`` is refused
    *before* the body runs, so no work is wasted and nothing is deleted.  On failure the
    temporary directory is deleted and ``path`` is untouched: a results directory is
    either complete or absent.
    """
    path = Path(path)
    check_replaceable(path, is_ours, what, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    _honour_umask(tmp, directory=True)
    try:
        yield tmp
        # Checked again: something may have appeared at ``path`` while the body ran.
        check_replaceable(path, is_ours, what, overwrite)
        if os.path.lexists(path):
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            os.replace(path, old / "previous")
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old / "previous", path)   # put the previous result back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
