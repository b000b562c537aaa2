"""The encoder interface every model family implements (dense HF models, BM25 has its own path)."""
from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np


class Encoder(abc.ABC):
    """Turns query and document texts into vectors compared by ``similarity``.

    ``identity()`` returns a JSON-able dict describing everything that determines
    the vectors (model fingerprint, pooling, normalisation, prompts, max lengths,
    dtype).  It keys the embedding cache and is recorded in result manifests.
    """

    kind: str = "dense"        # "dense" or "sparse"
    similarity: str = "cos"    # "cos" (vectors L2-normalised, scored by inner product) or "dot"

    @abc.abstractmethod
    def identity(self) -> dict[str, Any]:
        ...

    @abc.abstractmethod
    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,
                       progress: bool = True) -> np.ndarray:
        """Return float32 array (n, dim)."""

    @abc.abstractmethod
    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,
                    progress: bool = True) -> np.ndarray:
        """Return float32 array (n, dim)."""
