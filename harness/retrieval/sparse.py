"""Sparse retrieval over term weights, with backends chosen by name, all producing the same Run.

* ``exact`` (the reference): float dot products with ``scipy.sparse``, queries in chunks
  against each cached shard, per-shard top-k merged;
* ``lucene-impact``: Lucene impact search through Pyserini/Anserini over integer weights
  (:mod:`harness.retrieval.impact`), quantised by a named rule (:data:`QUANTIZATIONS`);
* ``seismic``: approximate search with Seismic (:mod:`harness.retrieval.seismic`, optional
  extra), its parameters named options (``seismic:query_cut=20,heap_factor=0.9`` or
  ``backend_options``); every seismic search also runs ``exact`` on the same weights and
  records its recall against it (``recall_vs_exact``).

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
from collections.abc import Mapping, Sequence
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
from harness.retrieval.seismic import check_options as check_seismic_options
from harness.retrieval.seismic import parse_backend, recall_against, seismic_module, seismic_search

log = logging.getLogger(__name__)

BACKENDS = ("exact", "lucene-impact", "seismic")
DEFAULT_BACKEND = "exact"
PERCENTILES = (50, 90, 99)


def check_backend(backend: str, quantization: str | None = None,
                  options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Validate a backend (``name`` or ``name:key=value,...``), its quantisation and options before any
    compute; returns the backend name and its full options (ConfigError listing the choices otherwise)."""
    if not isinstance(backend, str):
        raise ConfigError(f"sparse retrieval backend must be a name, got {backend!r}; choose one of "
                          f"{', '.join(BACKENDS)}")
    name, inline = parse_backend(backend)
    if name not in BACKENDS:
        raise ConfigError(f"unknown sparse retrieval backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if quantization is not None:
        check_quantization(quantization)
    both = set(inline) & set(options or {})
    if both:
        raise ConfigError(f"sparse backend {backend!r}: option(s) {', '.join(sorted(both))} given both inline "
                          "and as backend options")
    merged: dict[str, Any] = {**inline, **(options or {})}
    if name != "seismic":
        if merged:
            raise ConfigError(f"sparse backend {name!r} takes no options, got {', '.join(sorted(merged))} "
                              "(only seismic has index options)")
        return name, {}
    seismic_module()          # refused now, not after encoding the corpus, when the extra is missing
    return name, dict(check_seismic_options(merged))


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
                  backend_options: Mapping[str, Any] | None = None,
                  cache_dir: str | Path | None = None, shard_size: int = DEFAULT_SHARD_SIZE,
                  batch_size: int | None = None, threads: int | None = None,
                  progress: bool = True) -> tuple[Run, dict[str, Any]]:
    """Encode the corpus (cached) and the queries with a sparse encoder and retrieve with ``backend``.

    Returns the run and a description for the manifest: backend, quantisation (for
    ``lucene-impact``), index options and recall against ``exact`` (for ``seismic``),
    sparsity statistics and timings.
    """
    name, options = check_backend(backend, quantization, backend_options)
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
    info: dict[str, Any] = {"backend": name}
    if name == "exact":
        run = exact_sparse_search(docs, qvec, queries.ids, k)
        index_bytes = docs.disk_bytes()
        pure_search_s = time.perf_counter() - started
    elif name == "lucene-impact":
        vocabulary = encoder.vocabulary()  # type: ignore[attr-defined]
        run, index_info = impact_search(docs, qvec, queries.ids, vocabulary, k, quantization=quantization,
                                        cache_dir=cache_dir, threads=threads)
        index_bytes = int(index_info.pop("index_bytes"))
        pure_search_s = float(index_info["lucene_search_s"])
        info.update({"quantization": quantization, "quantization_rule": QUANTIZATIONS[quantization], **index_info})
    else:
        run, index_info = seismic_search(docs, qvec, queries.ids, k, options=options, cache_dir=cache_dir,
                                         threads=threads)
        index_bytes = int(index_info.pop("index_bytes"))
        pure_search_s = float(index_info.pop("search_s"))
        opts = index_info.pop("options")
        started_exact = time.perf_counter()
        reference = exact_sparse_search(docs, qvec, queries.ids, k)
        exact_s = time.perf_counter() - started_exact
        info.update({"seismic": opts, **index_info, "recall_vs_exact": recall_against(reference, run, k),
                     "exact_search_s": round(exact_s, 3)})
    search_s = time.perf_counter() - started
    info["sparsity"] = sparsity_stats(qvec, docs, index_bytes)
    # Queries per second of the search itself (not an index built in this call, nor the exact reference).
    info["timings"] = {"encode_corpus_s": round(docs.encode_seconds, 3), "corpus_from_cache": docs.skipped,
                       "encode_queries_s": round(encode_queries_s, 3), "search_s": round(search_s, 3),
                       "queries_per_s": round(len(queries) / pure_search_s, 1) if pure_search_s > 0 else None}
    log.info("sparse %s search: %d queries in %.2fs", name, len(queries), search_s)
    return run, info
