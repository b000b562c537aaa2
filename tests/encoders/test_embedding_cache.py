"""The embedding cache: skip on a hit, resume after an interruption, key on everything that matters."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.data import Corpus
from harness.encoders.base import Encoder
from harness.encoders.cache import cache_root, embedding_key, encode_corpus
from harness.encoders.hf import HFEncoder
from harness.errors import ConfigError


class CountingEncoder(Encoder):
    """Delegates to a real encoder, counting encode_docs calls; optionally fails after ``fail_after`` calls."""

    def __init__(self, inner: Encoder, fail_after: int | None = None):
        self.inner = inner
        self.fail_after = fail_after
        self.calls = 0
        self.texts = 0

    def identity(self):
        return self.inner.identity()

    def encode_queries(self, texts, *, batch_size=None, progress=True):
        return self.inner.encode_queries(texts, batch_size=batch_size, progress=progress)

    def encode_docs(self, texts, *, batch_size=None, progress=True):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode_docs(texts, batch_size=batch_size, progress=progress)


def test_second_call_does_not_call_the_encoder(tiny_bert_dir, tiny_corpus, tmp_path):
    enc = CountingEncoder(HFEncoder(str(tiny_bert_dir), pooling="mean"))
    first = encode_corpus(enc, tiny_corpus, tmp_path, shard_size=8, progress=False)
    assert (enc.calls, enc.texts) == (4, 30)                     # shards of 8, 8, 8, 6
    assert first.encoded_shards == 4 and not first.skipped
    second = encode_corpus(enc, tiny_corpus, tmp_path, shard_size=8, progress=False)
    assert (enc.calls, second.encoded_shards, second.skipped) == (4, 0, True)
    np.testing.assert_array_equal(first.as_array(), second.as_array())
    # And the cached vectors are the encoder's own.
    np.testing.assert_allclose(second.as_array(), enc.inner.encode_docs(tiny_corpus.passages(), progress=False),
                               atol=1e-6)


def test_layout_meta_and_memmapped_shards(tiny_bert_dir, tiny_corpus, tmp_path):
    emb = encode_corpus(HFEncoder(str(tiny_bert_dir)), tiny_corpus, tmp_path, shard_size=8, progress=False)
    assert emb.path.parent == tmp_path / "embeddings"
    assert (emb.num_docs, emb.dim, emb.doc_ids) == (30, 32, tiny_corpus.ids)
    shards = list(emb.shards())
    assert [s for s, _ in shards] == [0, 8, 16, 24]
    assert all(isinstance(m, np.memmap) and m.dtype == np.float32 for _, m in shards)
    assert [m.shape for _, m in shards] == [(8, 32), (8, 32), (8, 32), (6, 32)]
    meta = json.loads((emb.path / "meta.json").read_text())
    assert meta["complete"] is True and meta["num_docs"] == 30 and meta["dim"] == 32
    assert meta["corpus_hash"] == tiny_corpus.content_hash()
    assert [s["count"] for s in meta["shards"]] == [8, 8, 8, 6]
    assert meta["identity"] == HFEncoder(str(tiny_bert_dir)).identity()
    assert not list(emb.path.glob("*.tmp"))


def test_interrupted_encoding_resumes_only_missing_shards(tiny_bert_dir, tiny_corpus, tmp_path):
    inner = HFEncoder(str(tiny_bert_dir), pooling="mean", normalize=True)
    flaky = CountingEncoder(inner, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(flaky, tiny_corpus, tmp_path / "cache", shard_size=7, progress=False)
    entry = next((tmp_path / "cache" / "embeddings").iterdir())
    assert sorted(p.name for p in entry.glob("shard-*.npy")) == ["shard-00000.npy", "shard-00001.npy"]
    assert json.loads((entry / "meta.json").read_text())["complete"] is False

    resumed_enc = CountingEncoder(inner)
    # A different shard_size on resume keeps the stored layout (7 per shard).
    resumed = encode_corpus(resumed_enc, tiny_corpus, tmp_path / "cache", shard_size=50, progress=False)
    assert (resumed_enc.calls, resumed_enc.texts) == (3, 30 - 14)   # shards 2, 3, 4 (7 + 7 + 2 docs)
    assert resumed.encoded_shards == 3
    fresh = encode_corpus(inner, tiny_corpus, tmp_path / "fresh", shard_size=7, progress=False)
    np.testing.assert_array_equal(resumed.as_array(), fresh.as_array())


def test_damaged_shard_is_re_encoded(tiny_bert_dir, tiny_corpus, tmp_path):
    enc = CountingEncoder(HFEncoder(str(tiny_bert_dir)))
    first = encode_corpus(enc, tiny_corpus, tmp_path, shard_size=10, progress=False)
    reference = np.array(first.as_array())
    (first.path / "shard-00001.npy").write_bytes(b"not a numpy file")
    again = encode_corpus(enc, tiny_corpus, tmp_path, shard_size=10, progress=False)
    assert again.encoded_shards == 1 and enc.calls == 4
    np.testing.assert_array_equal(again.as_array(), reference)


def test_key_changes_with_pooling_prompt_max_length_and_corpus(tiny_bert_dir, tiny_corpus):
    def key(corpus=tiny_corpus, **kwargs):
        return embedding_key(HFEncoder(str(tiny_bert_dir), **kwargs).identity(), corpus.content_hash())

    base = key()
    assert key() == base  # a new encoder instance with the same settings hits the same entry
    changed = [key(pooling="mean"), key(doc_prompt="passage: "), key(doc_max_length=128), key(normalize=True)]
    edited = Corpus(list(tiny_corpus.ids), list(tiny_corpus.titles), list(tiny_corpus.texts))
    edited.texts[5] += " extra"
    changed.append(key(edited))
    assert len({base, *changed}) == 1 + len(changed)


def test_cache_root_resolution(monkeypatch, tmp_path):
    assert cache_root(tmp_path / "x") == tmp_path / "x"
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    monkeypatch.delenv("HARNESS_CACHE")
    assert cache_root().parts[-2:] == (".cache", "retrieval-harness")


class _Fixed(Encoder):
    def __init__(self, vectors, kind="dense"):
        self.vectors, self.kind = vectors, kind

    def identity(self):
        return {"encoder": "fixed", "shape": list(self.vectors.shape)}

    def encode_queries(self, texts, *, batch_size=None, progress=True):
        return self.vectors[: len(texts)]

    encode_docs = encode_queries


def test_bad_encoders_are_refused(tiny_corpus, tmp_path):
    with pytest.raises(ConfigError, match="dense vectors; encoder kind is 'sparse'"):
        encode_corpus(_Fixed(np.zeros((30, 4), np.float32), kind="sparse"), tiny_corpus, tmp_path)
    with pytest.raises(ConfigError, match=r"returned shape \(5, 4\) for 30 documents"):
        encode_corpus(_Fixed(np.zeros((5, 4), np.float32)), tiny_corpus, tmp_path)
    bad = np.zeros((30, 4), np.float32)
    bad[3, 1] = np.nan
    with pytest.raises(ConfigError, match="non-finite values in shard 0"):
        encode_corpus(_Fixed(bad), tiny_corpus, tmp_path)
    with pytest.raises(ConfigError, match="shard_size must be a positive integer"):
        encode_corpus(_Fixed(np.zeros((30, 4), np.float32)), tiny_corpus, tmp_path, shard_size=0)
