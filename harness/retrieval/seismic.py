"""Approximate sparse retrieval with Seismic (the PyPI package ``pyseismic-lsr``, extra ``seismic``).

Seismic keeps, per term, only the largest postings (``n_postings`` on average, at most
``max_fraction`` times that), clusters each posting list into blocks summarised by their
largest weights (``centroid_fraction``, ``min_cluster_size``, ``summary_energy``,
``doc_cut``), and at search time looks only at the ``query_cut`` heaviest query terms and
skips a block whose summary score is below ``heap_factor`` times the current k-th best.
Its scores are dot products over the stored (16-bit float) weights, so they differ from
the exact ones in the third decimal.  Being approximate, every evaluation with it reports
its recall against ``exact`` on the same weights (:func:`recall_against`).

The parameters are named options (:data:`DEFAULT_OPTIONS`), given as a mapping or inline
in the backend name, like a faiss factory string: ``seismic:query_cut=20,heap_factor=0.9``.
The index is built from the cached document weights and cached under
``<cache root>/seismic/<key>`` (sparse cache entry, build options, package version); the
library's k-means is seeded by itself, so a rebuilt index may retrieve slightly differently.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
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

log = logging.getLogger(__name__)

NAME = "seismic"
PACKAGE = "pyseismic-lsr"
INSTALL_HINT = ("install the seismic extra: pip install -e '.[seismic]' (scripts/setup.sh --dev installs it), "
                f"or pip install {PACKAGE}")
# Build options are the library's defaults; search options those of its command-line tools.
BUILD_OPTIONS: dict[str, int | float] = {"n_postings": 3500, "centroid_fraction": 0.1, "min_cluster_size": 2,
                                         "summary_energy": 0.4, "max_fraction": 1.5, "doc_cut": 15}
SEARCH_OPTIONS: dict[str, int | float] = {"query_cut": 10, "heap_factor": 0.7}
DEFAULT_OPTIONS: dict[str, int | float] = {**BUILD_OPTIONS, **SEARCH_OPTIONS}
_INTEGER = ("n_postings", "min_cluster_size", "doc_cut", "query_cut")
# (lowest, highest, whether the lowest itself is allowed)
_RANGES: dict[str, tuple[float, float, bool]] = {
    "n_postings": (1, float("inf"), True), "min_cluster_size": (1, float("inf"), True),
    "doc_cut": (1, float("inf"), True), "query_cut": (1, float("inf"), True),
    "centroid_fraction": (0.0, 1.0, False), "summary_energy": (0.0, 1.0, False),
    "max_fraction": (1.0, float("inf"), True), "heap_factor": (0.0, 1.0, False)}
U16_COMPONENTS = 1 << 16            # SeismicIndex stores 16-bit term ids; larger vocabularies use the LV types
INDEX_FORMAT = 1
META_FILE = "harness-seismic.json"
INDEX_STEM = "index"                # the library appends .index.seismic
RECALL_DEPTHS = (10, 100, 1000)


def seismic_module() -> Any:
    """The ``seismic`` module, or a ConfigError saying how to install it."""
    try:
        seismic = importlib.import_module("seismic")        # untyped compiled module: no stubs to check
    except ImportError as exc:
        raise ConfigError(f"the sparse backend 'seismic' needs the package {PACKAGE}, which is not installed "
                          f"({exc}); {INSTALL_HINT}") from None
    return seismic


def parse_backend(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``name[:key=value,...]`` into the backend name and its raw option strings."""
    name, sep, rest = str(spec).partition(":")
    options: dict[str, str] = {}
    if sep:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise ConfigError(f"sparse backend {spec!r}: expected {name}:key=value[,key=value...], "
                                  f"got {item!r}")
            if key.strip() in options:
                raise ConfigError(f"sparse backend {spec!r}: option {key.strip()!r} given twice")
            options[key.strip()] = value.strip()
    return name.strip(), options


