"""SPLADE (paper 003, METHODS.md 4.1): sparse term weights from an MLM head.

Public kernels, tensors in and out, pinned by the spec's oracles S1-S3:

* :func:`splade_pool` ``(B, L, V) logits -> (B, V)`` weights
  ``w_j = max_i log(1 + relu(logit_ij))`` (or the sum) over the non-padding tokens; special
  tokens are kept, as naver/splade does.  The pooling itself lives in the engine's
  representation head (:mod:`harness.train.heads`), so training and evaluation share one
  implementation; this module re-exports it under the method's public name.
* :func:`flops_regularizer` ``sum_j (mean_i |w_ij|)^2`` and :func:`l1_regularizer`
  ``mean_i sum_j |w_ij|``.
* :func:`flops_lambda`: the quadratic warm-up of the regulariser weight in both released forms:
  ``"splade"`` (naver's ``RegWeightScheduler``: ``step()`` runs before each batch's loss, so the
  first batch already gets ``lam / T^2``; ``lam * (t / T)^2`` while ``t < T``, then ``lam``) and
  ``"hf"`` (naver's HF trainer: ``min(lam, lam * (t / (T + 1))^2)``, which never quite reaches
  ``lam`` at ``t = T``).  ``step`` counts scheduler calls from 1.
"""
from __future__ import annotations

import torch

from harness.errors import ConfigError
from harness.train.heads import AGGREGATIONS
from harness.train.heads import splade_pool as _head_pool

SCHEDULES = ("splade", "hf")


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor, agg: str = "max") -> torch.Tensor:
    """``(B, L, V)`` vocabulary logits and ``(B, L)`` mask -> ``(B, V)`` SPLADE weights (``agg``: max or sum)."""
    if logits.ndim != 3 or attention_mask.shape != logits.shape[:2]:
        raise ConfigError(f"splade_pool: logits must be (B, L, V) and the mask (B, L); got "
                          f"{tuple(logits.shape)} and {tuple(attention_mask.shape)}")
    return _head_pool(logits, attention_mask, agg)


def _check_weights(weights: torch.Tensor, name: str) -> None:
    if weights.ndim != 2 or weights.shape[0] == 0:
        raise ConfigError(f"{name}: weights must be a non-empty (N, V) matrix, got shape {tuple(weights.shape)}")


def flops_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """FLOPS: ``sum_j (mean_i |w_ij|)^2`` over a batch of ``(N, V)`` weights (a 0-d tensor)."""
    _check_weights(weights, "flops_regularizer")
    return weights.abs().mean(dim=0).pow(2).sum()


def l1_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """L1: ``mean_i sum_j |w_ij|`` over a batch of ``(N, V)`` weights (a 0-d tensor)."""
    _check_weights(weights, "l1_regularizer")
    return weights.abs().sum(dim=1).mean()


def flops_lambda(step: int, lam: float, warmup_steps: int, schedule: str = "splade") -> float:
    """The regulariser weight at scheduler call ``step`` (counted from 1) under ``schedule``."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown FLOPS warm-up schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ConfigError(f"flops_lambda: step counts scheduler calls from 1, got {step!r}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ConfigError(f"flops_lambda: warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    if lam < 0:
        raise ConfigError(f"flops_lambda: lambda must be >= 0, got {lam!r}")
    if warmup_steps == 0:
        return float(lam)
    if schedule == "splade":
        return float(lam) * (step / warmup_steps) ** 2 if step < warmup_steps else float(lam)
    return min(float(lam), float(lam) * (step / (warmup_steps + 1)) ** 2)


__all__ = ["AGGREGATIONS", "SCHEDULES", "splade_pool", "flops_regularizer", "l1_regularizer", "flops_lambda"]
