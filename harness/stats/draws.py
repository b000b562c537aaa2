"""Resampling draws in fixed-size blocks: sign-flip indicators and bootstrap counts.

Both generators yield float64 blocks of ``rows x n`` whose row count depends only
on ``n``; every block is drawn in full and the last one is cut to size.  So the
first ``B`` rows of a stream are the same whatever the total number of rows
asked for (a larger ``B`` extends a smaller one), on every machine, and the
number of values consumed from the generator depends only on ``(n, B)``, never
on the data.  That makes one stream shareable by every system compared on the
same queries (see :mod:`harness.stats.shared`).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Values per block (rows x n): 8 MiB of float64, small enough for any machine.
_BLOCK_ELEMENTS = 1 << 20
# Byte tables (sign_flip_counts) up to this many queries (blocks of >= 64 rows), at most this many bytes at once.
TABLE_MAX_N = 1 << 14
_TABLE_BYTES = 64 << 20


def block_rows(n: int) -> int:
    """Rows per block for ``n`` queries (fixed, so streams do not depend on memory)."""
    return max(1, _BLOCK_ELEMENTS // max(n, 1))


def sign_flip_byte_blocks(rng: np.random.Generator, n: int, resamples: int) -> Iterator[np.ndarray]:
    """Blocks of packed flip indicators (rows x ceil(n/8) bytes), ``resamples`` rows in all.

    Bit ``7 - b`` of byte ``j`` (big-endian, as :func:`numpy.unpackbits`) flips query
    ``8 j + b``; bits past ``n`` in the last byte are unused.
    """
    row_bytes = (n + 7) // 8
    rows = block_rows(n)
    done = 0
    while done < resamples:
        raw = np.frombuffer(rng.bytes(rows * row_bytes), dtype=np.uint8).reshape(rows, row_bytes)
        take = min(rows, resamples - done)
        yield raw[:take]
        done += take


def sign_flip_blocks(rng: np.random.Generator, n: int, resamples: int) -> Iterator[np.ndarray]:
    """Blocks of 0/1 flip indicators ``b`` (sign ``1 - 2b``), ``resamples`` rows in all.

    Bits come from :meth:`numpy.random.Generator.bytes` (8 indicators per random
    byte), which is several times cheaper than drawing integers one by one.
    """
    for raw in sign_flip_byte_blocks(rng, n, resamples):
        yield np.unpackbits(raw, axis=1, count=n).astype(np.float64)


def byte_tables(diffs: np.ndarray) -> np.ndarray:
    """``tables[j, v, i]``: the sum of ``diffs[i, 8 j + b]`` over the bits ``b`` set in byte value ``v``."""
    k, n = diffs.shape
    row_bytes = (n + 7) // 8
    padded = np.zeros((k, row_bytes * 8), dtype=np.float64)
    padded[:, :n] = diffs
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)   # 256 x 8
    out = np.zeros((row_bytes, 256, k), dtype=np.float64)
    for j in range(row_bytes):
        block = padded[:, 8 * j:8 * j + 8]               # k x 8
        for b in range(8):                               # the same order for every system and k
            out[j] += bits[:, b, None] * block[None, :, b]
    return out


def bootstrap_index_blocks(rng: np.random.Generator, n: int, resamples: int) -> Iterator[np.ndarray]:
    """Blocks of bootstrap query indices (rows x n, drawn with replacement), ``resamples`` rows in all.

    16-bit draws where ``n`` allows (cheaper), so the stream depends on ``n`` only.
    """
    rows = block_rows(n)
    dtype = np.uint16 if n <= 1 << 16 else np.int64
    done = 0
    while done < resamples:
        idx = rng.integers(0, n, size=(rows, n), dtype=dtype)
        take = min(rows, resamples - done)
        yield idx[:take].astype(np.intp)
        done += take


def sign_flip_counts(diffs: np.ndarray, thresholds: np.ndarray, resamples: int,
                     rng: np.random.Generator) -> np.ndarray:
    """For each row ``d`` of ``diffs`` (k x n): how many of the shared sign vectors give ``|sum s_i d_i| >= t``.

    Up to ``TABLE_MAX_N`` queries the flipped part ``sum_i b_i d_i`` is read from
    per-byte tables (:func:`byte_tables`): one lookup and add per 8 queries instead
    of unpacking every bit and a matrix product (3-10x faster for one system, 1.5-3x
    for 10-40).  Each row's sums are then added in the same order whatever the
    other rows, so a system's count is bit-identical whichever systems share its
    draws.  Longer vectors (a pooled aggregate of many datasets) take one
    ``(rows x n) @ (n x k)`` product per block, whose rounding may depend on ``k``
    in the last bit; the tolerance already in ``thresholds`` absorbs that (equal
    statistics count as at least as extreme).  The choice depends on ``n`` only.
    """
    diffs = np.asarray(diffs, dtype=np.float64)
    k, n = diffs.shape
    totals = diffs.sum(axis=1)
    counts = np.zeros(k, dtype=np.int64)
    if n > TABLE_MAX_N:
        for flips in sign_flip_blocks(rng, n, resamples):
            sums = totals - 2.0 * (flips @ diffs.T)      # sum(s_i d_i) with s_i = 1 - 2 b_i
            counts += np.count_nonzero(np.abs(sums) >= thresholds, axis=0)
        return counts
    row_bytes = (n + 7) // 8
    chunk = max(1, _TABLE_BYTES // (row_bytes * 256 * 8))     # systems per table
    tables = [byte_tables(diffs[i:i + chunk]) for i in range(0, k, chunk)]
    for raw in sign_flip_byte_blocks(rng, n, resamples):
        for start, table in zip(range(0, k, chunk), tables):
            stop = start + table.shape[2]
            flipped = np.zeros((len(raw), stop - start), dtype=np.float64)
            for j in range(row_bytes):
                flipped += table[j][raw[:, j]]
            sums = totals[start:stop] - 2.0 * flipped
            counts[start:stop] += np.count_nonzero(np.abs(sums) >= thresholds[start:stop], axis=0)
    return counts


def bootstrap_means(diffs: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap resample means (k x resamples) of each row of ``diffs`` (k x n), from shared draws.

    Each row is gathered and summed on its own (not in one matrix product for all
    rows): a row's means are then bit-identical whatever the other rows, so
    interval bounds never change when systems are added.
    """
    n = diffs.shape[1]
    out = np.empty((len(diffs), resamples), dtype=np.float64)
    done = 0
    for idx in bootstrap_index_blocks(rng, n, resamples):
        for i, d in enumerate(diffs):
            out[i, done:done + len(idx)] = np.take(d, idx).sum(axis=1) / n
        done += len(idx)
    return out
