"""The shared trainer: specs, samplers, InfoNCE, gradient cache, checkpoints, method hooks.

Public entry points: :class:`~harness.train.spec.TrainSpec`,
:class:`~harness.train.trainer.Trainer` (used through ``harness.method.Method.train``),
:func:`~harness.train.losses.info_nce`, :class:`~harness.train.samplers.WeightedSampler`,
:class:`~harness.train.context.TrainContext` (what method hooks receive).
"""
from harness.train.spec import LoraSpec, TrainSpec, load_spec_file

__all__ = ["LoraSpec", "TrainSpec", "load_spec_file"]
