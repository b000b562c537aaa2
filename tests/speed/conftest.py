"""Fixtures of the speed tests."""
from __future__ import annotations

import pytest

SCIFACT_TEXTS = 256      # passages the encoding benchmarks time


@pytest.fixture(scope="module")
def scifact_passages(shared_data):
    """The first SCIFACT_TEXTS SciFact passages (title + text), the encoding benchmarks' input."""
    from harness.data import load_beir

    corpus = load_beir(shared_data / "scifact", "test").corpus
    return corpus.subset(corpus.ids[:SCIFACT_TEXTS]).passages()
