"""Fixtures for trainer tests: a tiny random BERT with the MiniLM tokenizer, tiny training data."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest puts tests/ on sys.path (rootdir conftest), where the tests/methods folder shadows the
# ``methods`` package as an empty namespace package; put the repository root first instead.
_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
if "methods" in sys.modules and getattr(sys.modules["methods"], "__file__", None) is None:
    del sys.modules["methods"]

from trainutil import make_data, make_tiny_bert  # noqa: E402


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
