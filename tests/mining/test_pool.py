"""Candidate pools (harness/retrieval/pool.py): exact mean-cosine ensembles, ranx fusions, positives
removed, chunked cache keyed by content, memory bounded by the chunk."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from mining_util import SaltEncoder

from harness.data import Corpus, Queries
from harness.encoders.cache import encode_corpus
from harness.errors import ConfigError
from harness.retrieval.pool import BM25Source, CandidatePool, DenseSource

N_DOCS = 300
CORPUS = Corpus([f"d{i:03d}" for i in range(N_DOCS)], [""] * N_DOCS, [f"passage {i}" for i in range(N_DOCS)])
QUERIES = Queries([f"q{i}" for i in range(20)], [f"question {i}" for i in range(20)])
POSITIVES = {f"q{i}": [f"d{(7 * i) % N_DOCS:03d}"] for i in range(20)}


def cosines(enc, texts_q, texts_d):
    return enc.encode_queries(texts_q) @ enc.encode_docs(texts_d).T


def brute_mean(encoders, depth, positives):
    scores = np.mean([cosines(e, QUERIES.texts, CORPUS.texts) for e in encoders], axis=0)
    out = {}
    for qi, q in enumerate(QUERIES.ids):
        order = [j for j in np.argsort(-scores[qi], kind="stable") if CORPUS.ids[j] not in positives.get(q, ())]
        out[q] = ([CORPUS.ids[j] for j in order[:depth]], scores[qi, order[:depth]])
    return out


def collect(pool, queries=QUERIES, positives=POSITIVES):
    out = {}
    for chunk in pool.chunks(queries, positives):
        for i, q in enumerate(chunk.query_ids):
            d, s, src = chunk.pool(i)
            out[str(q)] = (d.tolist(), s, src, int(chunk.positives_removed[i]))
    return out


def test_mean_cosine_ensemble_is_exact_and_removes_positives(tmp_path):
    a, b = SaltEncoder("a"), SaltEncoder("b", dim=8)
    # different shard layouts per model: the concatenated search must align rows across them
    encode_corpus(a, CORPUS, tmp_path, shard_size=64, progress=False)
    encode_corpus(b, CORPUS, tmp_path, shard_size=100, progress=False)
    # make some positives retrievable: each query's positive is its best document under the mean
    best = brute_mean([a, b], 1, {})
    positives = {q: [best[q][0][0]] for q in QUERIES.ids}
    pool = CandidatePool([DenseSource(a, "a"), DenseSource(b, "b")], CORPUS, depth=10, cache_dir=tmp_path,
                         chunk_size=6)
    got = collect(pool, positives=positives)
    want = brute_mean([a, b], 10, positives)
    for q in QUERIES.ids:
        docs, scores, src, removed = got[q]
        assert docs == want[q][0]
        np.testing.assert_allclose(scores, want[q][1], atol=1e-6)
        assert removed == 1 and positives[q][0] not in docs
        np.testing.assert_allclose(src.mean(axis=1), scores, atol=1e-6)    # per-model cosines average to it
        assert np.all(np.diff(scores) <= 1e-12)


def test_single_source_matches_its_own_ranking(tmp_path):
    a = SaltEncoder("a")
    got = collect(CandidatePool([DenseSource(a, "a")], CORPUS, depth=5, cache_dir=tmp_path))
    want = brute_mean([a], 5, POSITIVES)
    assert all(got[q][0] == want[q][0] for q in QUERIES.ids)
    assert sum(v[3] for v in got.values()) == sum(   # positives removed only where retrieved
        POSITIVES[q][0] in brute_mean([a], 6, {})[q][0] for q in QUERIES.ids)


def test_chunks_are_cached_by_content_and_resume(tmp_path):
    a = SaltEncoder("a")
    pool = CandidatePool([DenseSource(a, "a")], CORPUS, depth=5, cache_dir=tmp_path, chunk_size=8)
    first = collect(pool)
    entry = tmp_path / "candidates" / pool.key(QUERIES, POSITIVES)
    assert sorted(p.name for p in entry.glob("chunk-*.npz")) == ["chunk-00000.npz", "chunk-00001.npz",
                                                                 "chunk-00002.npz"]
    before = a.calls
    assert collect(pool).keys() == first.keys() and a.calls == before        # all from the cache
    (entry / "chunk-00001.npz").unlink()                                     # a killed run lost one chunk
    again = collect(pool)
    assert a.calls == before + 8                                             # only its 8 queries re-encoded
    assert all(again[q][0] == first[q][0] for q in QUERIES.ids)
    # the key follows content: other positives or another depth are other entries, paths are not part of it
    assert pool.key(QUERIES, {**POSITIVES, "q0": ["d001"]}) != pool.key(QUERIES, POSITIVES)
    other = CandidatePool([DenseSource(SaltEncoder("a"), "a")], CORPUS, depth=6, cache_dir=tmp_path / "x")
    assert other.key(QUERIES, POSITIVES) != pool.key(QUERIES, POSITIVES)
    same = CandidatePool([DenseSource(SaltEncoder("a"), "a")], CORPUS, depth=5, cache_dir=tmp_path / "y")
    assert same.key(QUERIES, POSITIVES) == pool.key(QUERIES, POSITIVES)


@pytest.mark.slow   # ranx's numba kernels compile in every fresh process (about 20 s on 2 cores)
def test_combsum_fusion_through_ranx(tmp_path):
    a, b = SaltEncoder("a"), SaltEncoder("b")
    pool = CandidatePool([DenseSource(a, "a"), DenseSource(b, "b")], CORPUS, depth=8, fusion="combsum",
                         cache_dir=tmp_path)
    got = collect(pool, positives={})
    k = 8
    for qi, q in enumerate(QUERIES.ids[:5]):
        fused: dict[str, float] = {}
        for enc in (a, b):   # CombSUM of min-max normalised top-k scores, by hand
            s = cosines(enc, [QUERIES.texts[qi]], CORPUS.texts)[0]
            top = np.argsort(-s, kind="stable")[:k]
            lo, hi = s[top].min(), s[top].max()
            for j in top:
                fused[CORPUS.ids[j]] = fused.get(CORPUS.ids[j], 0.0) + (s[j] - lo) / (hi - lo)
        want = sorted(fused.items(), key=lambda kv: -kv[1])[:k]
        docs, scores, src, _ = got[q]
        np.testing.assert_allclose(scores, [v for _, v in want], atol=1e-5)
        assert set(docs) == {d for d, _ in want}
        assert np.isnan(src).any()                 # a document one model did not retrieve has no score there


def test_memory_is_bounded_by_the_chunk(tmp_path):
    a = SaltEncoder("a")
    encode_corpus(a, CORPUS, tmp_path, progress=False)

    def peak(n: int, chunk: int = 50) -> int:
        qs = Queries([f"m{i}" for i in range(n)], [f"memory query {i}" for i in range(n)])
        pool = CandidatePool([DenseSource(a, "a")], CORPUS, depth=40, cache_dir=tmp_path / f"{n}-{chunk}",
                             chunk_size=chunk)
        pool._embeddings = None
        tracemalloc.start()
        for _ in pool.chunks(qs, {}):
            pass
        peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak_bytes

    small, large = peak(100), peak(800)
    assert large < 1.3 * small, (small, large)    # 8x the queries, same peak
    assert peak(800, chunk=800) > 3 * large       # all queries in one chunk: the measurement can tell


def test_a_source_that_matches_nothing_adds_nothing_to_a_fusion(tmp_path, monkeypatch):
    from harness.data.run import Run

    pool = CandidatePool([DenseSource(SaltEncoder("a"), "a"), DenseSource(SaltEncoder("b"), "b")], CORPUS,
                         depth=8, fusion="rrf", cache_dir=tmp_path)
    real = pool._search
    empty = Run.from_arrays([], [], [], name="b")
    monkeypatch.setattr(pool, "_search", lambda s, q, k: empty if s.name == "b" else real(s, q, k))
    got = collect(pool, positives={})
    alone = collect(CandidatePool([DenseSource(SaltEncoder("a"), "a")], CORPUS, depth=8,
                                  cache_dir=tmp_path / "alone"), positives={})
    for q in QUERIES.ids:
        assert list(got[q][0]) == list(alone[q][0])            # source a's ranking, unfused
        assert np.isnan(got[q][2][:, 1]).all()


def test_bad_configuration():
    a = SaltEncoder("a")
    with pytest.raises(ConfigError, match="unknown fusion 'borda'"):
        CandidatePool([DenseSource(a, "a"), DenseSource(SaltEncoder("b"), "b")], CORPUS, fusion="borda")
    with pytest.raises(ConfigError, match="fusion 'mean' averages cosines; source.s. bm25"):
        CandidatePool([DenseSource(a, "a"), BM25Source()], CORPUS)
    with pytest.raises(ConfigError, match="distinct names"):
        CandidatePool([DenseSource(a), DenseSource(SaltEncoder("b"))], CORPUS)
    with pytest.raises(ConfigError, match="depth must be a positive integer"):
        CandidatePool([DenseSource(a)], CORPUS, depth=0)
    with pytest.raises(ConfigError, match="at least one source"):
        CandidatePool([], CORPUS)
