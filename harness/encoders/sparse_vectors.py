"""Sparse term-weight vectors: the output type of sparse encoders (CSR over a vocabulary).

A :class:`SparseVectors` holds ``n`` texts as compressed rows: ``indptr`` (n + 1 offsets),
``indices`` (vocabulary ids, int32, ascending within a row) and ``data`` (float32 weights,
all > 0).  The vocabulary ids are the model's token ids, so token strings come back with
``vectors.terms(i, vocabulary)`` where ``vocabulary[id]`` is the token (a sparse encoder
provides ``vocabulary()``).  The type knows nothing of how the weights were made.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError


@dataclass(frozen=True)
class SparseVectors:
    """``n`` sparse vectors over a vocabulary of ``vocab_size`` ids, in CSR form."""

    indptr: np.ndarray      # int64 (n + 1,)
    indices: np.ndarray     # int32 (nnz,)
    data: np.ndarray        # float32 (nnz,)
    vocab_size: int

    def __post_init__(self) -> None:
        indptr, indices, data = self.indptr, self.indices, self.data
        if indptr.ndim != 1 or len(indptr) < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ConfigError("sparse vectors: indptr must start at 0 and never decrease")
        if indices.shape != data.shape or indices.ndim != 1 or int(indptr[-1]) != len(indices):
            raise ConfigError(f"sparse vectors: {len(indices)} ids and {len(data)} weights for "
                              f"indptr ending at {int(indptr[-1])}")
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= self.vocab_size):
            raise ConfigError(f"sparse vectors: vocabulary ids outside [0, {self.vocab_size})")

    # ------------------------------------------------------------------ build
    @classmethod
    def from_dense(cls, weights: np.ndarray, top_k: int | None = None) -> SparseVectors:
        """Rows of a dense ``(n, V)`` weight matrix; zeros dropped, only the ``top_k`` largest kept per row."""
        w = np.asarray(weights, dtype=np.float32)
        if w.ndim != 2:
            raise ConfigError(f"sparse vectors: expected an (n, V) matrix, got shape {w.shape}")
        if top_k is not None and top_k < w.shape[1]:
            w = keep_top_k(w, top_k)
        rows, cols = np.nonzero(w)
        indptr = np.zeros(len(w) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(w)), out=indptr[1:])
        return cls(indptr, cols.astype(np.int32), w[rows, cols], int(w.shape[1]))

    @classmethod
    def empty(cls, vocab_size: int) -> SparseVectors:
        return cls(np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), int(vocab_size))

    @classmethod
    def concatenate(cls, parts: Sequence[SparseVectors]) -> SparseVectors:
        """Rows of several blocks, in order (all over the same vocabulary)."""
        if not parts:
            raise ConfigError("sparse vectors: nothing to concatenate")
        sizes = {p.vocab_size for p in parts}
        if len(sizes) != 1:
            raise ConfigError(f"sparse vectors: blocks over different vocabulary sizes {sorted(sizes)}")
        offsets = np.cumsum([0] + [len(p.indices) for p in parts])
        indptr = np.concatenate([np.zeros(1, np.int64)] + [p.indptr[1:] + o for p, o in zip(parts, offsets)])
        return cls(indptr, np.concatenate([p.indices for p in parts]), np.concatenate([p.data for p in parts]),
                   sizes.pop())

    def take(self, rows: np.ndarray) -> SparseVectors:
        """The given rows, in the given order."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        gather = np.repeat(starts - indptr[:-1], lengths) + np.arange(int(indptr[-1]))
        return SparseVectors(indptr, self.indices[gather], self.data[gather], self.vocab_size)

    # ------------------------------------------------------------------- read
    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> np.ndarray:
        """Non-zeros per row (int64)."""
        return np.diff(self.indptr)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(vocabulary ids, weights)`` of row ``i``."""
        a, b = int(self.indptr[i]), int(self.indptr[i + 1])
        return self.indices[a:b], self.data[a:b]

    def terms(self, i: int, vocabulary: Sequence[str]) -> dict[str, float]:
        """Row ``i`` as ``{token string: weight}``."""
        ids, weights = self.row(i)
        return {vocabulary[int(t)]: float(w) for t, w in zip(ids, weights)}

    def to_scipy(self):
        """A ``scipy.sparse.csr_array`` of shape ``(n, vocab_size)`` (no copy of the arrays)."""
        from scipy import sparse

        return sparse.csr_array((self.data, self.indices, self.indptr), shape=(len(self), self.vocab_size))

    def to_dense(self) -> np.ndarray:
        return self.to_scipy().toarray()


def keep_top_k(weights: np.ndarray, k: int) -> np.ndarray:
    """A copy of ``(n, V)`` weights with all but each row's ``k`` largest set to 0 (ties: lower id kept)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"top-k pruning needs a positive integer k, got {k!r}")
    # A stable sort on -w keeps the lower vocabulary id among equal weights, deterministically.
    order = np.argsort(-weights, axis=1, kind="stable")[:, :k]
    out = np.zeros_like(weights)
    rows = np.arange(len(weights))[:, None]
    out[rows, order] = weights[rows, order]
    return out
