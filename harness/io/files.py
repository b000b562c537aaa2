"""Reading text files that may be gzip-compressed, and content hashes."""
from __future__ import annotations

import gzip
import hashlib
import io
from collections.abc import Iterable
from pathlib import Path
from typing import IO


def open_text(path: str | Path) -> IO[str]:
    """Open a UTF-8 text file for reading, transparently decompressing ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(paths: Iterable[str | Path]) -> str:
    """One hash over several files (names excluded, order matters)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()
