"""Atomic writes: a reader never sees a half-written file or results directory.

Files are written to a temporary sibling and moved into place with ``os.replace``
(atomic on POSIX within one file system).  A whole output directory can be built
the same way with :func:`atomic_dir`.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success move it onto ``path``.

    A ``.gz`` suffix writes gzip.  On any exception the temporary file is removed
    and ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    binary = "b" in mode
    try:
        if path.suffix == ".gz":
            # mtime=0 keeps gzip output byte-identical across runs.
            raw = open(tmp, "wb")
            # Level 6 (zlib's default trade-off): level 9 is much slower for little gain on runs.
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
            handle: IO[Any] = gz if binary else _TextGzip(gz, encoding or "utf-8")
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


@contextlib.contextmanager
def atomic_dir(path: str | Path, overwrite: bool = True) -> Iterator[Path]:
    """Build a directory under a temporary name, then rename it onto ``path``.

    Yields the temporary directory; write everything into it.  On success an existing
    ``path`` is replaced (if ``overwrite``); on failure the temporary directory is
    deleted and ``path`` is untouched, so a results directory is either complete or absent.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"{path} already exists")
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
