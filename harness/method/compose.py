"""Composable losses: a reweighting method wraps the per-sample loss of another registered method.

A *base* is any registered method that defines a per-sample loss (``losses``) and whatever reading
that loss needs (its representation head, its batches, its encoder, its step state): InfoNCE
(``uniform``), SPLADE's ranking loss + FLOPS (``splade``), a loss-only method of your own.  A
*reweighting* method decides how those per-sample losses become the training loss: tDRO's transferred
dataset weights, GroupDRO's and iDRO's cluster weights (and their ERM baseline), the language-topic weights of
``mined``, PEG's progressive query weights w_q (its a_n scaling lives inside InfoNCE and is refused around a
base other than ``uniform``).  A method that accepts the option ``base``
(its ``Options`` inherit :class:`harness.recipe.BaseLossOptions`) wraps any base, so "GroupDRO around SPLADE",
"tDRO around the debiased loss" or "PEG's weights around the debiased loss" is a suite-file line, not a subclass::

    - id: debiased-groupdro
      method: groupdro
      options: {base: debiased, base_options: {tau_plus: 0.1}}
    - id: debiased-peg
      method: peg
      options: {base: debiased, scale_negatives: false}

What comes from where (like sentence-transformers' ``SpladeLoss(model, loss=...)`` wrapping):

* from the **base**: ``representation_head``, ``make_batch``, ``losses`` (per-sample values and group
  ids), ``configure``/``on_step_end``/``scalars``/``export`` and its checkpointed state, the encoder;
  the base reads its own options (``base_options``) through the context;
* from the **wrapper**: stages, ``prepare``, dataset weights, episodes, ``observe``, ``reduce``,
  weight optimizers, its own state and exports; ``regroup`` may replace the base's group ids (the
  DRO methods group by query cluster) and a wrapper's own ``make_batch`` (ANCE negatives) is used
  only when the base keeps the default batches.

Stage 1 of tDRO measures with InfoNCE as the paper does; ``base`` applies to the run it is set on.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError
from harness.train.outdir import RUN_FILE

if TYPE_CHECKING:
    import torch

    from harness.encoders.base import Encoder
    from harness.method import Method
    from harness.train.batching import Batch
    from harness.train.context import EncodedBatch, TrainContext
    from harness.train.result import Checkpoint
    from harness.train.spec import TrainSpec


def base_of(options: Mapping[str, Any]) -> str | None:
    """The base method named in (resolved or raw) method options, or None."""
    base = options.get("base")
    return str(base) if base else None


class OptionsView:
    """The training context as the base method sees it: everything of ``ctx`` but its own ``options``."""

    def __init__(self, ctx: TrainContext, options: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "options", dict(options))

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_ctx"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_ctx"), name, value)


class Composed:
    """``wrapper`` reweighting the per-sample losses of ``base`` (see the module docstring): what the
    trainer runs when a spec's method options name a ``base``."""

    def __init__(self, wrapper: Method, base: Method, base_options: Mapping[str, Any]) -> None:
        if wrapper.overrides("make_batch") and base.overrides("make_batch"):
            raise ConfigError(f"method {wrapper.name!r} builds its own batches and so does its base "
                              f"{base.name!r}: they cannot be combined")
        self.wrapper, self.base = wrapper, base
        self.base_options = base.resolve_options(dict(base_options))
        self.name = wrapper.name
        self.revision = wrapper.revision
        self.cells_root = wrapper.cells_root

    # ---------------------------------------------------------------- the wrapper's
    def __getattr__(self, name: str) -> Any:
        # resolve_options, stages, prepare, dataset_weights, episodes, observe, reduce, on_weight_step ...
        return getattr(self.wrapper, name)

    def validate(self, spec: TrainSpec) -> None:
        self.base.validate(self._base_spec(spec))
        self.wrapper.validate(spec)

    # ---------------------------------------------------------------- the base's
    def _base_spec(self, spec: TrainSpec) -> TrainSpec:
        """``spec`` as the base reads it: its own options in ``method_options``."""
        return dataclasses.replace(spec, method_options=copy.deepcopy(self.base_options))

    def representation_head(self, spec: TrainSpec) -> Any:
        return self.base.representation_head(self._base_spec(spec))

    def sequence_length_factor(self, spec: TrainSpec) -> float:
        return self.base.sequence_length_factor(self._base_spec(spec))

    def configure(self, ctx: TrainContext) -> None:
        self.base.configure(OptionsView(ctx, self.base_options))     # type: ignore[arg-type]
        self.wrapper.configure(ctx)

    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> Batch:
        owner = self.wrapper if self.wrapper.overrides("make_batch") else self.base
        view = ctx if owner is self.wrapper else OptionsView(ctx, self.base_options)
        return owner.make_batch(examples, view, micro_index)      # type: ignore[arg-type]

    def losses(self, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        losses, groups = self.base.losses(encoded, OptionsView(ctx, self.base_options))   # type: ignore[arg-type]
        return losses, self.wrapper.regroup(losses, groups, ctx)

    def on_step_end(self, ctx: TrainContext) -> None:
        self.base.on_step_end(OptionsView(ctx, self.base_options))   # type: ignore[arg-type]
        self.wrapper.on_step_end(ctx)

    def scalars(self) -> dict[str, float]:
        return {**self.base.scalars(), **self.wrapper.scalars()}

    def state_dict(self) -> dict[str, Any]:
        return {"wrapper": self.wrapper.state_dict(), "base": self.base.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"wrapper", "base"}:
            raise ConfigError(f"method {self.name!r} around {self.base.name!r}: the checkpoint holds "
                              f"{sorted(state)}, not a composed method's state")
        self.wrapper.load_state_dict(state["wrapper"])
        self.base.load_state_dict(state["base"])

    def export(self, ctx: TrainContext, directory: Path) -> None:
        self.base.export(OptionsView(ctx, self.base_options), directory)     # type: ignore[arg-type]
        self.wrapper.export(ctx, directory)

    def encoder(self, ckpt: Checkpoint, **kwargs: Any) -> Encoder:
        return self.base.encoder(ckpt, **kwargs)


def compose(method: Method, options: Mapping[str, Any]) -> Method | Composed:
    """``method`` as the trainer runs it under ``options``: wrapped around its ``base`` when one is named."""
    base = base_of(options)
    if base is None:
        return method
    if base == method.name:
        raise ConfigError(f"method {method.name!r}: base {base!r} is the method itself")
    base_method = method.named(base)
    if base_of(base_method.resolve_options(dict(options.get("base_options") or {}))):
        raise ConfigError(f"method {method.name!r}: base {base!r} wraps a base of its own; wrap one level at a time")
    return Composed(method, base_method, options.get("base_options") or {})


def run_options(ckpt: Checkpoint) -> dict[str, Any]:
    """The method options a finished run was trained with (its ``run.json``)."""
    import json

    path = Path(ckpt.workdir) / RUN_FILE
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8")).get("spec", {}).get("method_options") or {})


__all__ = ["Composed", "OptionsView", "base_of", "compose", "run_options"]
