"""Sparse retrieval over term weights, with backends chosen by name, all producing the same Run.

* ``exact`` (the reference): float dot products with ``scipy.sparse``, queries in chunks
  against each cached shard, per-shard top-k merged;
* ``lucene-impact``: Lucene impact search through Pyserini/Anserini over integer weights
  (:mod:`harness.retrieval.impact`), quantised by a named rule (:data:`QUANTIZATIONS`).

A document that shares no term with the query scores 0 and is not retrieved (an inverted
index never sees it), so both backends return only positive scores.

:func:`sparsity_stats` describes what was searched (stored in every sparse result's manifest):
non-zeros per query and document (mean, percentiles, max), the expected FLOPs per
query-document pair ``sum_j P(q_j != 0) * P(d_j != 0)`` (the SPLADE papers' measure of cost
for an inverted index), and the index size on disk.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.beir import Corpus, Queries
from harness.data.run import Run
from harness.encoders.base import Encoder
from harness.encoders.cache import DEFAULT_SHARD_SIZE
from harness.encoders.sparse_cache import CorpusSparse, encode_corpus_sparse
from harness.encoders.sparse_vectors import SparseVectors
from harness.errors import ConfigError
from harness.retrieval.impact import DEFAULT_QUANTIZATION, QUANTIZATIONS, check_quantization, impact_search

log = logging.getLogger(__name__)

BACKENDS = ("exact", "lucene-impact")
DEFAULT_BACKEND = "exact"
PERCENTILES = (50, 90, 99)


def check_backend(backend: str, quantization: str | None = None) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown sparse retrieval backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if quantization is not None:
        check_quantization(quantization)


# ----------------------------------------------------------------------------- exact
def _top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row the ``k`` best columns (unsorted) and their scores; (rows, k) arrays."""
    if scores.shape[1] <= k:
        cols = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
        return np.ascontiguousarray(cols), scores
    cols = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return cols, np.take_along_axis(scores, cols, axis=1)


def exact_sparse_search(docs: CorpusSparse, queries: SparseVectors, query_ids: Sequence[str], k: int = 1000, *,
                        query_chunk: int = 256, name: str = "sparse-exact") -> Run:
    """Exact top-``k`` dot products of sparse queries against the cached document shards."""
    if len(query_ids) != len(queries):
        raise ConfigError(f"{len(query_ids)} query ids but {len(queries)} query vectors")
    if queries.vocab_size != docs.vocab_size:
        raise ConfigError(f"query vocabulary {queries.vocab_size} != document vocabulary {docs.vocab_size}")
    q_all = queries.to_scipy()
    shards = [(start, vec.to_scipy().T.tocsc()) for start, vec in docs.shards()]
    qids, rows, vals = [], [], []
    for qs in range(0, len(queries), query_chunk):
        q = q_all[qs:qs + query_chunk]
        cand_rows, cand_scores = [], []
        for start, dt in shards:
            scores = np.asarray((q @ dt).toarray(), dtype=np.float32)
            cols, best = _top_k_rows(scores, k)
            cand_rows.append(cols + start)
            cand_scores.append(best)
        merged_rows, merged = np.concatenate(cand_rows, axis=1), np.concatenate(cand_scores, axis=1)
        cols, best = _top_k_rows(merged, k)
        picked = np.take_along_axis(merged_rows, cols, axis=1)
        keep = best > 0
        qids.append(np.repeat(np.arange(qs, qs + len(best)), keep.sum(axis=1)))
        rows.append(picked[keep])
        vals.append(best[keep])
    qidx, didx = np.concatenate(qids), np.concatenate(rows)
    return Run.from_arrays(np.asarray(query_ids, dtype=object)[qidx].astype(str),
                           np.asarray(docs.doc_ids, dtype=object)[didx].astype(str), np.concatenate(vals),
                           name=name, check_duplicates=False)


# ------------------------------------------------------------------------ statistics
def _describe(nnz: np.ndarray) -> dict[str, float]:
    out = {"mean": round(float(nnz.mean()), 3) if len(nnz) else 0.0, "max": int(nnz.max()) if len(nnz) else 0}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(nnz, p)) if len(nnz) else 0.0
    return out


