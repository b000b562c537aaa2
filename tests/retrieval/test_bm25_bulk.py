"""BM25 hits cross the JVM bridge in bulk (a batch of queries as whole Java arrays): the runs are those of
the search before (one JSON string per query, bm25_json_reference.py), bit for bit, under both tie rules,
at every depth, batch size and thread count, on a collection made of ties and on SciFact."""
from __future__ import annotations

import numpy as np
import pytest
from bm25_json_reference import json_search

from harness.data.beir import Corpus, Queries
from harness.data.run import Run
from harness.retrieval import bm25
from harness.retrieval.bm25 import BM25Index


def assert_same_run(a: Run, b: Run) -> None:
    assert a.query_ids.tolist() == b.query_ids.tolist()
    assert a.doc_ids.tolist() == b.doc_ids.tolist()
    assert a.scores.tolist() == b.scores.tolist()


def tie_heavy_corpus(seed: int = 0) -> Corpus:
    """Groups of identical texts (one BM25 score per group for most queries), ids whose string order is
    neither their number's order nor the indexing order, a few unique texts."""
    rng = np.random.default_rng(seed)
    texts = (["alpha beta"] * 120 + ["alpha gamma delta"] * 60 + ["alpha alpha beta"] * 40 + ["beta"] * 30
             + ["gamma gamma"] * 25 + [f"alpha {w} epsilon" for w in ("zeta", "eta", "theta", "iota", "kappa")])
    ids = [f"d{n}" for n in rng.permutation(len(texts)) * 7]   # d0, d7, d14 ...: "d14" sorts before "d7"
    order = rng.permutation(len(texts))                        # indexed in shuffled order
    return Corpus([ids[i] for i in order], [""] * len(texts), [texts[i] for i in order])


TIE_QUERIES = Queries(["q1", "q2", "q3", "q4", "q5", "q6", "q7"],
                      ["alpha", "beta", "alpha beta", "gamma", "zzz", "the", "alpha epsilon"])


@pytest.fixture(scope="module")
def tie_index(tmp_path_factory):
    return BM25Index.build(tie_heavy_corpus(), index_dir=tmp_path_factory.mktemp("bm25-bulk"), threads=1)


@pytest.mark.parametrize("ties", ["trec_eval", "pyserini"])
@pytest.mark.parametrize("k", [1, 5, 11, 40, 119, 120, 121, 219, 250, 1000])
def test_tie_heavy_collection_gives_the_runs_of_before(tie_index, ties, k):
    want = json_search(tie_index, TIE_QUERIES, k=k, ties=ties)
    assert_same_run(tie_index.search(TIE_QUERIES, k=k, ties=ties, threads=1), want)


@pytest.mark.parametrize("ties", ["trec_eval", "pyserini"])
@pytest.mark.parametrize("batch, threads", [(1, 1), (2, 3), (3, 2), (64, 4)])
def test_batches_and_threads_do_not_change_the_run(tie_index, monkeypatch, ties, batch, threads):
    # Small batches: queries with no hit ("zzz"; "the" is a stop word) between others in one batch, and
    # several batches per thread; k = 5 makes the 120-document tie go on over several pages.
    monkeypatch.setattr(bm25, "SEARCH_BATCH_QUERIES", batch)
    queries = Queries([f"{qid}-{r}" for r in range(3) for qid in TIE_QUERIES.ids], TIE_QUERIES.texts * 3)
    for k in (5, 100):
        assert_same_run(tie_index.search(queries, k=k, ties=ties, threads=threads),
                        json_search(tie_index, queries, k=k, ties=ties))


def test_pages_join_into_lucenes_longer_top_list(tie_index):
    """A tie fetched page by page (searchAfter) holds the hits one search for all of them returns."""
    java = bm25._java()
    searcher = java.IndexSearcher(tie_index._open_reader())
    searcher.setSimilarity(java.BM25Similarity(0.9, 0.4))
    query = java.BagOfWords().buildQuery("contents", bm25.lucene_analyzer(tie_index.analyzer), "alpha")
    [(docs, scores)] = bm25._parallel_search(searcher, bm25.lucene_analyzer(tie_index.analyzer), ["alpha"], k=3,
                                             threads=1, cutoff_ties=True)
    counts, all_docs, all_scores = bm25._hit_arrays(java, [searcher.search(query, 1000)])
    assert counts.tolist() == [len(all_docs)] and len(all_docs) == 225      # every document with alpha
    tie = all_scores[2]
    assert int((all_scores == tie).sum()) == 40                          # the tie at rank 3 is long ...
    assert len(docs) > int((all_scores >= tie).sum())                    # ... and was fetched whole, and past it
    assert docs.tolist() == all_docs[:len(docs)].tolist()
    assert scores.tolist() == all_scores[:len(docs)].astype(np.float64).tolist()


def test_hit_arrays_mark_queries_without_hits(tie_index):
    java = bm25._java()
    searcher = java.IndexSearcher(tie_index._open_reader())
    generator = java.BagOfWords()
    analyzer = bm25.lucene_analyzer(tie_index.analyzer)
    tops = [searcher.search(generator.buildQuery("contents", analyzer, text), 10) for text in ("zzz", "beta", "zzz")]
    counts, docs, scores = bm25._hit_arrays(java, tops)
    assert counts.tolist() == [0, 10, 0]
    assert docs.dtype == np.int64 and scores.dtype == np.float32 and len(docs) == len(scores) == 10
    assert (docs >= 0).all()
    assert bm25._hit_arrays(java, [])[0].tolist() == []


@pytest.mark.needs_shared
@pytest.mark.parametrize("ties", ["trec_eval", "pyserini"])
def test_scifact_subset_gives_the_runs_of_before(shared_data, tmp_path_factory, ties):
    """1,000 SciFact documents, 100 queries, depths 10 and 300, two threads."""
    from harness.data import load_beir

    data = load_beir(shared_data / "scifact", "test")
    index = BM25Index.build(data.corpus.subset(data.corpus.ids[:1000]), index_dir=tmp_path_factory.getbasetemp() / "sf")
    queries = Queries(data.queries.ids[:100], data.queries.texts[:100])
    for k in (10, 300):
        assert_same_run(index.search(queries, k=k, ties=ties, threads=2), json_search(index, queries, k=k, ties=ties))


@pytest.mark.slow
@pytest.mark.needs_shared
def test_scifact_gives_the_runs_of_before(shared_data, tmp_path):
    """All of SciFact (5,183 documents, 300 test queries), top 1000, both tie rules; nDCG@10 0.6789."""
    from harness.benchmark import get_suite
    from harness.pipeline import load_benchmark

    loaded = load_benchmark(shared_data / "scifact", "beir")
    loaded.card = loaded.card.with_(metrics=("ndcg@10",))
    index = BM25Index.build(loaded.dataset.corpus, index_dir=tmp_path)
    for ties in ("trec_eval", "pyserini"):
        run = index.search(loaded.dataset.queries, k=1000, ties=ties)
        assert_same_run(run, json_search(index, loaded.dataset.queries, k=1000, ties=ties))
        assert get_suite("beir").evaluate(loaded, run).aggregate["ndcg@10"] == pytest.approx(0.6789, abs=5e-5)
