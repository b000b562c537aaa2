"""iDRO: implicit DRO over query clusters (paper 001, METHODS.md 2.2).

Public kernel: :func:`idro_step` (oracles I1-I3), defined in :mod:`methods.dro_kernels`.
"""
from __future__ import annotations

from methods.dro_kernels import IDRO_MODES, idro_step

__all__ = ["IDRO_MODES", "idro_step"]
