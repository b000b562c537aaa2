"""Lucene impact search over quantised term weights, through Pyserini/Anserini.

Documents are written as Anserini's ``JsonVectorCollection`` (``{"id", "contents": "",
"vector": {token: impact}}``) and indexed with ``IndexCollection -impact -pretokenized``:
each token string is one Lucene term whose frequency is its integer impact, and the score
of a document is ``sum_j q_j * d_j`` over the shared terms (Anserini's impact similarity).
Weights are quantised by a named rule (:func:`quantize`); weights
that round to 0 are dropped, and how many were dropped is reported (unquantised floats fed
to Lucene would all be truncated, Pyserini issue 981).

Indexes are cached under ``<cache root>/impact/<key>``: the key hashes the sparse cache
entry's key (model, settings, corpus), the quantisation rule and the Pyserini version.  A
folder is built under a temporary name and renamed when complete.
"""
from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.run import Run
from harness.encoders.cache import cache_root
from harness.encoders.sparse_cache import CorpusSparse
from harness.encoders.sparse_vectors import SparseVectors
from harness.errors import ConfigError
from harness.io import atomic_write_json
from harness.retrieval.java import ensure_jvm, quiet_anserini_logging

log = logging.getLogger(__name__)

# Impact quantisation rules: weight -> integer impact (rounded half to even, as Python's round).
QUANTIZATIONS = {
    "pyserini": "round(w / 5 * 256)",     # Pyserini/Anserini's SPLADE encoders
    "splade": "rint(w * 100)",             # naver/splade and Tevatron
}
DEFAULT_QUANTIZATION = "pyserini"
INDEX_FORMAT = 1
META_FILE = "harness-impact.json"
WRITE_BATCH = 10_000


def check_quantization(rule: str) -> None:
    if rule not in QUANTIZATIONS:
        raise ConfigError(f"unknown impact quantisation {rule!r}; choose one of "
                          + ", ".join(f"{k} ({v})" for k, v in QUANTIZATIONS.items()))


def quantize(weights: np.ndarray, rule: str) -> np.ndarray:
    """Integer impacts (int32) of float weights under a rule of :data:`QUANTIZATIONS`."""
    check_quantization(rule)
    w = np.asarray(weights, dtype=np.float64)
    scaled = w / 5.0 * 256.0 if rule == "pyserini" else w * 100.0
    return np.rint(scaled).astype(np.int32)


def _java():
    ensure_jvm()
    from pyserini.pyclass import autoclass

    quiet_anserini_logging()
    return autoclass


def _check_vocabulary(vocabulary: Sequence[str], size: int) -> list[str]:
    """Token strings become Lucene terms: they must be unique and free of whitespace."""
    vocab = [str(t) for t in vocabulary]
    if len(vocab) != size:
        raise ConfigError(f"vocabulary has {len(vocab)} tokens, the vectors {size} ids")
    if len(set(vocab)) != len(vocab) or any(not t or any(c.isspace() for c in t) for t in vocab):
        raise ConfigError("vocabulary tokens must be unique non-empty strings without whitespace to become "
                          "Lucene terms")
    return vocab


def write_vector_collection(docs: CorpusSparse, vocabulary: Sequence[str], quantization: str,
                            folder: Path) -> dict[str, int]:
    """Write the documents as an Anserini ``JsonVectorCollection`` (docs.jsonl) into ``folder``."""
    vocab = _check_vocabulary(vocabulary, docs.vocab_size)
    kept = dropped = 0
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as out:
        for start, block in docs.shards():
            impacts = quantize(np.asarray(block.data), quantization)
            indptr, indices = np.asarray(block.indptr), np.asarray(block.indices)
            lines = []
            for r in range(len(block)):
                a, b = int(indptr[r]), int(indptr[r + 1])
                vec = {vocab[int(t)]: int(w) for t, w in zip(indices[a:b], impacts[a:b]) if w > 0}
                kept += len(vec)
                dropped += (b - a) - len(vec)
                lines.append(json.dumps({"id": docs.doc_ids[start + r], "contents": "", "vector": vec},
                                        ensure_ascii=False))
                if len(lines) >= WRITE_BATCH:
                    out.write("\n".join(lines) + "\n")
                    lines = []
            if lines:
                out.write("\n".join(lines) + "\n")
    return {"doc_postings": kept, "doc_weights_dropped": dropped}


