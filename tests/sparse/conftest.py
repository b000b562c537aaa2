"""Fixtures of the sparse tests: a fake sparse encoder with hand-set weights, and tiny texts."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from harness.encoders.base import Encoder
from harness.encoders.sparse_vectors import SparseVectors

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


@pytest.fixture
def random_world():
    """40 documents and 12 queries with random sparse weights over 50 terms (deterministic)."""
    from harness.data import Corpus
    from harness.data.beir import Queries

    rng = np.random.default_rng(3)
    vocab = [f"t{i}" for i in range(50)]

    def row(density: float) -> list[float]:
        w = rng.gamma(1.5, 0.8, size=50) * (rng.random(50) < density)
        return [float(x) for x in np.round(w, 3)]

    docs = {f"doc {i}": row(0.2) for i in range(40)}
    queries = {f"query {i}": row(0.1) for i in range(12)}
    corpus = Corpus([f"d{i}" for i in range(40)], [""] * 40, list(docs))
    qs = Queries([f"q{i}" for i in range(12)], list(queries))
    return TableEncoder({**docs, **queries}, vocab), corpus, qs
