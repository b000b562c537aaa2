"""Helpers for id arrays: factorising strings into order-preserving integer codes."""
from __future__ import annotations

import numpy as np


def as_id_array(values) -> np.ndarray:
    """Return ids as a numpy unicode array (fast C-level sorting and comparison).

    Unicode arrays compare by code point, which is the same order as ``strcmp`` on
    UTF-8 bytes, i.e. trec_eval's docno order.
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "U":
        return arr
    if arr.size == 0:
        return np.asarray([], dtype="<U1")
    return arr.astype(str)


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(uniques, codes)`` with ``uniques`` sorted, so codes preserve string order."""
    uniques, codes = np.unique(values, return_inverse=True)
    return uniques, codes.reshape(-1).astype(np.int64)


def group_bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For an array sorted by key, return ``(starts, ends)`` of each run of equal keys."""
    n = len(sorted_keys)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    change = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    starts = np.concatenate(([0], change)).astype(np.int64)
    ends = np.concatenate((change, [n])).astype(np.int64)
    return starts, ends
