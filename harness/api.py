"""The Python API for evaluating a model: ``harness.evaluate(model_or_encoder, dataset_dir, ...)``.

It takes the same path as ``harness eval`` (load the folder under a benchmark protocol, retrieve,
score per query under the protocol card) with the CLI's default metrics, and returns an
:class:`Evaluation`: the averages, the per-query values, the card and the run, and a DataFrame
with ``model``, ``dataset``, ``split`` and ``card`` columns.  Nothing is written unless ``out_dir``
is given (then the result directory is exactly what ``harness eval --out`` writes).

``model_or_encoder`` is one of:

* a name: ``"bm25"``, an alias (``"minilm"``), a local folder or a hub id (offline first, as the CLI);
* a :class:`harness.encoders.base.Encoder` (its ``identity()`` keys the embedding cache);
* any object with ``encode(texts)`` returning one vector per text, e.g. a sentence-transformers
  model (its ``encode_query``/``encode_document`` are used when present, and its similarity
  function picks cosine or dot product).  Such an object has no identity the cache could trust
  (its weights may change between calls), so its corpus vectors are never cached.
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.benchmark import LoadedBenchmark, get_suite
from harness.data.run import Run
from harness.encoders.base import Encoder
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.metrics import DEFAULT_METRICS
from harness.protocol import ProtocolCard

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Evaluation:
    """One model on one dataset: averages, per-query values, the card they were scored under, the run."""

    model: str
    dataset: str
    split: str
    card: ProtocolCard
    result: EvaluationResult
    run: Run
    path: Path | None = None            # the result directory, when ``out_dir`` was given

    @property
    def metrics(self) -> dict[str, float]:
        """``{metric: mean over queries}``."""
        return dict(self.result.aggregate)

    def to_frame(self, per_query: bool = False) -> pd.DataFrame:
        """A long DataFrame (``metric, value, n_queries``, or ``query_id, metric, value`` per query) with the
        ``model``, ``dataset``, ``split`` and ``card`` (the protocol card's fingerprint) columns first."""
        frame = self.result.to_frame(per_query)
        for column, value in reversed((("model", self.model), ("dataset", self.dataset), ("split", self.split),
                                       ("card", self.card.fingerprint()))):
            frame.insert(0, column, value)
        return frame


class CallableEncoder(Encoder):
    """Any object with ``encode(texts)`` (a sentence-transformers model, a user's own class) as an Encoder.

    sentence-transformers models encode queries with ``encode_query`` and documents with
    ``encode_document`` when they have them (their prompts apply), and declare their similarity
    (``similarity_fn_name``): cosine vectors are L2-normalised here so the inner-product search is
    cosine.  Other objects are treated as cosine models unless ``similarity="dot"`` is given."""

    def __init__(self, model: Any, name: str, similarity: str | None = None):
        self.model, self.name = model, name
        declared = getattr(model, "similarity_fn_name", None)
        self.similarity = similarity or ("dot" if declared == "dot" else "cos")
        if self.similarity not in ("cos", "dot"):
            raise ConfigError(f"similarity must be 'cos' or 'dot', got {self.similarity!r}")

    def identity(self) -> dict[str, Any]:
        return {"model": self.name, "kind": "python object", "class": type(self.model).__qualname__,
                "similarity": self.similarity}

    def _encode(self, method: str, texts: Sequence[str], batch_size: int | None, progress: bool) -> np.ndarray:
        encode = getattr(self.model, method, None) or self.model.encode
        kwargs: dict[str, Any] = {"batch_size": batch_size} if batch_size else {}
        if hasattr(self.model, "similarity_fn_name"):       # sentence-transformers' keyword arguments
            kwargs.update(show_progress_bar=progress, convert_to_numpy=True)
        vectors = np.asarray(encode(list(texts), **kwargs), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ConfigError(f"{self.name}.{method if hasattr(self.model, method) else 'encode'} returned shape "
                              f"{vectors.shape} for {len(texts)} texts; expected (texts, dimensions)")
        if self.similarity == "cos":
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,
                       progress: bool = True) -> np.ndarray:
        return self._encode("encode_query", texts, batch_size, progress)

    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,
                    progress: bool = True) -> np.ndarray:
        return self._encode("encode_document", texts, batch_size, progress)


