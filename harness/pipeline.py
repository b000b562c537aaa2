"""The evaluation pipeline: model x benchmark -> run -> per-query metrics -> results store.

This is the one path every number takes::

    load benchmark (suite)  ->  retrieve (dense: encode corpus [cached] + faiss; or BM25)
        ->  per-query metrics under the protocol card  ->  result directory

The card's prompts and max lengths are protocol settings: when a card sets them,
every model is evaluated with them; when it leaves them empty, each model uses its
own defaults, which are recorded in the manifest (``encoder``), not in the card.
So results of different models under the same card stay comparable.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.benchmark import LoadedBenchmark, get_suite
from harness.data.run import Run
from harness.encoders.base import Encoder
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.io.paths import MAX_COMPONENT_CHARS, child_of
from harness.protocol import ProtocolCard
from harness.retrieval.candidates import score_candidates
from harness.retrieval.dense import dense_search
from harness.retrieval.seismic import parse_backend
from harness.retrieval.sparse import sparse_search
from harness.store import StoredResult, load_result, write_result

log = logging.getLogger("harness.pipeline")

LEXICAL_MODELS = ("bm25",)


@dataclass
class ModelSpec:
    """What to retrieve with: ``bm25``, an alias (``minilm``), a local path or hub id, or an Encoder."""

    name: str
    encoder: Encoder | None = None
    overrides: dict[str, Any] | None = None     # HFEncoder keyword overrides (pooling, normalize, ...)
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    index: str = "Flat"                          # faiss factory string for dense retrieval
    sparse_backend: str = "exact"                # sparse models: exact | lucene-impact (harness.retrieval.sparse)
    quantization: str = "pyserini"               # lucene-impact: impact quantisation rule

    @property
    def is_lexical(self) -> bool:
        return self.encoder is None and self.name.lower() in LEXICAL_MODELS

    @property
    def is_sparse(self) -> bool:
        """A term-weight model (its encoder's kind, or a sparse alias/folder): retrieved by the sparse path."""
        if self.encoder is not None:
            return getattr(self.encoder, "kind", "dense") == "sparse"
        if self.is_lexical:
            return False                # answered without importing torch (BM25 runs no torch model)
        from harness.encoders.sparse import is_sparse_model  # lazy (start-up speed): imports torch, tqdm

        return is_sparse_model(self.name)


def protocol_kwargs(card: ProtocolCard) -> dict[str, Any]:
    """The encoder keywords a protocol card sets (prompts, max lengths), by the encoders' keyword names: every
    model evaluated on the card gets them, unless its own evaluation settings name the same keyword."""
    fields = {"query_prompt": card.query_prompt, "doc_prompt": card.doc_prompt,
              "query_max_length": card.query_max_length, "doc_max_length": card.doc_max_length}
    return {k: v for k, v in fields.items() if v}


def build_encoder(spec: ModelSpec, card: ProtocolCard) -> Encoder:
    """Instantiate the encoder (sparse, dense echo or dense), applying protocol prompts/lengths when the card
    sets them."""
    if spec.encoder is not None:
        return spec.encoder
    from harness.encoders.hf import load_encoder  # lazy (start-up speed): imports torch, tqdm
    from harness.encoders.sparse import load_sparse_encoder  # lazy (start-up speed): imports torch, tqdm

    kwargs: dict[str, Any] = {**protocol_kwargs(card), **(spec.overrides or {})}
    if spec.is_sparse:
        return load_sparse_encoder(spec.name, **kwargs)
    from harness.encoders.dense_echo import is_dense_echo_model, load_echo_dense_encoder  # lazy: imports torch

    if is_dense_echo_model(spec.name):   # a released echo-embeddings checkpoint or an *-echo-dense alias
        return load_echo_dense_encoder(spec.name, **kwargs)
    return load_encoder(spec.name, **kwargs)


def retrieve(spec: ModelSpec, loaded: LoadedBenchmark, *, cache_dir: str | Path | None = None,
             timings: dict[str, float] | None = None,
             details: dict[str, Any] | None = None, progress: bool = True) -> tuple[Run, dict[str, Any]]:
    """Retrieve the top ``card.top_k`` documents per query; returns the run and the model identity.

    ``details`` (when given) receives what the manifest records beyond the identity: for a
    sparse model, the backend, quantisation, sparsity statistics and its timings (``sparse``).
    """
    card = loaded.card
    ds = loaded.dataset
    timings = timings if timings is not None else {}
    start = time.perf_counter()
    if spec.is_lexical:
        from harness.retrieval.bm25 import bm25_search  # lazy (start-up speed): imports tqdm

        index_dir = Path(cache_dir) / "bm25" if cache_dir else None
        run = bm25_search(ds.corpus, ds.queries, k=card.top_k, k1=spec.bm25_k1, b=spec.bm25_b,
                          language=card.bm25_language, index_dir=index_dir, ties=card.bm25_ties)
        identity: dict[str, Any] = {"model": "bm25", "k1": spec.bm25_k1, "b": spec.bm25_b,
                                    "analyzer": card.bm25_language, "fields": "title + ' ' + text"}
    elif loaded.meta.get("candidates"):
        # Reranking protocols (C-MTEB reranking): score exactly each query's candidate list.

        encoder = build_encoder(spec, card)
        identity = {**encoder.identity(), "index": "candidates"}
        run = score_candidates(encoder, loaded)
    elif spec.is_sparse:
        encoder = build_encoder(spec, card)
        run, info = sparse_search(encoder, ds.corpus, ds.queries, k=card.top_k, backend=spec.sparse_backend,
                                  quantization=spec.quantization, cache_dir=cache_dir, progress=progress)

        identity = {**encoder.identity(), "index": spec.sparse_backend}
        if parse_backend(spec.sparse_backend)[0] == "lucene-impact":   # the only backend that quantises
            identity["quantization"] = spec.quantization
        if details is not None:
            details["sparse"] = info
    else:
        encoder = build_encoder(spec, card)
        identity = dict(encoder.identity())
        identity["index"] = spec.index
        run = dense_search(encoder, ds.corpus, ds.queries, k=card.top_k, index=spec.index, cache_dir=cache_dir,
                           progress=progress)
    timings["retrieve_s"] = round(time.perf_counter() - start, 3)
    return Run(run.query_ids, run.doc_ids, run.scores, name=_slug(spec.name), source=run.source), identity


def evaluate_model(spec: ModelSpec, loaded: LoadedBenchmark, out_dir: str | Path, *,
                   cache_dir: str | Path | None = None, suite_name: str | None = None,
                   extra_manifest: dict[str, Any] | None = None, progress: bool = True) -> StoredResult:
    """Run the whole pipeline and write one result directory (atomically); ``progress``: encoding bars."""
    timings: dict[str, float] = {}
    details: dict[str, Any] = {}
    run, identity = retrieve(spec, loaded, cache_dir=cache_dir, timings=timings, details=details, progress=progress)
    start = time.perf_counter()
    suite = get_suite(suite_name or loaded.card.suite)
    evaluation: EvaluationResult = suite.evaluate(loaded, run)
    timings["evaluate_s"] = round(time.perf_counter() - start, 3)
    manifest: dict[str, Any] = {
        "name": f"{loaded.name}/{_slug(spec.name)}",
        "model": spec.name,
        "encoder": identity,
        "dataset": {"name": loaded.name, "path": str(loaded.dataset.path), "split": loaded.dataset.split,
                    "num_docs": len(loaded.dataset.corpus), "num_queries": len(loaded.dataset.queries),
                    "corpus_hash": loaded.dataset.corpus.content_hash(),
                    "queries_hash": loaded.dataset.queries.content_hash()},
        "timings": timings,
        **details,
    }
    manifest.update(extra_manifest or {})
    write_result(out_dir, run=run, evaluation=evaluation, card=loaded.card, manifest=manifest)
    log.info("stored %s in %s", loaded.name, out_dir)
    return load_result(out_dir)


def load_benchmark(dataset_dir: str | Path, suite: str | None = None, **options: Any) -> LoadedBenchmark:
    """Load a dataset folder under a suite's protocol (default: the generic BEIR-layout protocol)."""
    return get_suite(suite or "beir").load(dataset_dir, **{k: v for k, v in options.items() if v is not None})


def _slug(name: str) -> str:
    path = Path(name)
    try:
        base = path.name if path.exists() else name
    except OSError:         # a name too long for the file system is no folder
        base = name
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in base).strip("-") or "model"


def default_out_dir(results_root: str | Path, loaded: LoadedBenchmark, spec: ModelSpec) -> Path:
    """``<results root>/<suite>/<dataset>/<model>``, each part one safe folder name (a model or dataset
    named ``..``, ``.hidden`` or in another script never leads elsewhere)."""
    def folder(name: str) -> str:
        text = "".join(c if c.isascii() else "-" for c in _slug(name)).lstrip(".-")
        return text[:MAX_COMPONENT_CHARS].strip("-") or "model"

    return child_of(results_root, folder(loaded.card.suite), folder(loaded.name), folder(spec.name),
                    what="result folder")


__all__ = ["ModelSpec", "build_encoder", "retrieve", "evaluate_model", "load_benchmark", "default_out_dir",
           "ConfigError"]
