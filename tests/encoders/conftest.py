"""Tiny random backbones shared by the encoder tests (built once per session, offline)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    from harness.encoders.tiny import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_decoder_dir(tmp_path_factory):
    from harness.encoders.tiny import make_tiny_decoder

    return make_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-decoder")


@pytest.fixture
def tiny_corpus():
    """30 short documents of real words (some titled, some not), deterministic."""
    import numpy as np

    from harness.data import Corpus
    from harness.encoders.tiny import TINY_WORDS

    rng = np.random.default_rng(7)
    ids, titles, texts = [], [], []
    for i in range(30):
        words = rng.choice(TINY_WORDS, size=int(rng.integers(3, 40)))
        ids.append(f"d{i}")
        titles.append(" ".join(rng.choice(TINY_WORDS, size=2)) if i % 3 else "")
        texts.append(" ".join(words))
    return Corpus(ids, titles, texts)
