"""Dense retrieval: exact search equals numpy brute force; HNSW/IVF factory strings; end-to-end runs."""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest
from optional_extras import require_extra

from harness.data import Corpus, Queries
from harness.encoders.base import Encoder
from harness.encoders.cache import encode_corpus
from harness.errors import ConfigError
from harness.retrieval.dense import dense_search, search_embeddings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DIM = 16


class HashEncoder(Encoder):
    """Deterministic pseudo-random unit vectors per text (seeded by the text's SHA-256)."""

    similarity = "cos"

    def identity(self):
        return {"encoder": "hash", "dim": DIM}

    def encode_docs(self, texts, *, batch_size=None, progress=True):
        out = np.empty((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
            v = rng.standard_normal(DIM)
            out[i] = v / np.linalg.norm(v)
        return out

    encode_queries = encode_docs


@pytest.fixture(scope="module")
def corpus():
    n = 600
    return Corpus([f"doc{i:04d}" for i in range(n)], [""] * n, [f"text number {i}" for i in range(n)])


@pytest.fixture(scope="module")
def queries():
    return Queries([f"q{i}" for i in range(25)], [f"query number {i}" for i in range(25)])


@pytest.fixture(scope="module")
def embeddings(corpus, tmp_path_factory):
    # shard_size 128: exact search must merge five shards correctly.
    return encode_corpus(HashEncoder(), corpus, tmp_path_factory.mktemp("cache"), shard_size=128, progress=False)


def brute_force(embeddings, query_vectors, k):
    scores = query_vectors @ embeddings.as_array().T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, top, axis=1), top


def run_rows(run, qid):
    for q, docs, scores in run.groups():
        if q == qid:
            return docs.tolist(), scores
    raise AssertionError(qid)


def test_flat_search_equals_numpy_brute_force(embeddings, queries, corpus):
    qv = HashEncoder().encode_queries(queries.texts)
    run = search_embeddings(embeddings, qv, queries.ids, k=10)
    exp_scores, exp_rows = brute_force(embeddings, qv, 10)
    assert len(run) == 25 * 10
    for i, qid in enumerate(queries.ids):
        docs, scores = run_rows(run, qid)
        assert docs == [corpus.ids[r] for r in exp_rows[i]]   # random floats: no ties
        np.testing.assert_allclose(scores, exp_scores[i], atol=1e-5)


def test_k_larger_than_corpus_returns_every_document(embeddings, queries):
    qv = HashEncoder().encode_queries(queries.texts[:2])
    run = search_embeddings(embeddings, qv, queries.ids[:2], k=5000)
    assert len(run) == 2 * 600


def test_hnsw_factory_string_finds_the_exact_neighbours(embeddings, queries):
    qv = HashEncoder().encode_queries(queries.texts)
    exact = search_embeddings(embeddings, qv, queries.ids, k=10)
    hnsw = search_embeddings(embeddings, qv, queries.ids, k=10, index="HNSW32", search_params={"efSearch": 256})
    overlap = np.mean([len(set(run_rows(exact, q)[0]) & set(run_rows(hnsw, q)[0])) / 10 for q in queries.ids])
    assert overlap >= 0.95
    for q in queries.ids:  # whatever HNSW returns carries the exact inner product
        docs, scores = run_rows(hnsw, q)
        exact_docs, exact_scores = run_rows(exact, q)
        common = [d for d in docs if d in exact_docs]
        np.testing.assert_allclose([scores[docs.index(d)] for d in common],
                                   [exact_scores[exact_docs.index(d)] for d in common], atol=1e-5)


def test_ivf_probing_every_list_is_exact(embeddings, queries):
    qv = HashEncoder().encode_queries(queries.texts)
    exact = search_embeddings(embeddings, qv, queries.ids, k=10)
    ivf = search_embeddings(embeddings, qv, queries.ids, k=10, index="IVF8,Flat", search_params={"nprobe": 8})
    assert ivf.to_dict().keys() == exact.to_dict().keys()
    for q in queries.ids:
        assert run_rows(ivf, q)[0] == run_rows(exact, q)[0]
    few = search_embeddings(embeddings, qv, queries.ids, k=10, index="IVF8,Flat", search_params={"nprobe": 1})
    assert len(few) <= len(exact)


def test_bad_index_options_raise_config_errors(embeddings, queries):
    qv = HashEncoder().encode_queries(queries.texts[:1])
    with pytest.raises(ConfigError, match="invalid faiss index factory string 'HNSWx'"):
        search_embeddings(embeddings, qv, queries.ids[:1], index="HNSWx")
    with pytest.raises(ConfigError, match="does not take search parameter 'bogus'"):
        search_embeddings(embeddings, qv, queries.ids[:1], index="HNSW8", search_params={"bogus": 1})
    with pytest.raises(ConfigError, match="dimension 16"):
        search_embeddings(embeddings, np.zeros((1, 3), np.float32), queries.ids[:1])
    with pytest.raises(ConfigError, match="k must be a positive integer"):
        search_embeddings(embeddings, qv, queries.ids[:1], k=0)


def test_dense_search_end_to_end_with_a_tiny_bert(tmp_path):
    from harness.encoders.hf import HFEncoder
    from harness.encoders.tiny import TINY_WORDS, make_tiny_bert

    model = make_tiny_bert(tmp_path / "bert")
    rng = np.random.default_rng(0)
    corpus = Corpus([f"d{i}" for i in range(40)], ["" if i % 2 else "title" for i in range(40)],
                    [" ".join(rng.choice(TINY_WORDS, 12)) for i in range(40)])
    queries = Queries(["q1", "q2", "q3"], ["red fish", "gene drug", "old city"])
    enc = HFEncoder(str(model), pooling="mean", normalize=True)
    run = dense_search(enc, corpus, queries, k=5, cache_dir=tmp_path / "cache", progress=False)
    qv = enc.encode_queries(queries.texts, progress=False)
    dv = enc.encode_docs(corpus.passages(), progress=False)
    scores = qv @ dv.T
    for i, q in enumerate(queries.ids):
        docs, got = run_rows(run, q)
        top = np.argsort(-scores[i])[:5]
        assert docs == [corpus.ids[j] for j in top]
        np.testing.assert_allclose(got, scores[i, top], atol=1e-5)
    assert list((tmp_path / "cache" / "embeddings").iterdir())  # the corpus went through the cache


@pytest.mark.slow
def test_scifact_minilm_reproduces_published_ndcg(shared_data, tmp_path_factory):
    """Full SciFact test split with all-MiniLM-L6-v2: nDCG@10 0.645 +- 0.001, Recall@100 0.925 +- 0.002."""
    from harness.data import load_beir
    from harness.encoders.hf import HFEncoder

    pytrec_eval = require_extra("pytrec_eval")

    ds = load_beir(shared_data / "scifact", "test")
    cache = os.environ.get("HARNESS_CACHE") or tmp_path_factory.mktemp("cache")
    enc = HFEncoder("minilm", batch_size=32)
    started = time.perf_counter()
    run = dense_search(enc, ds.corpus, ds.queries, k=1000, cache_dir=cache)
    elapsed = time.perf_counter() - started
    qrels = {q: {d: int(r) for d, r in docs.items()} for q, docs in ds.qrels.to_dict().items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    per_query = evaluator.evaluate(run.to_dict())
    ndcg = float(np.mean([v["ndcg_cut_10"] for v in per_query.values()]))
    recall = float(np.mean([v["recall_100"] for v in per_query.values()]))
    print(f"\nSciFact minilm: nDCG@10={ndcg:.4f} Recall@100={recall:.4f} retrieve time {elapsed:.1f}s")
    assert len(per_query) == 300
    assert ndcg == pytest.approx(0.645, abs=0.001)
    assert recall == pytest.approx(0.925, abs=0.002)
