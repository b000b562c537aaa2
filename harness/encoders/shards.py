"""One shard of an embedding-cache entry: checked, then written atomically.

Shared by the cache (:mod:`harness.encoders.cache`, one process) and the device workers
(:mod:`harness.encoders.devices`, one process per device), which write into the same entry.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.errors import ConfigError
from harness.io import atomic_write


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
