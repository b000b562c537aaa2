"""Fixtures for trainer tests: a tiny random BERT with the MiniLM tokenizer, tiny training data."""
from __future__ import annotations

import pytest
from trainutil import make_data, make_tiny_bert


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A tiny BERT with dropout 0.1 (the BERT default)."""
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-bert")))


@pytest.fixture(scope="session")
def tiny_model_nodrop(tmp_path_factory) -> str:
    """The same tiny BERT without dropout (deterministic forwards)."""
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-bert-nodrop"), dropout=0.0))


@pytest.fixture
def tiny_data():
    return make_data()
