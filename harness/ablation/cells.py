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

from harness.ablation.resolve import require_resolved, resolve_data_entry, resolve_model, resolve_option_value
from harness.ablation.spec import NO_TRAINING, AblationSuite, BenchmarkRef, Variant
from harness.errors import ConfigError
from harness.keys import content_key, train_run_config
from harness.method import get_method
from harness.train.spec import TrainSpec, model_identity


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

    @property
    def label(self) -> str:
        return self.variant.label

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


def expand_train_cells(suite: AblationSuite, scale: str, load_data: bool = True) -> list[TrainCell]:
    """One training cell per variant (variants that share a key train once)."""
    cfg = suite.scale(scale)
    entries = [resolve_data_entry(e) for e in cfg.data]
    data_fp = None
    if load_data:
        from harness.data.collections import load_training_data

        require_resolved(entries, f"suite {suite.name!r} scale {scale!r}: training data")
        data_fp = load_training_data(entries).fingerprint()
    cells = []
    for variant in suite.variants:
        model = resolve_model(variant.model or cfg.model)
        if variant.method == NO_TRAINING:
            # The model's content identity, not its path (a synthetic model lives in the cache directory).
            config = {"method": NO_TRAINING, "model": model_identity(model)}
            cells.append(TrainCell(suite.name, scale, variant, NO_TRAINING, model, None, [], None,
                                   content_key(config), config))
            continue
        method = get_method(variant.method)
        overrides = variant_train_overrides(suite, variant, scale)
        overrides["model"] = model
        spec = method.spec(scale if scale in method.presets else _nearest_preset(method, scale), **overrides)
        config = train_run_config(variant.method, spec, data_fp)
        cells.append(TrainCell(suite.name, scale, variant, variant.method, model, spec, entries, data_fp,
                               content_key(config), config))
    return cells


def _nearest_preset(method, scale: str) -> str:
    if not method.presets:
        raise ConfigError(f"method {method.name!r} has no presets")
    return "tiny" if "tiny" in method.presets else next(iter(method.presets))


def expand_eval_cells(train_cells: list[TrainCell], benchmarks: list[BenchmarkRef],
                      card_fingerprints: dict[str, str]) -> list[EvalCell]:
    cells = []
    for tc in train_cells:
        for b in benchmarks:
            cells.append(EvalCell(tc, b, eval_key(tc.key, b.suite, card_fingerprints[b.id])))
    return cells


def eval_key(train_key: str, benchmark_suite: str, card_fingerprint: str) -> str:
    """The content key of an evaluation cell: its training cell, benchmark suite and protocol card."""
    return content_key({"train": train_key, "benchmark": benchmark_suite, "card": card_fingerprint})


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
