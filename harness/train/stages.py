"""Stages as data: what a method declares it needs before its own run (its ``stages``), and what it gets back.

:class:`Stage`
    a training run of a registered method under its own :class:`~harness.train.spec.TrainSpec`
    (tDRO's reference model and its stage-1 proxy, a COCO pretraining run); ``starts_from=True``
    makes the method's own run start from that stage's trained weights (the "+COCO" rows).
:class:`DataStage`
    work on the training data that is not a training run (the mined negatives of paper 004): the
    owner method says *what* it computes (``Method.build_stage``); the engine says when and where.
:class:`StageResult`, :class:`Prepared`
    a finished stage, and what ``Method.prepare`` turns the finished stages into for the trainer.

The engine that schedules them is :mod:`harness.method.stages`.  Torch-free.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.train.result import Checkpoint

if TYPE_CHECKING:
    import numpy as np

    from harness.data.collections import TrainingData
    from harness.train.spec import TrainSpec


@dataclass(frozen=True)
class Stage:
    """A training run another method needs first (trained by the engine as its own cell).

    ``name``: how the owner reads it (``ctx.stages[name]``, :meth:`Method.prepare`); ``label``: how
    dry runs and unit graphs show it; ``frozen_forwards``: no-grad forwards per step of a same-size
    frozen model in the stage's own run (compute estimates); ``starts_from``: the owner's run starts
    from this stage's trained model; ``sources``: why the owner set each changed setting of ``spec``."""

    name: str
    label: str
    method: str
    spec: TrainSpec
    frozen_forwards: int = 0
    starts_from: bool = False
    # Where each setting of ``spec`` that the owner changed comes from (field -> "paper 000 §4.1",
    # "code <repo>:<path>", ...): dry runs and ``--strict-provenance`` read it.
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "train"


@dataclass(frozen=True)
class DataStage:
    """Work on the training data before the owner's run (built by ``owner.build_stage``).

    ``config`` is everything that determines the result: with the data's fingerprint and the owner's
    name and revision it keys the stage (``<root>/<name>/<key>.stage.json`` records it as built)."""

    name: str
    label: str
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "data"


@dataclass(frozen=True)
class StageResult:
    """A finished stage: the trained run (``checkpoint``) or the folder a data stage built into."""

    stage: Stage | DataStage
    path: Path
    checkpoint: Checkpoint | None = None

    @property
    def model(self) -> Path:
        """The trained model folder of a training stage."""
        if self.checkpoint is None:
            raise TypeError(f"stage {self.stage.name!r} is a data stage and has no model")
        return self.checkpoint.path


@dataclass
class Prepared:
    """What :meth:`Method.prepare` hands to the trainer: the data to train on, the initial dataset
    weights (None: ``Method.dataset_weights``) and values ``configure`` reads as ``ctx.prepared``."""

    data: TrainingData
    dataset_weights: np.ndarray | None = None
    values: dict[str, Any] = field(default_factory=dict)


__all__ = ["DataStage", "Prepared", "Stage", "StageResult"]
