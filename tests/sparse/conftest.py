"""Fixtures of the sparse tests: a random sparse world behind a fake encoder."""
from __future__ import annotations

import os

import numpy as np
import pytest
from sparse_fakes import TableEncoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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

