"""Expanding a suite at one scale into training cells and evaluation cells.

A training cell is one variant's training run; its key is a content hash of
everything that determines the trained weights (method, options, the resolved
TrainSpec, the training data's fingerprint).  The suite name is *not* part of the
key, so identical cells in different suites share one checkpoint.  An evaluation
cell is (training cell, benchmark); its key adds the benchmark's protocol card.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.ablation.axes import Replicate, apply_axes, keep_checkpoints, suite_replicates
from harness.ablation.resolve import require_resolved, resolve_data_entry, resolve_model, resolve_option_value
from harness.ablation.spec import NO_TRAINING, AblationSuite, BenchmarkRef, Variant
from harness.data.collections import load_training_data
from harness.errors import ConfigError
from harness.keys import content_key
from harness.method import get_method, train_run_config
from harness.train.spec import TrainSpec, closest, model_identity


@dataclass
class TrainCell:
    suite: str
    scale: str
    variant: Variant
    method: str
    model: str
    spec: TrainSpec | None           # None for method "none"
    data_entries: list[Any]
    data_fingerprint: str | None
    key: str
    config: dict[str, Any] = field(default_factory=dict)
    replicate: Replicate | None = None
    steps: list[int] = field(default_factory=list)   # intermediate checkpoints evaluated (the axis)
    # how it is evaluated: the variant's own evaluation settings (in its eval keys) over the scale's (in the card)
    evaluation: dict[str, Any] = field(default_factory=dict)
    variant_evaluation: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.variant.label

    @property
    def system(self) -> str:
        """The table row this run belongs to (the variant id, or ``<variant>@<param>=<value>``)."""
        return self.replicate.system.id if self.replicate is not None else self.variant.id

    @property
    def declared(self) -> str:
        """The id of the variant the suite file declares."""
        return self.replicate.system.variant.id if self.replicate is not None else self.variant.id

    @property
    def seed(self) -> int | None:
        return self.replicate.seed if self.replicate is not None else None

    @property
    def trains(self) -> bool:
        return self.method != NO_TRAINING

    @property
    def train_spec(self) -> TrainSpec:
        """The spec of a cell that trains (method "none" has none)."""
        if self.spec is None:
            raise ConfigError(f"cell {self.variant.id}: method {self.method!r} trains nothing")
        return self.spec


@dataclass
class EvalCell:
    train: TrainCell
    benchmark: BenchmarkRef
    key: str
    step: int | None = None          # an intermediate checkpoint; None: the finished run

    @property
    def id(self) -> str:
        """The name of the evaluated model: the training cell's id, ``@step=<n>`` for a checkpoint."""
        return self.train.variant.id if self.step is None else f"{self.train.variant.id}@step={self.step}"


def variant_train_overrides(suite: AblationSuite, variant: Variant, scale: str) -> dict[str, Any]:
    """TrainSpec overrides in precedence order: suite scale < variant < variant at this scale."""
    cfg = suite.scale(scale)
    overrides: dict[str, Any] = {}
    for layer in (cfg.train, variant.train, variant.scales.get(scale, {}).get("train", {})):
        overrides.update(layer)
    options = {**variant.options, **variant.scales.get(scale, {}).get("options", {})}
    # Paths in options ({shared}/..., synthetic:...) resolve like the suite's data and model.
    options = {k: resolve_option_value(v) for k, v in options.items()}
    if options:
        overrides["method_options"] = {**overrides.get("method_options", {}), **options}
    return overrides


def merge_evaluation(*layers: dict[str, Any]) -> dict[str, Any]:
    """Evaluation settings in precedence order (later wins; ``encoding`` options and ``prompts`` sides merged one
    by one)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            out[key] = {**out.get(key, {}), **value} if key in ("encoding", "prompts") else value
    return out


def variant_evaluation(suite: AblationSuite, variant: Variant, scale: str) -> dict[str, Any]:
    """The variant's own evaluation settings at ``scale`` (variant < variant at scale)."""
    return merge_evaluation(variant.evaluation, variant.scales.get(scale, {}).get("evaluation", {}))


def expand_train_cells(suite: AblationSuite, scale: str, load_data: bool = True) -> list[TrainCell]:
    """One training cell per variant (variants that share a key train once)."""
    cfg = suite.scale(scale)
    entries = [resolve_data_entry(e) for e in cfg.data]
    data_fp = None
    if load_data:
        require_resolved(entries, f"suite {suite.name!r} scale {scale!r}: training data")
        data_fp = load_training_data(entries).fingerprint()
    cells = []
    for replicate in suite_replicates(suite, scale):
        variant = replicate.variant()
        model = resolve_model(variant.model_at(scale) or cfg.model)
        own = variant_evaluation(suite, replicate.system.variant, scale)
        evaluation = merge_evaluation(cfg.evaluation, own)
        if variant.method == NO_TRAINING:
            # The model's content identity, not its path (a synthetic model lives in the cache directory).
            config = {"method": NO_TRAINING, "model": model_identity(model)}
            cells.append(TrainCell(suite.name, scale, variant, NO_TRAINING, model, None, [], None,
                                   content_key(config), config, replicate, evaluation=evaluation,
                                   variant_evaluation=own))
            continue
        spec = replicate_spec(suite, replicate, scale, model)
        config = train_run_config(variant.method, spec, data_fp)
        steps = replicate.checkpoints.at(spec.steps) if replicate.checkpoints else []
        cells.append(TrainCell(suite.name, scale, variant, variant.method, model, spec, entries, data_fp,
                               content_key(config), config, replicate, steps, evaluation, own))
    return cells