def check_options(options: Mapping[str, Any] | None) -> dict[str, int | float]:
    """The full option set (defaults filled in), values converted and checked; ConfigError naming the problem."""
    out: dict[str, int | float] = dict(DEFAULT_OPTIONS)
    for key, raw in (options or {}).items():
        if key not in DEFAULT_OPTIONS:
            raise ConfigError(f"unknown seismic option {key!r}; choose from "
                              + ", ".join(f"{k} (default {v})" for k, v in DEFAULT_OPTIONS.items()))
        try:
            if isinstance(raw, bool):
                raise ValueError
            value: int | float = int(raw) if key in _INTEGER else float(raw)
            if key in _INTEGER and float(raw) != value:
                raise ValueError
        except (TypeError, ValueError):
            kind = "an integer" if key in _INTEGER else "a number"
            raise ConfigError(f"seismic option {key}: expected {kind}, got {raw!r}") from None
        low, high, closed = _RANGES[key]
        if not (value >= low if closed else value > low) or value > high:
            bounds = f"{'[' if closed else '('}{low:g}, {high:g}]" if high != float("inf") else f">= {low:g}"
            raise ConfigError(f"seismic option {key}={value!r} is out of range; expected {bounds}")
        out[key] = value
    return out


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """The library prints progress to the process's stdout; keep it off ours (``--format json``)."""
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):     # replaced streams (captured output): nothing to guard
        yield
        return
    sys.stdout.flush()
    saved = os.dup(out_fd)
    try:
        os.dup2(err_fd, out_fd)
        yield
    finally:
        os.dup2(saved, out_fd)
        os.close(saved)


def _classes(vocab_size: int) -> tuple[Any, Any]:
    seismic = seismic_module()
    if vocab_size <= U16_COMPONENTS:
        return seismic.SeismicDataset, seismic.SeismicIndex
    return seismic.SeismicDatasetLV, seismic.SeismicIndexLV


