"""The sparse corpus cache: keyed like the dense one, sharded, streamed, resumable."""
from __future__ import annotations

import numpy as np
import pytest
from sparse_fakes import TableEncoder

from harness.encoders.sparse_cache import encode_corpus_sparse
from harness.errors import ConfigError


def test_cached_weights_equal_a_direct_encoding_and_are_reused(random_world, tmp_path):
    encoder, corpus, _ = random_world
    first = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=16, progress=False)
    assert first.encoded_shards == 3 and first.layout == [(0, 16), (16, 16), (32, 8)]
    direct = encoder.encode_docs(corpus.passages())
    assert np.array_equal(first.vectors().to_dense(), direct.to_dense())
    calls = encoder.doc_calls
    again = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=16, progress=False)
    assert again.skipped and encoder.doc_calls == calls and again.key == first.key
    # memory-mapped shards on read
    _, block = next(again.shards())
    assert isinstance(block.data, np.memmap)


def test_an_interrupted_encoding_resumes_with_the_missing_shards(random_world, tmp_path):
    encoder, corpus, _ = random_world
    killed = TableEncoder(encoder.table, encoder.vocab, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus_sparse(killed, corpus, tmp_path, shard_size=16, progress=False)
    resumed = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=7, progress=False)
    assert resumed.encoded_shards == 1 and encoder.doc_calls == 1        # only the third shard
    assert resumed.layout[-1] == (32, 8)                                 # the stored layout wins
    assert np.array_equal(resumed.vectors().to_dense(), encoder.encode_docs(corpus.passages()).to_dense())


def test_a_corrupt_shard_is_re_encoded(random_world, tmp_path):
    encoder, corpus, _ = random_world
    entry = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=16, progress=False)
    (entry.path / "shard-00001.indptr.npy").write_bytes(b"garbage")
    again = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=16, progress=False)
    assert again.encoded_shards == 1
    assert np.array_equal(again.vectors().to_dense(), entry.vectors().to_dense())


def test_the_key_follows_encoder_identity_and_corpus(random_world, tmp_path):
    encoder, corpus, _ = random_world
    a = encode_corpus_sparse(encoder, corpus, tmp_path, progress=False)
    other = TableEncoder(encoder.table, encoder.vocab)
    other.identity = lambda: {"encoder": "table", "n": -1}
    b = encode_corpus_sparse(other, corpus, tmp_path, progress=False)
    c = encode_corpus_sparse(encoder, corpus.subset(corpus.ids[:10]), tmp_path, progress=False)
    assert len({a.key, b.key, c.key}) == 3


def test_a_dense_encoder_is_refused(random_world, tmp_path):
    encoder, corpus, _ = random_world
    encoder.kind = "dense"
    with pytest.raises(ConfigError, match="sparse cache"):
        encode_corpus_sparse(encoder, corpus, tmp_path)