def _term_presence(vectors: SparseVectors) -> np.ndarray:
    """Share of rows in which each vocabulary term is non-zero."""
    counts = np.bincount(np.asarray(vectors.indices), minlength=vectors.vocab_size)
    return counts / max(len(vectors), 1)


def sparsity_stats(queries: SparseVectors, docs: CorpusSparse, index_bytes: int) -> dict[str, Any]:
    """Non-zeros per query/document, expected FLOPs per pair, and the index size (see module docstring)."""
    doc_nnz = np.concatenate([np.diff(np.asarray(v.indptr)) for _, v in docs.shards()])
    doc_presence = np.zeros(docs.vocab_size)
    for _, v in docs.shards():
        doc_presence += np.bincount(np.asarray(v.indices), minlength=docs.vocab_size)
    doc_presence /= max(docs.num_docs, 1)
    return {"query_nnz": _describe(queries.nnz), "doc_nnz": _describe(doc_nnz),
            "expected_flops": round(float(_term_presence(queries) @ doc_presence), 4),
            "vocab_size": int(docs.vocab_size), "index_bytes": int(index_bytes)}


# -------------------------------------------------------------------------- search
def sparse_search(encoder: Encoder, corpus: Corpus, queries: Queries, k: int = 1000, *,
                  backend: str = DEFAULT_BACKEND, quantization: str = DEFAULT_QUANTIZATION,
                  cache_dir: str | Path | None = None, shard_size: int = DEFAULT_SHARD_SIZE,
                  batch_size: int | None = None, threads: int | None = None,
                  progress: bool = True) -> tuple[Run, dict[str, Any]]:
    """Encode the corpus (cached) and the queries with a sparse encoder and retrieve with ``backend``.

    Returns the run and a description for the manifest: backend, quantisation (for
    ``lucene-impact``), sparsity statistics and timings.
    """
    check_backend(backend, quantization)
    if getattr(encoder, "kind", "dense") != "sparse":
        raise ConfigError(f"sparse retrieval needs a sparse encoder; this one is {encoder.kind!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
    docs = encode_corpus_sparse(encoder, corpus, cache_dir, shard_size=shard_size, batch_size=batch_size,
                                progress=progress)
    started = time.perf_counter()
    # A sparse encoder returns SparseVectors where the dense Encoder interface declares arrays.
    qvec: SparseVectors = encoder.encode_queries(  # type: ignore[assignment]
        queries.texts, batch_size=batch_size, progress=progress)
    encode_queries_s = time.perf_counter() - started
    started = time.perf_counter()
    info: dict[str, Any] = {"backend": backend}
    if backend == "exact":
        run = exact_sparse_search(docs, qvec, queries.ids, k)
        index_bytes = docs.disk_bytes()
    else:
        vocabulary = encoder.vocabulary()  # type: ignore[attr-defined]
        run, index_info = impact_search(docs, qvec, queries.ids, vocabulary, k, quantization=quantization,
                                        cache_dir=cache_dir, threads=threads)
        index_bytes = int(index_info.pop("index_bytes"))
        info.update({"quantization": quantization, "quantization_rule": QUANTIZATIONS[quantization], **index_info})
    search_s = time.perf_counter() - started
    # Queries per second of the search itself (an impact index built in this call is not counted).
    pure_search_s = float(info.get("lucene_search_s", search_s))
    info["sparsity"] = sparsity_stats(qvec, docs, index_bytes)
    info["timings"] = {"encode_corpus_s": round(docs.encode_seconds, 3), "corpus_from_cache": docs.skipped,
                       "encode_queries_s": round(encode_queries_s, 3), "search_s": round(search_s, 3),
                       "queries_per_s": round(len(queries) / pure_search_s, 1) if pure_search_s > 0 else None}
    log.info("sparse %s search: %d queries in %.2fs", backend, len(queries), search_s)
    return run, info
