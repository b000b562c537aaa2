"""Sparse retrieval speed on SciFact (SPLADE-tiny weights, 300 test queries, 5,183 documents, top 1000 and top 10,
one thread each): our ``exact`` search vs Pyserini's ``LuceneImpactSearcher`` on the same weights quantised
by the ``pyserini`` rule (round(w/5*256)), and Seismic (default options) when its extra is installed.

One pytest-benchmark run: ``exact`` is the benchmark target, the others run in the untimed pedantic
``setup`` of the same round, timed by hand (tests/train/benchutil.py), every side in process CPU seconds
(Lucene's JVM threads included: it runs in this process), so other processes' load adds to none of them.
Indexes are built (or loaded from the cache) before timing; each timed call goes from the query weights to
the hits.  Reported: queries per CPU second of every backend (best round) and the median per-round ratios;
asserted: the median per-round ratio exact / Lucene only, never absolute numbers.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from benchutil import paired_rounds
from optional_extras import extras_required

os.environ.setdefault("HF_HUB_OFFLINE", "1")

K = 1000
ROUNDS = 5
QUANTIZATION = "pyserini"
# exact / Lucene CPU time, median round, per k (measured medians and spreads: in the report).
MAX_RATIO = {K: 1.0, 10: 1.0}

pytestmark = [pytest.mark.benchmark, pytest.mark.slow, pytest.mark.needs_shared, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def scifact_weights(shared_data):
    """Cached SciFact document weights and the test queries' weights (the default cache root)."""
    from harness.data import load_beir
    from harness.encoders.sparse import load_sparse_encoder
    from harness.encoders.sparse_cache import encode_corpus_sparse

    dataset = load_beir(shared_data / "scifact", "test")
    encoder = load_sparse_encoder("splade-tiny")
    docs = encode_corpus_sparse(encoder, dataset.corpus, None, progress=False)
    queries = encoder.encode_queries(dataset.queries.texts, progress=False)
    return docs, queries, list(dataset.queries.ids), encoder.vocabulary()


class QuantisedQueries:
    """A Pyserini query encoder that returns precomputed quantised query vectors (looked up by query id)."""

    def __init__(self, queries, query_ids, vocabulary):
        from harness.retrieval.impact import quantize

        self.vectors = {}
        for i, qid in enumerate(query_ids):
            ids, weights = queries.row(i)
            impacts = quantize(weights, QUANTIZATION)
            self.vectors[qid] = {vocabulary[int(t)]: int(w) for t, w in zip(ids, impacts) if w > 0}

    def encode(self, text, **_):
        return self.vectors[text]


@pytest.mark.parametrize("k", [K, 10])
def test_exact_vs_lucene_impact_searcher_and_seismic(benchmark, scifact_weights, k):
    from harness.retrieval.impact import build_impact_index
    from harness.retrieval.java import ensure_jvm
    from harness.retrieval.sparse import exact_sparse_search

    docs, queries, query_ids, vocabulary = scifact_weights
    path, _ = build_impact_index(docs, vocabulary, QUANTIZATION)
    ensure_jvm()
    from pyserini.search.lucene import LuceneImpactSearcher

    lucene = LuceneImpactSearcher(str(path), QuantisedQueries(queries, query_ids, vocabulary))

    def lucene_search():
        return lucene.batch_search(query_ids, query_ids, k=k, threads=1)

    others = {}                          # reported beside Lucene, not asserted
    try:
        from harness.retrieval.seismic import build_seismic_index, check_options, search_index

        options = check_options(None)
        index, _ = build_seismic_index(docs, options)
        others["seismic"] = lambda: search_index(index, queries, query_ids, k, options, threads=1)
    except Exception as exc:            # the extra is optional: report what was left out
        if extras_required():          # ... except under HARNESS_REQUIRE_EXTRAS=1 (make test)
            raise
        print(f"\nseismic left out: {exc}")

    def exact():
        return exact_sparse_search(docs, queries, query_ids, k)

    # Warm-up and parity: Lucene's top 10 are exact's top 10 on the quantised weights, by and large.
    exact_run = exact().to_dict()
    lucene_hits = lucene_search()
    overlap = np.mean([len({h.docid for h in lucene_hits[q][:10]} & set(_top(exact_run[q], 10))) / 10
                       for q in query_ids if lucene_hits.get(q)])
    assert overlap > 0.9
    times = paired_rounds(benchmark, lucene_search, exact, ROUNDS, others=others)
    assert len(times.result) > 0
    n = len(query_ids)
    qps = {"exact": n / min(times.ours), "pyserini-lucene-impact": n / min(times.reference),
           **{name: n / min(t) for name, t in times.others.items()}}
    benchmark.extra_info.update({"queries": n, "documents": docs.num_docs, "k": k, "quantization": QUANTIZATION,
                                 "queries_per_cpu_s": {b: round(v, 1) for b, v in qps.items()}})
    times.report(benchmark, f"SciFact sparse search, {n} queries, top {k}, 1 thread, exact / Lucene impact searcher "
                            f"(queries per CPU s: " + ", ".join(f"{b} {v:.1f}" for b, v in qps.items()) + ")")
    # Seismic is reported, not asserted: an approximate index pays off on corpora far larger than SciFact's 5k
    # documents.  Before (wall clock, two runs on a loaded 2-core machine): exact 28-39x Lucene's queries/s at
    # top 1000 (Anserini loads every hit's stored document) and 3.8-4.7x at top 10; Seismic 0.34-0.43x exact at
    # top 1000 and 0.8-1.0x at top 10.
    times.assert_at_most(MAX_RATIO[k], f"exact / Lucene impact searcher, top {k}")


def _top(docs, depth):
    return sorted(docs, key=lambda d: (-docs[d], d))[:depth]
