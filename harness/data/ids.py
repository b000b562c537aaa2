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


def hash_ids(values: np.ndarray) -> np.ndarray:
    """A 64-bit polynomial hash of each id string, vectorised over the array's code points.

    Used to find equal ids (duplicates, joins) without sorting strings; callers
    confirm hash matches by comparing the real strings, so collisions are harmless.
    """
    arr = as_id_array(values)
    n = len(arr)
    width = arr.dtype.itemsize // 4
    h = np.full(n, 1469598103934665603, dtype=np.uint64)
    if n == 0 or width == 0:
        return h
    points = arr.view(np.uint32).reshape(n, width)
    prime = np.uint64(1099511628211)
    with np.errstate(over="ignore"):
        for j in range(width):
            h = h * prime + points[:, j].astype(np.uint64)
    return h


def factorize_grouped(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`factorize`, but fast when equal values already sit in contiguous blocks
    (runs and qrels usually list each query's rows together)."""
    n = len(values)
    if n == 0:
        return values[:0], np.zeros(0, dtype=np.int64)
    starts, ends = group_bounds(values)
    heads = values[starts]
    uniques, head_codes = np.unique(heads, return_inverse=True)
    if len(uniques) != len(heads):          # a value appears in two blocks: not grouped
        return factorize(values)
    return uniques, np.repeat(head_codes.reshape(-1).astype(np.int64), ends - starts)
