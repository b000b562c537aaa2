"""Pooling token states into one vector per text: ``cls``, ``mean`` and ``last``.

``last`` takes the last non-padding token and is correct for both padding sides:
with left padding every sequence ends at position -1; with right padding the last
real token of row i sits at ``sum(mask_i) - 1``.  It is used by decoder backbones
whose tokenizers must append an EOS token (see :func:`harness.encoders.backbone.tokenize`).
"""
from __future__ import annotations

import torch

POOLING_MODES = ("cls", "mean", "last")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Pool ``hidden`` of shape (B, L, H) with ``attention_mask`` (B, L) into (B, H)."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return summed / counts
    if mode == "last":
        left_padded = bool((attention_mask[:, -1] == 1).all())
        if left_padded:
            return hidden[:, -1]
        lengths = attention_mask.sum(dim=1).long() - 1
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, lengths.clamp(min=0)]
    raise ValueError(f"unknown pooling {mode!r}; choose one of {POOLING_MODES}")