def build_impact_index(docs: CorpusSparse, vocabulary: Sequence[str], quantization: str,
                       cache_dir: str | Path | None = None, threads: int | None = None) -> tuple[Path, dict[str, Any]]:
    """The (cached) Lucene impact index of ``docs`` under ``quantization``; returns (path, its metadata)."""
    key = {"format": INDEX_FORMAT, "sparse_entry": docs.key, "quantization": quantization,
           "pyserini": metadata.version("pyserini")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    root = cache_root(cache_dir) / "impact"
    path = root / digest
    if (path / META_FILE).is_file():
        return path, json.loads((path / META_FILE).read_text(encoding="utf-8"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        counts = write_vector_collection(docs, vocabulary, quantization, Path(tmp) / "input")
        index = Path(tmp) / "index"
        autoclass = _java()
        args = ["-collection", "JsonVectorCollection", "-input", str(Path(tmp) / "input"), "-index", str(index),
                "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(max(1, threads or 1)),
                "-impact", "-pretokenized"]
        autoclass("io.anserini.index.IndexCollection").main(args)
        meta = {"key": key, **counts, "index_seconds": round(time.perf_counter() - started, 3),
                "index_bytes": sum(f.stat().st_size for f in index.rglob("*") if f.is_file())}
        atomic_write_json(index / META_FILE, meta)
        try:
            index.rename(path)
        except OSError:       # built meanwhile by another process: use that one
            if not (path / META_FILE).is_file():
                raise
    log.info("impact index of %d docs built in %.1fs at %s", docs.num_docs, meta["index_seconds"], path)
    return path, json.loads((path / META_FILE).read_text(encoding="utf-8"))


def impact_search(docs: CorpusSparse, queries: SparseVectors, query_ids: Sequence[str], vocabulary: Sequence[str],
                  k: int = 1000, *, quantization: str, cache_dir: str | Path | None = None,
                  threads: int | None = None, name: str = "sparse-impact") -> tuple[Run, dict[str, Any]]:
    """Top-``k`` by Lucene impact scores (integers); returns the run and the index description."""
    if len(query_ids) != len(queries):
        raise ConfigError(f"{len(query_ids)} query ids but {len(queries)} query vectors")
    path, meta = build_impact_index(docs, vocabulary, quantization, cache_dir, threads)
    vocab = _check_vocabulary(vocabulary, queries.vocab_size)
    autoclass = _java()
    from pyserini.pyclass import JInt

    searcher = autoclass("io.anserini.search.SimpleImpactSearcher")(str(path))
    hash_map, array_list = autoclass("java.util.HashMap"), autoclass("java.util.ArrayList")
    jqueries, jqids = array_list(), array_list()
    dropped = 0
    for i, qid in enumerate(query_ids):
        ids, weights = queries.row(i)
        impacts = quantize(weights, quantization)
        dropped += int(np.count_nonzero(impacts <= 0))
        if not np.any(impacts > 0):
            continue        # nothing left to match: no hits
        jq = hash_map()
        for t, w in zip(ids, impacts):
            if w > 0:
                jq.put(vocab[int(t)], JInt(int(w)))
        jqueries.add(jq)
        jqids.add(str(qid))
    qs, ds, ss = [], [], []
    started = time.perf_counter()
    try:
        if jqids.size():
            results = searcher.batch_search(jqueries, jqids, int(k), int(max(1, threads or 1)))
            for entry in results.entrySet().toArray():
                qid = str(entry.getKey())
                for hit in entry.getValue():
                    qs.append(qid)
                    ds.append(str(hit.docid))
                    ss.append(float(hit.score))
    finally:
        searcher.close()
    info = {"index_seconds": meta.get("index_seconds"), "index_bytes": meta.get("index_bytes", 0),
            "lucene_search_s": round(time.perf_counter() - started, 3),
            "doc_weights_dropped": meta.get("doc_weights_dropped"), "query_weights_dropped": dropped}
    return Run.from_arrays(qs, ds, ss, name=name), info
