"""Random streams of the resampling tests.

A stream is derived from the user's seed and a key, hashed with SHA-256 (stable
across processes and Python versions, unlike ``hash()``) and fed to
:class:`numpy.random.SeedSequence` together with the seed.

The tests of a suite draw from :func:`draws_rng`, keyed by
``(purpose, scope, n)`` where the scope is ``(dataset, metric)`` (or an aggregate's
name, method, datasets and metric) and ``n`` the number of paired queries: the
key names no system, so every system compared on the same queries shares the
same draws (identical scores give identical p-values) and a comparison's p-value
depends only on its own data, scope, seed and ``B``: adding, removing or
reordering other systems never changes it.
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


def draws_rng(seed: int, purpose: str, scope: Sequence[object], n: int) -> np.random.Generator:
    """The stream shared by all systems tested on ``scope`` with ``n`` paired queries.

    ``purpose`` separates the test's draws (``"test"``) from the interval's (``"ci"``).
    """
    return comparison_rng(seed, ("shared", purpose, *scope, int(n)))
