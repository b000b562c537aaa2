"""Learning-rate schedules: linear warmup, then cosine or linear decay to a floor, or constant.

``lr_factor(step)`` is the multiplier of the peak rate for optimizer step ``step``
(0-based): ``step / warmup`` during warmup (so the first update uses 0, as in
``transformers``' schedules), then cosine from 1 down to ``min_ratio``
(``min + (1 - min) * (1 + cos(pi * progress)) / 2``), or linear from 1 to ``min_ratio``.
The tDRO recipe decays to 0.1 of the peak with a cosine.
"""
from __future__ import annotations

import math

import torch


def lr_factor(step: int, total: int, warmup: int, kind: str = "cosine", min_ratio: float = 0.0) -> float:
    if warmup > 0 and step < warmup:
        return step / warmup
    if kind == "constant":
        return 1.0
    decay_steps = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    if kind == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "linear":
        return 1.0 - (1.0 - min_ratio) * progress
    raise ValueError(f"unknown schedule {kind!r}")


def make_scheduler(optimizer: torch.optim.Optimizer, total: int, warmup: int, kind: str,
                   min_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` (its state dict is just the step count) following :func:`lr_factor`."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total, warmup, kind, min_ratio))
