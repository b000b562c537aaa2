"""Retrieval harness: train, ablate and statistically compare text retrievers.

The engine (this package) knows nothing about any particular method; methods live
in ``methods/``, benchmark and ablation suites in ``suites/``, tables and plots in
``reports/``.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.api import Evaluation

__version__ = "0.1.0"


def evaluate(model_or_encoder: Any, dataset_dir: str | Path, **options: Any) -> Evaluation:
    """Evaluate a model name, a harness Encoder or any object with ``encode(texts)`` on a dataset folder, as
    ``harness eval`` does; see :func:`harness.api.evaluate` for the options and :class:`harness.api.Evaluation`
    for what it returns.  (Imported on first call, so ``import harness`` stays light.)"""
    from harness.api import evaluate as _evaluate

    return _evaluate(model_or_encoder, dataset_dir, **options)