def replicate_spec(suite: AblationSuite, replicate: Replicate, scale: str, model: str) -> TrainSpec:
    """The TrainSpec of one replicate: scale < variant < variant at scale < sweep value < seed; checkpoints
    requested by the axis are saved and kept."""
    variant = replicate.system.variant
    method = get_method(variant.method)
    overrides = apply_axes(variant_train_overrides(suite, variant, scale), replicate)
    overrides["model"] = model
    cfg = suite.scale(scale)
    spec = method.spec(method_preset(method, scale, cfg.preset_scale), **overrides)
    if cfg.stand_ins or cfg.limits:
        # a smoke scale: models the presets name (proxies, retrievers) through the stand-ins, the run capped
        changes: dict[str, Any] = {"method_options": cfg.stand_in(spec.method_options)}
        if cfg.limits:
            changes["limits"] = dict(cfg.limits)
        spec = spec.replace(**changes)
    return keep_checkpoints(spec, replicate.checkpoints)


def method_preset(method, scale: str, preset: str) -> str:
    """``preset`` if it is one of ``method``'s presets; a ConfigError otherwise (a scale named outside the
    presets must say which one it extends with ``preset:`` instead of silently taking another's settings)."""
    if preset in method.presets:
        return preset
    names = ", ".join(method.presets) or "(none)"
    hint = closest(preset, list(method.presets))
    if preset != scale:
        raise ConfigError(f"scale {scale!r}: preset {preset!r} is not a preset of method {method.name!r} "
                          f"(presets: {names})" + (f"; did you mean {hint!r}?" if hint else ""))
    raise ConfigError(f"scale {scale!r} is not a preset of method {method.name!r} (presets: {names}) and does "
                      "not say which one it extends: add 'preset: <name>' to the scale"
                      + (f" (did you mean 'preset: {hint}'?)" if hint else ""))


def expand_eval_cells(train_cells: list[TrainCell], benchmarks: list[BenchmarkRef],
                      card_fingerprints: dict[str, str]) -> list[EvalCell]:
    cells = []
    for tc in train_cells:
        own = tc.variant_evaluation
        for b in benchmarks:
            cells.append(EvalCell(tc, b, eval_key(tc.key, b.suite, card_fingerprints[b.id], evaluation=own)))
        for step in tc.steps:
            for b in benchmarks:
                cells.append(EvalCell(tc, b, eval_key(tc.key, b.suite, card_fingerprints[b.id], step, own), step))
    return cells


def eval_key(train_key: str, benchmark_suite: str, card_fingerprint: str, step: int | None = None,
             evaluation: dict[str, Any] | None = None) -> str:
    """The content key of an evaluation cell: its training cell, benchmark suite and protocol card (and the
    checkpoint's step for an intermediate checkpoint, and the variant's own evaluation settings; none given
    leaves the key as it always was)."""
    config: dict[str, Any] = {"train": train_key, "benchmark": benchmark_suite, "card": card_fingerprint}
    if step is not None:
        config["step"] = int(step)
    # The encoding devices change no number (harness.encoders.devices): the same cell on other devices is the same cell.
    encoding = {k: v for k, v in (evaluation or {}).get("encoding", {}).items() if k != "devices"}
    evaluation = {k: v for k, v in (evaluation or {}).items() if k != "encoding"} | ({"encoding": encoding}
                                                                                      if encoding else {})
    if evaluation:
        config["evaluation"] = evaluation
    return content_key(config)


def shard_filter(cells: list[TrainCell], shard: tuple[int, int]) -> list[TrainCell]:
    """Cells of shard ``i`` of ``n`` (1-based), assigned round-robin over cells sorted by key."""
    i, n = shard
    if not (1 <= i <= n):
        raise ConfigError(f"--shard {i}/{n}: expected 1 <= i <= n")
    unique = sorted({c.key: c for c in cells}.values(), key=lambda c: c.key)
    mine = {c.key for j, c in enumerate(unique) if j % n == i - 1}
    return [c for c in cells if c.key in mine]


def expand_cells(suite: AblationSuite, scale: str) -> list[TrainCell]:
    """Public shortcut: the training cells of ``suite`` at ``scale``."""
    return expand_train_cells(suite, scale)
