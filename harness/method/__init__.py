"""The method interface: one ``train``/``encoder`` pair for every training method.

A method is a small class registered by name::

    @register_method("uniform")
    class Uniform(Method):
        presets = {"tiny": {...}, "small": {...}, "paper": {...}}   # TrainSpec overrides per scale

and holds only what is unique to it.  Before its run, the engine
(:func:`harness.method.stages.train_run`) calls:

``validate(spec)``
    refuse a configuration before anything is loaded or written.
``stages(spec)``
    the runs and data work needed first, as data (:class:`~harness.train.stages.Stage`: a
    reference model, a stage-1 proxy, COCO pretraining; :class:`~harness.train.stages.DataStage`:
    mined negatives, built by ``build_stage``); the engine trains or builds each as its own cell.
``prepare(spec, data, stages)``
    the finished stages turned into what the trainer needs (a
    :class:`~harness.train.stages.Prepared`: the data to train on, initial dataset weights, values
    the hooks read as ``ctx.prepared``).

Then the shared trainer (:class:`harness.train.trainer.Trainer`) runs the loop and calls these
hooks, in this order, with a :class:`harness.train.context.TrainContext` ``ctx`` (``ctx.stages``:
the finished stages by name):

``representation_head(spec)``
    before the model is built: the head that turns backbone outputs into
    representations (None: dense pooling as the spec says; e.g. a
    :class:`~harness.encoders.heads.SparseHead` for SPLADE term weights).
``configure(ctx)``
    once, before training or resuming: read ``ctx.options``, register weight-vector
    optimizers (``ctx.add_weight_optimizer``), load a frozen model
    (``ctx.load_frozen_model``), set sampler weights (``ctx.set_sampler_weights``).
``run_episode(ctx, directory)``
    before the training steps listed by ``episode_steps(spec)`` (default: every
    ``episode_every`` steps): work between training stretches (re-encode the corpus,
    re-mine negatives, re-cluster queries) with the current model; files go into
    ``directory``.  A checkpoint is written just before each episode and the episode's
    results belong in ``state_dict``, so a run killed during an episode redoes it.
``make_batch(examples, ctx, micro_index)``
    every micro-batch: the tokenized batch from the sampler's global draw (default:
    query/positive/negatives rows); a method may build its own views (span pairs,
    triplets) as a :class:`~harness.train.batching.ViewBatch`.
``losses(encoded, ctx) -> (per_sample, group_ids)``
    every micro-batch, from the representations of each view: the per-sample loss
    vector and a group id per sample (default: InfoNCE with HN/IBN/CBN,
    ``ctx.info_nce_losses``).  It must depend on the encoded views only (the gradient
    cache differentiates it w.r.t. them).
``observe(out, ctx)``
    every micro-batch, after the per-sample losses ``out.losses`` (with
    ``out.group_ids``) exist, before the loss is formed: gather statistics
    (``ctx.all_gather``), frozen-model losses (``ctx.frozen_losses``), put
    gradients on weight vectors.
(trainer) on the last micro-batch of an optimizer step, the registered weight
    optimizers step (gradient averaged over the micro-batches, optional clipping),
    then ``on_weight_step(name, ctx)`` (e.g. renormalise with softmax).
``reduce(out, ctx) -> scalar``
    the training loss from the per-sample vector (default: the mean); per-group
    gradients on a parameter subset are available here (``ctx.group_gradients``).
``on_step_end(ctx)``
    after each optimizer step of the model (update schedules, sampler weights).
``state_dict()`` / ``load_state_dict(state)``
    everything stateful (scalars, EMAs, weight vectors): saved in checkpoints,
    restored on resume, so a resumed run continues step for step.
``scalars()``
    numbers to log each step; ``export(ctx, directory)``: files written at the end.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from harness.errors import ConfigError
from harness.keys import content_key
from harness.method.portable import portable_paths
from harness.recipe import NoOptions, Preset, declaration_from_defaults, validate_options
from harness.recipe import defaults as recipe_defaults
from harness.registry import Registry
from harness.train.result import Checkpoint
from harness.train.spec import TrainSpec
from harness.train.stages import Prepared

if TYPE_CHECKING:  # imported lazily: listing methods must not import torch
    import torch

    from harness.data.collections import TrainingData
    from harness.encoders.base import Encoder
    from harness.encoders.heads import Head
    from harness.train.batching import Batch
    from harness.train.context import EncodedBatch, LossOutput, TrainContext
    from harness.train.stages import DataStage, Stage, StageResult

# The keys of an option that describes a stage run (Method.stage_option): its method preset, TrainSpec
# overrides and the stage method's options.
STAGE_OPTION_KEYS = ("preset", "train", "options")


def check_choice(owner: str, option: str, value: Any, choices: Sequence[str]) -> None:
    """Refuse a method option outside ``choices``, naming the method, the option and the choices."""
    if value not in choices:
        raise ConfigError(f"{owner}: unknown {option} {value!r}: {option} must be one of {', '.join(choices)}")


def _preset_of(cls: type, value: Mapping[str, Any]) -> Preset:
    """A class's own copy of a preset (no two classes share one); plain dicts (older plug-ins) become
    presets whose values have no declared source."""
    if isinstance(value, Preset):
        return Preset(value, value.sources, value.default_source)
    return Preset(value, default_source=f"undeclared: {cls.__qualname__}.presets")


def _frozen(value: Any) -> Any:
    """A read-only deep view of plain configuration data (mappings become ``MappingProxyType``, lists
    tuples), copied so that no two classes share a mutable object."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A plain, mutable deep copy (dicts and lists) of configuration data, frozen or not."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thawed(v) for v in value]
    return value


