"""What a training method may touch: the narrow API between ``methods/`` and the trainer.

A method (``harness.method.Method``) gets everything it needs through its hooks and this module; the
trainer's internals (the loop, checkpoints, the optimizer step, samplers, schedules, the gradient cache)
stay private to :mod:`harness.train`, so they can change without touching a method.  The import
contract in ``pyproject.toml`` holds ``methods`` to it.

What is here, by hook:

* recipes and runs: :class:`TrainSpec`, :class:`Checkpoint`, ``FINAL_DIR`` (the trained model folder of a
  run), the training log (``LOG_FILE``, :func:`read_log`), :func:`resolved_encoding` (pooling, normalisation
  and EOS of a spec's model);
* stages and composition: :class:`Stage`, :class:`DataStage`, :class:`StageResult`, :class:`Prepared`,
  (and ``harness.recipe.BaseLossOptions`` for a method that wraps a base);
* per-micro-batch hooks: :class:`TrainContext` (per-sample InfoNCE and its candidates, frozen models,
  per-group gradients, weight optimizers, sampler weights, collectives), :class:`EncodedBatch`,
  :class:`LossOutput`, the batch types and builders (:class:`Batch`, :class:`TrainBatch`, :class:`ViewBatch`,
  :func:`build_batch`, :func:`tokenize_batch`), :func:`reduce_losses`, :func:`encode_chunks`;
* collectives with and without gradient: :func:`all_gather_with_grad`, :func:`all_gather_nograd`,
  :func:`all_reduce_sum`, :func:`is_distributed`;
* episodes: :func:`encode_texts` (the current model over many texts), :class:`AnceNegatives` (negatives
  re-mined with the current model);
* compute estimates: :func:`estimate_parameters`, :func:`read_model_config`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Torch-free: imported with this module (a method's stages, spec and run records need no torch).
from harness.train.logs import LOG_FILE, read_log
from harness.train.plan import estimate_parameters, read_model_config
from harness.train.result import Checkpoint
from harness.train.spec import TrainSpec
from harness.train.stages import DataStage, Prepared, Stage, StageResult

if TYPE_CHECKING:
    from harness.train.batching import Batch, TrainBatch, ViewBatch, build_batch, tokenize_batch
    from harness.train.context import EncodedBatch, LossOutput, TrainContext
    from harness.train.distributed import all_gather_nograd, all_gather_with_grad, all_reduce_sum, is_distributed
    from harness.train.encoding import encode_chunks
    from harness.train.episodes import encode_texts
    from harness.train.losses import reduce_losses
    from harness.train.model import resolved_encoding
    from harness.train.negatives import AnceNegatives
    from harness.train.trainer import FINAL_DIR

# The rest imports torch: loaded on first use (PEP 562), so importing a method for `harness --help`,
# `harness list` or a dry run does not load torch.
_LAZY = {
    "Batch": "batching", "TrainBatch": "batching", "ViewBatch": "batching", "build_batch": "batching",
    "tokenize_batch": "batching", "EncodedBatch": "context", "LossOutput": "context", "TrainContext": "context",
    "all_gather_nograd": "distributed", "all_gather_with_grad": "distributed", "all_reduce_sum": "distributed",
    "is_distributed": "distributed", "encode_chunks": "encoding", "encode_texts": "episodes",
    "reduce_losses": "losses", "resolved_encoding": "model", "AnceNegatives": "negatives", "FINAL_DIR": "trainer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"harness.train.{module}"), name)
    globals()[name] = value          # later lookups skip this function
    return value


__all__ = ["FINAL_DIR", "LOG_FILE", "AnceNegatives", "Batch", "Checkpoint", "DataStage",
           "EncodedBatch", "LossOutput", "Prepared", "Stage", "StageResult", "TrainBatch", "TrainContext",
           "TrainSpec", "ViewBatch", "all_gather_nograd", "all_gather_with_grad", "all_reduce_sum", "build_batch",
           "encode_chunks", "encode_texts", "estimate_parameters", "is_distributed", "read_log", "read_model_config",
           "reduce_losses", "resolved_encoding", "tokenize_batch"]
