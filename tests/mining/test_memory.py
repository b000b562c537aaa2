"""Mining memory is bounded by the query chunk, not the number of queries: the candidate pools are
searched and stored chunk by chunk (a 100k x 1M run holds one chunk of lists and one corpus shard)."""
from __future__ import annotations

import tracemalloc

from mining_util import SaltEncoder

from harness.data.beir import Corpus, Queries
from harness.retrieval.pool import CandidatePool, DenseSource


def peak_bytes(tmp_path, n_queries: int, chunk_size: int) -> int:
    docs = 1000
    corpus = Corpus([f"d{i}" for i in range(docs)], [""] * docs, [f"document number {i}" for i in range(docs)])
    pool = CandidatePool([DenseSource(SaltEncoder("m"), "a")], corpus, depth=20, cache_dir=tmp_path / "cache",
                         chunk_size=chunk_size)
    warm = Queries(["w"], ["warm up"])
    list(pool.chunks(warm, {}))                    # the corpus embeddings are cached before measuring
    queries = Queries([f"q{i}" for i in range(n_queries)], [f"query text {i}" for i in range(n_queries)])
    positives = {f"q{i}": [f"d{i % docs}"] for i in range(n_queries)}
    tracemalloc.start()
    try:
        rows = 0
        for chunk in pool.chunks(queries, positives):
            rows += len(chunk.query_ids)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows == n_queries
    return peak


def test_peak_memory_does_not_grow_with_the_number_of_queries(tmp_path):
    small = peak_bytes(tmp_path / "a", 200, chunk_size=100)
    large = peak_bytes(tmp_path / "b", 2000, chunk_size=100)
    whole = peak_bytes(tmp_path / "c", 2000, chunk_size=2000)
    assert large < 1.3 * small, (small, large)          # 10x the queries, about the same peak
    print(f"peak bytes: 200 queries {small}, 2000 queries {large}, 2000 in one chunk {whole}")
    assert whole > 3 * large, (large, whole)            # one chunk of everything: the measurement can tell