def build_seismic_index(docs: CorpusSparse, options: Mapping[str, Any] | None = None,
                        cache_dir: str | Path | None = None, threads: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The (cached) Seismic index of ``docs`` under the build options; returns (index, its metadata)."""
    opts = check_options(options)
    build = {k: opts[k] for k in BUILD_OPTIONS}
    dataset_cls, index_cls = _classes(docs.vocab_size)
    key = {"format": INDEX_FORMAT, "sparse_entry": docs.key, "build": build, "index_type": index_cls.__name__,
           "package": metadata.version(PACKAGE)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    root = cache_root(cache_dir) / "seismic"
    path = root / digest
    if (path / META_FILE).is_file():
        with _stdout_to_stderr():
            index = index_cls.load(str(path / f"{INDEX_STEM}.index.seismic"))
        return index, json.loads((path / META_FILE).read_text(encoding="utf-8"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        dataset = dataset_cls(dim=int(docs.vocab_size))
        for start, block in docs.shards():
            ids = docs.doc_ids[start:start + len(block)]
            dataset.add_documents_by_id(list(ids), np.asarray(block.indices, dtype=np.int64),
                                        np.asarray(block.data, dtype=np.float32),
                                        np.asarray(block.indptr, dtype=np.int64))
        with _stdout_to_stderr():
            index = index_cls.build_from_dataset(dataset, num_threads=int(max(1, threads or 1)), **build)
            folder = Path(tmp) / "index"
            folder.mkdir()
            index.save(str(folder / INDEX_STEM))
        meta = {"key": key, "indexed_docs": int(index.len), "postings": int(index.nnz),
                "index_seconds": round(time.perf_counter() - started, 3),
                "index_bytes": sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())}
        atomic_write_json(folder / META_FILE, meta)
        try:
            folder.rename(path)
        except OSError:       # built meanwhile by another process: theirs is as good
            if not (path / META_FILE).is_file():
                raise
    log.info("seismic index of %d docs built in %.1fs at %s", docs.num_docs, meta["index_seconds"], path)
    return index, meta


def seismic_search(docs: CorpusSparse, queries: SparseVectors, query_ids: Sequence[str], k: int = 1000, *,
                   options: Mapping[str, Any] | None = None, cache_dir: str | Path | None = None,
                   threads: int | None = None, name: str = "sparse-seismic") -> tuple[Run, dict[str, Any]]:
    """Approximate top-``k`` dot products; returns the run and the index description (options, timings)."""
    if len(query_ids) != len(queries):
        raise ConfigError(f"{len(query_ids)} query ids but {len(queries)} query vectors")
    if queries.vocab_size != docs.vocab_size:
        raise ConfigError(f"query vocabulary {queries.vocab_size} != document vocabulary {docs.vocab_size}")
    opts = check_options(options)
    index, meta = build_seismic_index(docs, opts, cache_dir, threads)
    started = time.perf_counter()
    qs, ds, ss = search_index(index, queries, query_ids, k, opts, threads)
    search_s = time.perf_counter() - started
    info = {"options": dict(opts), "index_type": meta["key"]["index_type"], "package_version": meta["key"]["package"],
            "index_seconds": meta.get("index_seconds"), "index_bytes": meta.get("index_bytes", 0),
            "search_s": round(search_s, 3)}
    return Run.from_arrays(qs, ds, ss, name=name), info


def search_index(index: Any, queries: SparseVectors, query_ids: Sequence[str], k: int,
                 options: Mapping[str, Any], threads: int | None = None) -> tuple[list[str], list[str], list[float]]:
    """Top-``k`` of a built index for each query, as parallel (query id, doc id, score) lists
    (``options``: checked options with ``query_cut`` and ``heap_factor``)."""
    seismic = seismic_module()
    string_type = seismic.get_seismic_string()
    ids, comps, vals = [], [], []
    for i, qid in enumerate(query_ids):
        terms, weights = queries.row(i)
        if len(terms) == 0:
            continue          # nothing to match: no hits, as with the other backends
        ids.append(str(qid))
        comps.append(np.asarray([str(int(t)) for t in terms], dtype=string_type))
        vals.append(np.asarray(weights, dtype=np.float32))
    qs: list[str] = []
    ds: list[str] = []
    ss: list[float] = []
    if not ids:
        return qs, ds, ss
    results = index.batch_search(np.asarray(ids, dtype=string_type), comps, vals, k=int(k),
                                 query_cut=int(options["query_cut"]), heap_factor=float(options["heap_factor"]),
                                 num_threads=int(max(1, threads or 1)))
    for hits in results:
        for qid, score, doc in hits:
            if score > 0:
                qs.append(qid)
                ds.append(doc)
                ss.append(float(score))
    return qs, ds, ss


def recall_against(reference: Run, run: Run, k: int) -> dict[str, float]:
    """Recall of ``run`` against ``reference`` (exact) at ``k`` and the shallower depths of
    :data:`RECALL_DEPTHS`: the mean over the reference's queries of |top-d of run ∩ top-d of
    reference| / |top-d of reference| (ties at the cut-off broken by doc id); keys ``recall@d``."""
    ref, got = reference.to_dict(), run.to_dict()
    out: dict[str, float] = {}
    for depth in sorted({d for d in RECALL_DEPTHS if d < k} | {int(k)}):
        shares = []
        for qid, docs in ref.items():
            want = sorted(docs, key=lambda d: (-docs[d], d))[:depth]
            mine = got.get(qid, {})
            have = set(sorted(mine, key=lambda d: (-mine[d], d))[:depth])
            if want:
                shares.append(len(have.intersection(want)) / len(want))
        out[f"recall@{depth}"] = round(float(np.mean(shares)), 6) if shares else 0.0
    return out


__all__ = ["NAME", "DEFAULT_OPTIONS", "BUILD_OPTIONS", "SEARCH_OPTIONS", "parse_backend", "check_options",
           "seismic_module", "build_seismic_index", "search_index", "seismic_search", "recall_against"]