class Method:
    """Base class: the uniform-loss behaviour; subclasses override the hooks they need."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # Read-only once the class exists (``__init_subclass__``): a preset shared by two methods (tDRO
    # reuses the uniform recipe) must not be changed through one of them.
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}     # scale -> TrainSpec overrides (recipe.Preset)
    # The typed declaration of ``spec.method_options`` (a frozen dataclass of ``harness.recipe.option``
    # fields: type, doc, choices, unit, range and the source of each default).  ``resolve_options``
    # validates against it; ``default_options`` is derived from it (read-only).  A subclass that gives only
    # a ``default_options`` dict (an older plug-in) gets an untyped declaration made from the dict.
    Options: ClassVar[type] = NoOptions
    default_options: ClassVar[Mapping[str, Any]] = {}           # method_options and their defaults
    # Raised when a fix changes what the method trains from the same configuration: part of the run
    # keys from 2 on, so runs cached before the fix are not reused (train_run_config).
    revision: ClassVar[int] = 1
    # Where training runs are cached by content key.  The suite runner points it at its
    # ``cells/train`` folder, so a stage a method declares (e.g. tDRO's reference model)
    # that is also a suite cell (the uniform baseline) is trained once and shared.
    cells_root: Path | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "train" in cls.__dict__:
            # Stages are declared (``stages``), prepared (``prepare``) and scheduled by the engine
            # (harness.train.stages): a method that trained them itself would hide them from dry runs,
            # executors and ``harness train``.
            raise TypeError(f"{cls.__name__} overrides Method.train; declare stages() and prepare() instead")
        cls.presets = MappingProxyType({scale: _preset_of(cls, p) for scale, p in cls.presets.items()})
        if "default_options" in cls.__dict__ and "Options" not in cls.__dict__:
            cls.Options = declaration_from_defaults(cls.__name__, cls.default_options,
                                                    f"undeclared: {cls.__qualname__}.default_options")
        cls.default_options = _frozen(recipe_defaults(cls.Options))

    # ------------------------------------------------------------------ configuration
    @classmethod
    def spec(cls, scale: str = "tiny", **overrides: Any) -> TrainSpec:
        """The method's recipe at ``scale`` with ``overrides`` applied (``steps`` alone rescales the warmup)."""
        if scale not in cls.presets:
            known = ", ".join(cls.presets) or "(none)"
            raise ConfigError(f"method {cls.name!r} has no {scale!r} preset; scales: {known}")
        base = TrainSpec.from_dict(thawed(cls.presets[scale]))
        if "steps" in overrides and "warmup_steps" not in overrides:
            # Keep the preset's warmup fraction when only the length of the run changes.
            overrides = {**overrides, "warmup_steps": round(base.warmup_steps * overrides["steps"] / base.steps)}
        return base.replace(**overrides) if overrides else base

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The declared defaults merged with ``options``, checked against ``Options`` (unknown names with a
        did-you-mean, types, choices, ranges).  Subclasses add only cross-field checks."""
        return validate_options(type(self).Options, options, owner=f"method {self.name!r}")

    def stage_option(self, spec: TrainSpec, name: str) -> Mapping[str, Any] | None:
        """The option ``name`` that describes a stage run (``{preset, train, options}``: COCO pretraining, a
        warm-up, RetroMAE), checked for that shape; None when unset."""
        value = self.resolve_options(dict(spec.method_options))[name]
        if not value:
            return None
        if not isinstance(value, Mapping) or set(value) - set(STAGE_OPTION_KEYS):
            given = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise ConfigError(f"method {self.name!r}: option {name} must be a mapping with keys "
                              f"{', '.join(STAGE_OPTION_KEYS)}; got {given}")
        return value

    def dataset_weights(self, spec: TrainSpec, data: TrainingData) -> np.ndarray:
        """Initial sampling weights: ``spec.dataset_weights`` (by source name), else uniform."""
        if spec.dataset_weights is None:
            return np.full(len(data), 1.0 / len(data))
        unknown = sorted(set(spec.dataset_weights) - set(data.names))
        if unknown:
            raise ConfigError(f"dataset_weights names unknown source(s) {', '.join(unknown)}; "
                              f"sources: {', '.join(data.names)}")
        return np.array([float(spec.dataset_weights.get(n, 0.0)) for n in data.names])

    # ------------------------------------------------------------------ hooks
    # Run ``run_episode`` before every ``episode_every``-th step (0: never); see ``episode_steps``.
    episode_every: ClassVar[int] = 0

    def representation_head(self, spec: TrainSpec) -> Head | None:
        """The model's representation head (None: the spec's dense pooling)."""
        return None

    def make_optimizer(self, spec: TrainSpec, groups: list[dict[str, Any]]) -> torch.optim.Optimizer | None:
        """The model's optimizer over the trainer's parameter ``groups`` (with and without weight decay);
        None (the default): AdamW with the spec's ``lr``, ``adam_betas`` and ``adam_eps``."""
        return None

    def lr_factor(self, spec: TrainSpec) -> Callable[[int], float] | None:
        """The multiplier of ``spec.lr`` at each optimizer step (0-based); None (the default): the spec's
        ``schedule`` (:func:`harness.train.schedule.lr_factor`)."""
        return None

    def optimizer_restarts(self, spec: TrainSpec) -> list[int]:
        """Steps before which the optimizer's state (moments, step counts) is cleared, as if training
        started afresh from the current weights there; each must be an episode step (the trainer's
        checkpoint before the episode makes a resumed run redo the reset).  Default: none."""
        return []

    def configure(self, ctx: TrainContext) -> None:
        """Called once before training/resuming."""

    def sequence_length_factor(self, spec: TrainSpec) -> float:
        """How many times each text's tokens the model reads (compute estimates): 1, or 2 for a method
        that repeats the text in its input (echo embeddings)."""
        return 1.0

    def episode_steps(self, spec: TrainSpec) -> list[int]:
        """Steps before which an episode runs (0 means before any training)."""
        every = self.episode_every
        return list(range(every, spec.steps, every)) if every > 0 else []

    def run_episode(self, ctx: TrainContext, directory: Path) -> None:
        """Between-stretch work with the current model (``ctx.model``); deterministic given the
        model and ``state_dict``, since a killed episode is redone from the checkpoint before it."""
        raise ConfigError(f"method {self.name!r} schedules episodes but defines no run_episode")

    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> Batch:
        """This rank's tokenized micro-batch from the global draw ``examples`` ((source, row) pairs)."""
        from harness.train.batching import default_batch  # lazy (start-up speed): imports torch

        return default_batch(examples, ctx, micro_index)

    def losses(self, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample losses (with graph) and group ids of this micro-batch (default: InfoNCE, HN/IBN/CBN)."""
        return ctx.info_nce_losses(encoded)

    def regroup(self, losses: torch.Tensor, group_ids: torch.Tensor, ctx: TrainContext) -> torch.Tensor:
        """The group ids this method reweights by, given a base method's per-sample ``losses`` and group ids
        (:mod:`harness.method.compose`; default: the base's, i.e. the training sources)."""
        return group_ids

    def observe(self, out: LossOutput, ctx: TrainContext) -> None:
        """Called per micro-batch before the loss is formed."""

    def reduce(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        """The scalar training loss of this micro-batch (default: mean of the per-sample losses)."""
        return out.losses.mean()

    def on_weight_step(self, name: str, ctx: TrainContext) -> None:
        """Called after the weight optimizer ``name`` stepped."""

    def on_step_end(self, ctx: TrainContext) -> None:
        """Called after each optimizer step of the model."""

    def scalars(self) -> dict[str, float]:
        """Numbers to log with each step."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ConfigError(f"method {self.name!r} has no state but the checkpoint holds {sorted(state)}")

    def export(self, ctx: TrainContext, directory: Path) -> None:
        """Write method outputs (e.g. learned weights) into ``directory`` at the end of training."""

    # ------------------------------------------------------------------ stages
    def stages(self, spec: TrainSpec) -> list[Stage | DataStage]:
        """The runs and data work this method needs before its own run under ``spec``, as data, in order
        (none by default).  The engine trains or builds each as its own content-keyed cell
        (:mod:`harness.method.stages`); dry runs list them and count their compute once per distinct run."""
        return []

    def validate(self, spec: TrainSpec) -> None:
        """Refuse a configuration this method cannot train, before anything is loaded or written."""

    def build_stage(self, stage: DataStage, spec: TrainSpec, data: TrainingData, root: Path) -> None:
        """Build the data stage ``stage`` into ``root`` (only methods that declare data stages)."""
        raise ConfigError(f"method {self.name!r} declares data stage {stage.name!r} but defines no build_stage")

    def prepare(self, spec: TrainSpec, data: TrainingData, stages: Mapping[str, StageResult]) -> Prepared:
        """What the trainer gets from the finished ``stages``: the data to train on, the initial dataset
        weights and values the hooks read as ``ctx.prepared`` (default: the data as given)."""
        return Prepared(data)

    def plan_notes(self, spec: TrainSpec) -> list[str]:
        """Lines a dry run prints under the run: work besides training and its estimated cost (none by default)."""
        return []

    def frozen_forwards(self, spec: TrainSpec) -> int:
        """Extra no-grad forwards of a same-size frozen model per step of this method's own run."""
        return 0

    @staticmethod
    def run_key(method: str, spec: TrainSpec, data: TrainingData | str | None) -> str:
        """The content key of a training run on ``data`` (or on data of this fingerprint); the suite runner
        keys its cells the same way."""
        fingerprint = data if data is None or isinstance(data, str) else data.fingerprint()
        return content_key(train_run_config(method, spec, fingerprint))

    @staticmethod
    def named(name: str) -> Method:
        """A fresh instance of the registered method ``name`` (how stages and compositions resolve names,
        so the engine code that runs them needs no import of this module)."""
        return get_method(name)

    @classmethod
    def overrides(cls, hook: str) -> bool:
        """Whether this method replaces the base class's ``hook``."""
        return getattr(cls, hook) is not getattr(Method, hook)

    # ------------------------------------------------------------------ train / encode
    def train(self, spec: TrainSpec, data: TrainingData, workdir: str | Path) -> Checkpoint:
        """Train (or resume, or return the finished run) in ``workdir``, after the declared stages
        (:func:`harness.method.stages.train_run`; subclasses do not override this)."""
        # lazy: harness.method.stages is a submodule of this package (import cycle)
        from harness.method.stages import train_run

        return train_run(self, spec, data, workdir, cells_root=self.cells_root)

    def encoder(self, ckpt: Checkpoint, **kwargs: Any) -> Encoder:
        """The trained model as an :class:`~harness.encoders.base.Encoder` (``kwargs`` go to HFEncoder); a run
        that wrapped another method's loss (option ``base``) is read by that method's encoder."""
        # lazy: harness.method.compose is a submodule of this package (import cycle)
        from harness.method.compose import base_of, run_options

        base = base_of(run_options(ckpt))
        if base is not None and base != self.name:
            return get_method(base).encoder(ckpt, **kwargs)
        from harness.encoders.hf import HFEncoder  # lazy (start-up speed): imports torch

        return HFEncoder(str(ckpt.path), **kwargs)


# ---------------------------------------------------------------------- registry
def _set_name(name: str, cls: type[Method]) -> None:
    cls.name = name


# Built-ins by module name (a string, not an import: the engine does not depend on its plug-ins);
# other packages add methods through the ``retrieval_harness.methods`` entry point group.
METHODS: Registry[type[Method]] = Registry(
    "method", builtins=("methods",),
    check=lambda obj: isinstance(obj, type) and issubclass(obj, Method), on_register=_set_name)


def register_method(name: str) -> Callable[[type[Method]], type[Method]]:
    """Class decorator: ``@register_method("uniform")``."""
    return METHODS.decorator(name)


def train_run_config(method: str, spec: TrainSpec, data_fingerprint: str | None) -> dict[str, Any]:
    """What identifies a training run: its content key is ``content_key`` of this.  Suite cells and
    method dependencies (``Method.run_key``) use the same config, so they share runs.  Paths under a data
    root stand as ``{shared}/...``, ``{cache}/...`` (:func:`harness.method.portable.portable_paths`): the
    same run elsewhere (another machine, clone or cache folder) has the same key."""
    config: dict[str, Any] = {"method": method, "spec": portable_paths(spec.result_dict()), "data": data_fingerprint}
    revision = _method_revision(method)
    if revision > 1:            # only revised methods carry it, so every other key stays as it was
        config["revision"] = revision
    stage_revisions = _stage_revisions(method, spec)
    if stage_revisions:         # a revised stage method changes what this run starts from (same rule)
        config["stage_revisions"] = stage_revisions
    return config


def _stage_revisions(method: str, spec: TrainSpec) -> dict[str, int]:
    """The revisions above 1 of the methods of every training stage the run needs, depth first.

    The spec already holds each stage's settings, but not the code revision of the stage's method: without
    this, a PEG run would reuse its stored fine-tuning after RetroMAE's pre-training was revised."""
    from harness.train.stages import Stage  # lazy, as the module's other uses of it (start-up speed)

    try:
        owner = METHODS.get(method)()
    except ConfigError:         # not a registered method (a name only tests use): no stages
        return {}
    out: dict[str, int] = {}
    for stage in owner.stages(spec):
        if isinstance(stage, Stage):
            revision = _method_revision(stage.method)
            if revision > 1:
                out[stage.method] = revision
            out.update(_stage_revisions(stage.method, stage.spec))
    return out


def _method_revision(method: str) -> int:
    """The registered method's ``revision`` (1 when the name is not a registered method)."""
    try:
        cls = METHODS.get(method)
    except ConfigError:
        return 1
    return int(getattr(cls, "revision", 1))


def get_method(name: str) -> Method:
    """A fresh instance of the method registered as ``name`` (or of a ``package.module:Class`` reference)."""
    method: Method = METHODS.create(name)
    return method


def list_methods() -> list[str]:
    return sorted(METHODS.names())