def _model_spec(model: Any, similarity: str | None, overrides: dict[str, Any] | None):
    from harness.pipeline import ModelSpec

    if isinstance(model, (str, Path)):
        from harness.encoders.model_check import check_model  # lazy (start-up speed): reads the model registry

        check_model(str(model))          # a typo fails at once, with a did-you-mean
        return ModelSpec(str(model), overrides=overrides), True
    if overrides:
        raise ConfigError("encoder options (pooling, prompts, ...) apply to a model name, not to an encoder object")
    if isinstance(model, Encoder):
        return ModelSpec(str(model.identity().get("model", type(model).__name__)), encoder=model), True
    if callable(getattr(model, "encode", None)):
        name = str(getattr(model, "name_or_path", None) or getattr(getattr(model, "model_card_data", None),
                                                                    "base_model", None) or type(model).__name__)
        return ModelSpec(name, encoder=CallableEncoder(model, name, similarity)), False
    raise ConfigError(f"cannot evaluate a {type(model).__name__}: give a model name or path, a harness Encoder, "
                      "or an object with encode(texts) -> vectors (e.g. a sentence-transformers model)")


def evaluate(model_or_encoder: Any, dataset_dir: str | Path, *, suite: str | None = None,
             dataset: str | None = None, split: str | None = None, metrics: Sequence[str] | None = None,
             top_k: int | None = None, out_dir: str | Path | None = None, cache_dir: str | Path | None = None,
             similarity: str | None = None, encoder_options: dict[str, Any] | None = None,
             progress: bool = False, **suite_options: Any) -> Evaluation:
    """Evaluate a model (name, Encoder or object with ``encode``) on a dataset folder, as ``harness eval`` does.

    ``suite`` picks the benchmark protocol (default: the generic BEIR-layout protocol); ``metrics``
    default to the protocol's plus the CLI's defaults (``ndcg@10, recall@100, mrr@10, map, p@10,
    success@10``) when no suite is named, else the suite's; ``out_dir`` stores the result directory
    ``harness compare --result`` and the frames read; ``encoder_options`` are the CLI's encoder
    overrides for a model name (``pooling``, ``normalize``, ``query_prompt``, ``doc_prompt``,
    ``query_max_length``, ``doc_max_length``, ``batch_size``); ``suite_options`` the protocol's own
    options (e.g. ``language="fr"``).
    """
    from harness import pipeline  # lazy (start-up speed): imports faiss and the retrieval back ends

    spec, cacheable = _model_spec(model_or_encoder, similarity, encoder_options)
    loaded: LoadedBenchmark = pipeline.load_benchmark(dataset_dir, suite, split=split, dataset=dataset,
                                                      **suite_options)
    changes: dict[str, Any] = {}
    if metrics:
        changes["metrics"] = tuple(metrics)
    elif suite is None:
        changes["metrics"] = tuple(dict.fromkeys(loaded.card.metrics + DEFAULT_METRICS))
    if top_k:
        changes["top_k"] = top_k
    if changes:
        loaded.card = loaded.card.with_(**changes)
    with tempfile.TemporaryDirectory(prefix="harness-api-") as scratch:
        cache = cache_dir if cacheable else scratch        # an object's vectors are never cached across calls
        if out_dir is not None:
            stored = pipeline.evaluate_model(spec, loaded, out_dir, cache_dir=cache, progress=progress)
            return Evaluation(spec.name, loaded.name, loaded.dataset.split, stored.card, stored.evaluation,
                              stored.run(), Path(out_dir))
        run, _identity = pipeline.retrieve(spec, loaded, cache_dir=cache, progress=progress)
    result = get_suite(loaded.card.suite).evaluate(loaded, run)
    return Evaluation(spec.name, loaded.name, loaded.dataset.split, loaded.card, result, run)
