"""The BM25 search as it was before the bulk transfer, kept as the oracle of ``BM25Index.search``.

Each query's hits crossed the JVM bridge one query at a time, as one JSON string (Jackson's rendering of
Lucene's ``TopDocs``), parsed in Python; a tie at rank ``k`` was followed by searching again for twice as
many hits; the cut at rank ``k`` compared doc-id *strings*.  One thread (the result never depended on the
thread count).  Used by tests/retrieval/test_bm25_bulk.py (identical runs) and by
tests/speed/test_bm25_bulk_speed.py (the "before" side).
"""
from __future__ import annotations

import json

import numpy as np

from harness.data.beir import Queries
from harness.data.run import Run
from harness.retrieval import bm25
from harness.retrieval.bm25 import BM25Index, lucene_analyzer, pyserini_scores


def json_search(index: BM25Index, queries: Queries, k: int = 1000, k1: float = 0.9, b: float = 0.4,
                ties: str = "trec_eval") -> Run:
    java = bm25._java()
    searcher = java.IndexSearcher(index._open_reader())
    searcher.setSimilarity(java.BM25Similarity(float(k1), float(b)))
    analyzer = lucene_analyzer(index.analyzer)
    generator = java.BagOfWords()
    mapper = java.ObjectMapper()
    docids = index.docids()
    cut = _pyserini_order if ties == "pyserini" else _trec_eval_cut
    hits = []
    for text in queries.texts:
        query = generator.buildQuery("contents", analyzer, text)
        n = k + 1
        top = json.loads(mapper.writeValueAsString(searcher.search(query, n)))["scoreDocs"]
        while len(top) == n and top[-1]["score"] == top[k - 1]["score"]:
            n *= 2
            top = json.loads(mapper.writeValueAsString(searcher.search(query, n)))["scoreDocs"]
        docs = np.fromiter((h["doc"] for h in top), dtype=np.int64, count=len(top))
        scores = np.fromiter((h["score"] for h in top), dtype=np.float32, count=len(top))
        hits.append(cut(docids, docs, scores.astype(np.float64), k))
    counts = np.fromiter((len(d) for d, _ in hits), dtype=np.int64, count=len(hits))
    qids = np.repeat(np.asarray(queries.ids, dtype=str), counts)
    lucene_docs = np.concatenate([d for d, _ in hits]) if hits else np.zeros(0, np.int64)
    scores = np.concatenate([s for _, s in hits]) if hits else np.zeros(0, np.float64)
    return Run.from_arrays(qids, docids[lucene_docs], scores, name="bm25")


def _trec_eval_cut(docids: np.ndarray, docs: np.ndarray, scores: np.ndarray,
                   k: int) -> tuple[np.ndarray, np.ndarray]:
    if len(docs) <= k:
        return docs, scores
    order = np.lexsort((docids[docs], -scores))[::-1]
    order = order[np.argsort(-scores[order], kind="stable")][:k]
    return docs[order], scores[order]


def _pyserini_order(docids: np.ndarray, docs: np.ndarray, scores: np.ndarray,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((docids[docs], -scores))[:k]
    return docs[order], pyserini_scores(scores[order]).astype(np.float64)
