"""Per-comparison random streams.

Every resampling test draws from a generator derived from the user's seed *and*
the comparison's own key (dataset, metric, baseline, system, purpose).  The key is
hashed with SHA-256 (stable across processes and Python versions, unlike
``hash()``) and fed to :class:`numpy.random.SeedSequence` together with the seed.
So a comparison's p-value depends only on its own data, key and seed: adding,
removing or reordering other comparisons never changes it.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np

from harness.stats.paired import StatisticsError


def comparison_seed(seed: int, key: Sequence[object]) -> np.random.SeedSequence:
    """A :class:`~numpy.random.SeedSequence` for one comparison, from ``seed`` and its ``key``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise StatisticsError(f"seed must be a non-negative integer, got {seed!r}")
    blob = json.dumps([str(part) for part in key], ensure_ascii=False).encode("utf-8")
    digest = hashlib.sha256(blob).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.SeedSequence([int(seed), *words])


def comparison_rng(seed: int, key: Sequence[object]) -> np.random.Generator:
    """A fresh PCG64 generator for one comparison (see :func:`comparison_seed`)."""
    return np.random.Generator(np.random.PCG64(comparison_seed(seed, key)))
