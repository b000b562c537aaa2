"""Sparse retrieval backends: exact (the reference) and Lucene impact search, with their statistics."""
from __future__ import annotations

import numpy as np
import pytest

from harness.encoders.sparse_cache import encode_corpus_sparse
from harness.encoders.sparse_vectors import SparseVectors
from harness.errors import ConfigError
from harness.retrieval.impact import quantize
from harness.retrieval.sparse import exact_sparse_search, sparse_search, sparsity_stats


def brute_force(encoder, corpus, queries, quantization=None):
    d = encoder.encode_docs(corpus.passages()).to_dense().astype(np.float64)
    q = encoder.encode_queries(queries.texts).to_dense().astype(np.float64)
    if quantization:
        d, q = quantize(d, quantization).astype(np.float64), quantize(q, quantization).astype(np.float64)
    return q @ d.T


def as_dict(run):
    return {(q, d): s for q, d, s in zip(run.query_ids, run.doc_ids, run.scores)}


def test_exact_equals_brute_force_dot_products(random_world, tmp_path):
    encoder, corpus, queries = random_world
    scores = brute_force(encoder, corpus, queries)
    docs = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=16, progress=False)   # 3 shards
    run = exact_sparse_search(docs, encoder.encode_queries(queries.texts), queries.ids, k=5, query_chunk=5)
    for i, qid in enumerate(queries.ids):
        got = {d: s for (q, d), s in as_dict(run).items() if q == qid}
        positive = np.flatnonzero(scores[i] > 0)
        best = positive[np.argsort(-scores[i][positive], kind="stable")][:5]
        assert sorted(got.values()) == pytest.approx(sorted(scores[i][best]), rel=1e-5)
        for doc, value in got.items():
            assert value == pytest.approx(scores[i, corpus.ids.index(doc)], rel=1e-5)
    # only documents sharing a term are retrieved
    assert np.all(run.scores > 0)


def test_exact_with_k_beyond_the_corpus_returns_every_matching_document(random_world, tmp_path):
    encoder, corpus, queries = random_world
    scores = brute_force(encoder, corpus, queries)
    run, info = sparse_search(encoder, corpus, queries, k=1000, cache_dir=tmp_path, progress=False)
    assert len(run) == int(np.count_nonzero(scores > 0))
    assert info["backend"] == "exact" and "quantization" not in info


def test_lucene_impact_scores_are_the_quantised_dot_products(random_world, tmp_path):
    encoder, corpus, queries = random_world
    for rule in ("pyserini", "splade"):
        scores = brute_force(encoder, corpus, queries, quantization=rule)
        run, info = sparse_search(encoder, corpus, queries, k=1000, backend="lucene-impact", quantization=rule,
                                  cache_dir=tmp_path, progress=False)
        got = as_dict(run)
        want = {(q, d): scores[i, j] for i, q in enumerate(queries.ids) for j, d in enumerate(corpus.ids)
                if scores[i, j] > 0}
        assert got == pytest.approx(want)
        assert info["quantization"] == rule and info["quantization_rule"]
        assert info["sparsity"]["index_bytes"] > 0
        # weights that round to 0 are dropped and counted (none survive as zero impacts)
        assert info["doc_weights_dropped"] == int(np.count_nonzero(
            (encoder.encode_docs(corpus.passages()).data > 0) &
            (quantize(encoder.encode_docs(corpus.passages()).data, rule) == 0)))


def test_quantisation_rules():
    w = np.array([0.0097, 0.0051, 1.0, 2.5, 0.005])
    assert quantize(w, "pyserini").tolist() == [0, 0, 51, 128, 0]       # round(w / 5 * 256)
    assert quantize(w, "splade").tolist() == [1, 1, 100, 250, 0]        # rint(w * 100), half to even
    with pytest.raises(ConfigError, match="quantisation"):
        quantize(w, "bmp")


def test_sparsity_statistics_by_hand(tmp_path):
    from sparse_fakes import TableEncoder

    from harness.data import Corpus

    table = {"a": [1, 1, 0], "b": [0, 0, 1], "c": [0, 0, 0], "x": [1, 0, 1], "y": [0, 0, 1]}
    enc = TableEncoder(table, ["u", "v", "w"])
    docs = encode_corpus_sparse(enc, Corpus(["1", "2", "3"], ["", "", ""], ["a", "b", "c"]), tmp_path, progress=False)
    stats = sparsity_stats(enc.encode_queries(["x", "y"]), docs, index_bytes=123)
    assert stats["query_nnz"]["mean"] == 1.5 and stats["query_nnz"]["max"] == 2
    assert stats["doc_nnz"]["mean"] == 1.0 and stats["doc_nnz"]["p50"] == 1.0
    # P(q_j != 0) = (0.5, 0, 1), P(d_j != 0) = (1/3, 1/3, 1/3): 0.5/3 + 1/3 = 0.5
    assert stats["expected_flops"] == pytest.approx(0.5)
    assert stats["index_bytes"] == 123


@pytest.mark.parametrize("options", [{"backend": "seismic-typo"}, {"quantization": "int8"}, {"k": 0}])
def test_bad_backend_options_are_refused(random_world, tmp_path, options):
    encoder, corpus, queries = random_world
    with pytest.raises(ConfigError):
        sparse_search(encoder, corpus, queries, cache_dir=tmp_path, progress=False, **options)


def test_query_and_document_vocabularies_must_agree(random_world, tmp_path):
    encoder, corpus, queries = random_world
    docs = encode_corpus_sparse(encoder, corpus, tmp_path, progress=False)
    with pytest.raises(ConfigError, match="vocabulary"):
        exact_sparse_search(docs, SparseVectors.empty(7), [], k=3)
