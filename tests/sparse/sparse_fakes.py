"""A fake sparse encoder with hand-set weights (shared by the sparse tests)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.encoders.base import Encoder
from harness.encoders.sparse_vectors import SparseVectors


class TableEncoder(Encoder):
    """A sparse encoder whose weights come from a table: text -> dense row over ``vocab`` tokens."""

    kind = "sparse"
    similarity = "dot"

    def __init__(self, table: dict[str, Sequence[float]], vocab: Sequence[str], fail_after: int | None = None):
        self.table, self.vocab = table, list(vocab)
        self.doc_calls = 0
        self.fail_after = fail_after

    def identity(self) -> dict[str, Any]:
        return {"encoder": "table", "n": len(self.table)}

    def vocabulary(self) -> list[str]:
        return self.vocab

    def _rows(self, texts: Sequence[str]) -> SparseVectors:
        return SparseVectors.from_dense(np.array([self.table[t] for t in texts], dtype=np.float32).reshape(
            len(texts), len(self.vocab)))

    def encode_queries(self, texts, *, batch_size=None, progress=True):
        return self._rows(texts)

    def encode_docs(self, texts, *, batch_size=None, progress=True):
        self.doc_calls += 1
        if self.fail_after is not None and self.doc_calls > self.fail_after:
            raise KeyboardInterrupt("killed")
        return self._rows(texts)
