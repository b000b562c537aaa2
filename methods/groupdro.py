"""GroupDRO on query clusters (COCO-DR appendix F, METHODS.md 2.3).

Public kernels: :func:`sagawa_step` (oracle G1) and :func:`greedy_cvar_weights` (oracle G2),
defined in :mod:`methods.dro_kernels`.
"""
from __future__ import annotations

from methods.dro_kernels import greedy_cvar_weights, greedy_ema_update, greedy_robust_loss, sagawa_step

__all__ = ["greedy_cvar_weights", "greedy_ema_update", "greedy_robust_loss", "sagawa_step"]
