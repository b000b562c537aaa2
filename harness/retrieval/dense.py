"""Dense retrieval with faiss over cached corpus embeddings.

``index="Flat"`` (the default) is exact inner-product search.  It never builds one
big index: each cached shard (a memmap) is searched with ``faiss.knn`` and the
per-shard top-k lists are merged in a faiss result heap, so peak memory is one
shard plus the running top-k.  Any other value is a faiss factory string
(``"HNSW32"``, ``"IVF256,Flat"``, ``"IVF1024,PQ64"`` ...) built with the inner-product
metric, trained on an evenly spaced sample of the corpus when the index needs
training, filled shard by shard, and tuned with ``search_params`` such as
``{"nprobe": 32}`` or ``{"efSearch": 256}``.  GPU faiss is used when the installed
faiss has GPU support and sees a GPU (``use_gpu=None``), for indexes that support it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.data.beir import Corpus, Queries
from harness.data.run import Run
from harness.encoders.base import Encoder
from harness.encoders.cache import DEFAULT_SHARD_SIZE, CorpusEmbeddings, encode_corpus
from harness.errors import ConfigError

log = logging.getLogger(__name__)

FLAT = "flat"
_ADD_CHUNK = 65_536  # rows copied into a non-flat index at a time (bounds extra memory)


def gpu_count() -> int:
    """Number of GPUs faiss can use (0 for CPU-only faiss builds)."""
    import faiss

    get = getattr(faiss, "get_num_gpus", None)
    try:
        return int(get()) if get is not None else 0
    except RuntimeError:
        return 0


def _want_gpu(use_gpu: bool | None) -> bool:
    available = gpu_count() > 0
    if use_gpu and not available:
        raise ConfigError("use_gpu=True but the installed faiss sees no GPU (install faiss-gpu on a GPU machine)")
    return available if use_gpu is None else bool(use_gpu)


def _check_queries(query_vectors: np.ndarray, dim: int) -> np.ndarray:
    q = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if q.ndim != 2 or q.shape[1] != dim:
        raise ConfigError(f"query vectors have shape {q.shape}; the corpus embeddings have dimension {dim}")
    return q


def exact_search(embeddings: CorpusEmbeddings, query_vectors: np.ndarray, k: int, *,
                 query_batch_size: int = 4096, use_gpu: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` inner-product search, shard by shard; returns (scores, row indices), best first."""
    import faiss

    q = _check_queries(query_vectors, embeddings.dim)
    k = min(k, embeddings.num_docs)
    heap = faiss.ResultHeap(len(q), k, keep_max=True)
    gpu_res = faiss.StandardGpuResources() if _want_gpu(use_gpu) else None
    for start, shard in embeddings.shards():
        kk = min(k, len(shard))
        for qs in range(0, len(q), query_batch_size):
            batch = q[qs:qs + query_batch_size]
            if gpu_res is not None:
                scores, rows = faiss.knn_gpu(gpu_res, batch, shard, kk, metric=faiss.METRIC_INNER_PRODUCT)
            else:
                scores, rows = faiss.knn(batch, shard, kk, metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result_subset(np.arange(qs, qs + len(batch), dtype=np.int64), scores, rows + start)
    heap.finalize()
    return heap.D, heap.I


def _training_sample(embeddings: CorpusEmbeddings, size: int) -> np.ndarray:
    """An evenly spaced (deterministic) sample of ``size`` corpus rows, gathered shard by shard."""
    wanted = np.unique(np.linspace(0, embeddings.num_docs - 1, num=size).round().astype(np.int64))
    parts = []
    for start, shard in embeddings.shards():
        local = wanted[(wanted >= start) & (wanted < start + len(shard))] - start
        if len(local):
            parts.append(np.asarray(shard[local], dtype=np.float32))
    return np.ascontiguousarray(np.concatenate(parts, axis=0))


def build_index(embeddings: CorpusEmbeddings, spec: str, *, train_size: int | None = None,
                search_params: Mapping[str, Any] | None = None, use_gpu: bool | None = None):
    """Build a faiss index from a factory string (inner product), trained and filled from the cache."""
    import faiss

    try:
        index = faiss.index_factory(embeddings.dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise ConfigError(f"invalid faiss index factory string {spec!r}: {str(exc).strip().splitlines()[-1]}") from None
    on_gpu = False
    if _want_gpu(use_gpu):
        try:
            index = faiss.index_cpu_to_all_gpus(index)
            on_gpu = True
        except (RuntimeError, AttributeError) as exc:  # e.g. HNSW has no GPU version
            log.info("faiss index %r stays on CPU: %s", spec, exc)
    if not index.is_trained:
        size = min(embeddings.num_docs, train_size or 200_000)
        started = time.perf_counter()
        index.train(_training_sample(embeddings, size))
        log.info("trained faiss index %r on %d vectors in %.1fs", spec, size, time.perf_counter() - started)
    for _start, shard in embeddings.shards():
        for cs in range(0, len(shard), _ADD_CHUNK):
            index.add(np.ascontiguousarray(shard[cs:cs + _ADD_CHUNK], dtype=np.float32))
    if search_params:
        space = faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()
        for name, value in search_params.items():
            try:
                space.set_index_parameter(index, name, value)
            except RuntimeError as exc:
                raise ConfigError(f"faiss index {spec!r} does not take search parameter {name!r}: "
                                  f"{str(exc).strip().splitlines()[-1]}") from None
    return index


def search_embeddings(embeddings: CorpusEmbeddings, query_vectors: np.ndarray, query_ids: Sequence[str], *,
                      k: int = 1000, index: str = "Flat", search_params: Mapping[str, Any] | None = None,
                      train_size: int | None = None, query_batch_size: int = 4096,
                      use_gpu: bool | None = None, name: str = "dense") -> Run:
    """Top-``k`` documents per query as a :class:`Run` (scores are inner products)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
    if len(query_ids) != len(query_vectors):
        raise ConfigError(f"{len(query_ids)} query ids but {len(query_vectors)} query vectors")
    started = time.perf_counter()
    if index.strip().lower() == FLAT:
        if search_params:
            raise ConfigError("the exact 'Flat' index takes no search parameters")
        scores, rows = exact_search(embeddings, query_vectors, k, query_batch_size=query_batch_size, use_gpu=use_gpu)
    else:
        q = _check_queries(query_vectors, embeddings.dim)
        faiss_index = build_index(embeddings, index, train_size=train_size, search_params=search_params,
                                  use_gpu=use_gpu)
        kk = min(k, embeddings.num_docs)
        parts = [faiss_index.search(q[qs:qs + query_batch_size], kk) for qs in range(0, len(q), query_batch_size)]
        scores = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, kk), np.float32)
        rows = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, kk), np.int64)
    found = rows >= 0  # approximate indexes may return fewer than k hits (-1 rows)
    qids = np.repeat(np.asarray(list(query_ids), dtype=object), found.sum(axis=1)).astype(str)
    dids = np.asarray(embeddings.doc_ids, dtype=object)[rows[found]].astype(str)
    log.info("searched %d queries (%s, k=%d) in %.2fs", len(query_ids), index, k, time.perf_counter() - started)
    return Run.from_arrays(qids, dids, scores[found], name=name)


def dense_search(encoder: Encoder, corpus: Corpus, queries: Queries, k: int = 1000, index: str = "Flat",
                 cache_dir=None, *, search_params: Mapping[str, Any] | None = None, train_size: int | None = None,
                 shard_size: int = DEFAULT_SHARD_SIZE, batch_size: int | None = None,
                 query_batch_size: int = 4096, use_gpu: bool | None = None, progress: bool = True) -> Run:
    """Encode the corpus (through the embedding cache) and the queries, then retrieve the top ``k``.

    ``cache_dir`` is the cache root (default ``$HARNESS_CACHE`` or ``~/.cache/retrieval-harness``).
    """
    embeddings = encode_corpus(encoder, corpus, cache_dir, shard_size=shard_size, batch_size=batch_size,
                               progress=progress)
    query_vectors = encoder.encode_queries(queries.texts, batch_size=batch_size, progress=progress)
    return search_embeddings(embeddings, query_vectors, queries.ids, k=k, index=index, search_params=search_params,
                             train_size=train_size, query_batch_size=query_batch_size, use_gpu=use_gpu)
