"""Encoding tokenized views in chunks, with the RNG state of each chunk recorded.

Shared by the training step (:mod:`harness.train.step`), frozen-model forwards
(:mod:`harness.train.context`) and episodes (:mod:`harness.train.episodes`); it sits
below all of them so none imports another.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.train.model import model_features

Features = dict[str, torch.Tensor]


@dataclass
class RandState:
    """CPU (and current CUDA device) RNG state, to replay dropout exactly."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None
    device: torch.device

    @classmethod
    def capture(cls, device: torch.device) -> RandState:
        cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        return cls(torch.get_rng_state(), cuda, device)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


def split_features(features: Features, chunk_size: int | None) -> list[Features]:
    """``features`` cut into consecutive row chunks of ``chunk_size`` (one chunk when None or 0)."""
    n = next(iter(features.values())).shape[0]
    size = n if not chunk_size else chunk_size
    return [{k: v[i:i + size] for k, v in features.items()} for i in range(0, n, size)]


def to_device(features: Features, device: torch.device) -> Features:
    """The model inputs of ``features`` (tokenizer extras such as offsets dropped) on ``device``."""
    return {k: v.to(device) for k, v in model_features(features).items()}


def encode_chunks(model: torch.nn.Module, features: Features, chunk_size: int | None,
                  device: torch.device, *, grad: bool, autocast: Callable[[], Any] | None = None
                  ) -> tuple[torch.Tensor, list[RandState]]:
    """Representations of all rows, encoded ``chunk_size`` rows at a time; returns the RNG state before each chunk."""
    embs, states = [], []
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        for chunk in split_features(features, chunk_size):
            states.append(RandState.capture(device))
            with (autocast() if autocast else contextlib.nullcontext()):
                embs.append(model(**to_device(chunk, device)))
    return torch.cat(embs, dim=0), states
