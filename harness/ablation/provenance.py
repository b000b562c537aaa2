"""Where each setting of a suite's systems comes from, and how each system differs from the baseline.

A system's settings are its method and model, its TrainSpec fields (``train.<field>``), its method
options (``options.<name>``), its evaluation settings (``evaluation.<key>``), its seeds and
checkpoints.  Each value has one source: the suite file's line that set it last (``tdro.yaml:41``),
or, for a value the file does not set, the method's preset at that scale, the method's option
default, or the TrainSpec default.  ``harness run SUITE --dry-run`` prints :func:`settings_diff`
and the HTML report shows the same table.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.ablation.axes import System, baseline_system, replicates, suite_systems
from harness.ablation.cells import merge_evaluation, replicate_spec
from harness.ablation.problems import KeyPath
from harness.ablation.spec import NO_TRAINING, AblationSuite
from harness.method import get_method
from harness.recipe import option_infos
from harness.train.spec import TrainSpec
from harness.train.stages import Stage

# TrainSpec fields that are not settings of a system (set from elsewhere, or shown as their own setting)
_NOT_SHOWN = ("model", "method_options", "save_every", "save_initial", "keep_checkpoints", "limits")


@dataclass(frozen=True)
class Setting:
    """One setting of a system: its value and where that value came from."""

    name: str
    value: Any
    source: str


@dataclass(frozen=True)
class Difference:
    """A setting of ``system`` that differs from the baseline's (``None``: the setting does not apply)."""

    system: str
    name: str
    value: Any
    source: str
    baseline: Any
    baseline_source: str


def _layered(suite: AblationSuite, layers: list[tuple[KeyPath, dict[str, Any]]], key: str) -> str | None:
    """The source of the last layer that sets ``key`` (its file line), or None."""
    for keypath, layer in reversed(layers):
        if key in layer:
            return suite.source(keypath + (key,)) or f"{suite.name} ({'.'.join(map(str, keypath + (key,)))})"
    return None


def system_settings(suite: AblationSuite, system: System, scale: str) -> dict[str, Setting]:
    """Every setting of ``system`` at ``scale`` with its source, by name (``train.lr``, ``options.k``, ...)."""
    cfg = suite.scale(scale)
    variant = system.variant
    i = suite.variants.index(variant)
    where: KeyPath = ("variants", i)
    at_scale: KeyPath = where + ("scales", scale)
    own = variant.scales.get(scale, {})
    out: dict[str, Setting] = {}

    def add(name: str, value: Any, source: str | None) -> None:
        out[name] = Setting(name, _plain(value), source or "")

    add("method", variant.method, suite.source(where + ("method",)))
    model_at = [(at_scale + ("model",), own.get("model")), (where + ("model",), variant.model),
                (("scales", scale, "model"), cfg.model)]
    keypath, model = next((k, m) for k, m in model_at if m)
    add("model", model, suite.source(keypath) or _borrowed_model_source(suite, variant, scale))
    sweep_at = where + ("sweep", "values", system.point) if system.point is not None else None
    if variant.method != NO_TRAINING:
        method = get_method(variant.method)
        replicate = replicates(suite, system, scale)[0]
        spec = replicate_spec(suite, replicate, scale, model)   # the name: resolving would build a synthetic model
        recipe = cfg.preset_scale
        preset_name = recipe if recipe in method.presets else next(iter(method.presets), recipe)
        declared = method.presets.get(preset_name, {})
        preset = dict(declared)

        def from_preset(key: str) -> str:
            why = declared.source(key) if hasattr(declared, "source") else ""    # a recipe.Preset says why
            return f"method {variant.method} preset {preset_name!r}" + (f" ({why})" if why else "")

        option_sources = _option_sources(method)
        train_layers = [(("scales", scale, "train"), cfg.train), (where + ("train",), variant.train),
                        (at_scale + ("train",), own.get("train") or {})]
        defaults = TrainSpec()
        for f in dataclasses.fields(TrainSpec):
            if f.name in _NOT_SHOWN or (f.name == "seed" and replicate.seed is not None):
                continue
            source = _layered(suite, train_layers, f.name)
            if system.sweep is not None and system.sweep.section == "train" and system.sweep.name == f.name:
                source = suite.source(sweep_at) if sweep_at else source
            if source is None:
                source = (from_preset(f.name) if f.name in preset
                          else "TrainSpec default" if getattr(defaults, f.name) == getattr(spec, f.name)
                          else f"method {variant.method}")
            add(f"train.{f.name}", getattr(spec, f.name), source)
        for key, cap in cfg.limits.items():      # a smoke scale's caps: the capped values come from its limits
            if out.get(f"train.{key}") is not None and out[f"train.{key}"].value == cap:
                add(f"train.{key}", cap, suite.source(("scales", scale, "limits", key)))
        option_layers = [(("scales", scale, "train", "method_options"), dict(cfg.train.get("method_options") or {})),
                         (where + ("options",), variant.options), (at_scale + ("options",), own.get("options") or {})]
        preset_options = dict(preset.get("method_options") or {})
        options = {**method.default_options, **spec.method_options}
        for name, value in options.items():
            source = _layered(suite, option_layers, name)
            if system.sweep is not None and system.sweep.section == "options" and system.sweep.name == name:
                source = suite.source(sweep_at) if sweep_at else source
            if source is None:
                source = (from_preset("method_options") if name in preset_options
                          else f"method {variant.method} default"
                          + (f" ({option_sources[name]})" if option_sources.get(name) else ""))
            add(f"options.{name}", value, source)
        seeds = suite.seeds_for(variant, scale)
        if seeds is not None:
            seed_at = [at_scale + ("seeds",), where + ("seeds",), ("scales", scale, "seeds"), ("seeds",)]
            add("seeds", seeds, next((s for k in seed_at if (s := suite.source(k))), None))
        checkpoints = suite.checkpoints_for(variant, scale)
        if checkpoints is not None:
            add("checkpoints", checkpoints.steps or f"every {checkpoints.every}",
                suite.source(at_scale + ("checkpoints",)) or suite.source(where + ("checkpoints",)))
    evaluation = merge_evaluation(cfg.evaluation, variant.evaluation, own.get("evaluation") or {})
    for key, value in evaluation.items():
        layers = [(("scales", scale), cfg.evaluation), (where, variant.evaluation),
                  (at_scale, own.get("evaluation") or {})]
        add(f"evaluation.{key}", value, _layered(suite, layers, key))
    return out


def _borrowed_model_source(suite: AblationSuite, variant: Any, scale: str) -> str | None:
    """A smoke scale's model borrowed from its recipe: the stand-in's line, else the recipe's own line."""
    recipe = suite.scale(scale).recipe
    if recipe is None:
        return None
    where: KeyPath = ("variants", suite.variants.index(variant))
    original = variant.scales.get(recipe, {}).get("model") or variant.model
    return (suite.source(("scales", scale, "stand_ins", original))
            or suite.source(where + ("scales", recipe, "model")) or suite.source(where + ("model",)))


def _option_sources(method: Any) -> dict[str, str]:
    """``{option: where its default comes from}`` of a method whose options are a typed declaration."""
    declaration = getattr(method, "Options", None)
    if not isinstance(declaration, type) or not dataclasses.is_dataclass(declaration):
        return {}

    try:
        return {info.name: info.source for info in option_infos(declaration)}
    except TypeError:            # not declared with harness.recipe.option
        return {}


def settings_diff(suite: AblationSuite, scale: str) -> list[Difference]:
    """Every setting of every system that differs from the baseline system's, in file order; a setting
    only one of the two has (a trained variant against an untrained baseline) shows None on the other side."""
    base = baseline_system(suite)
    base_settings = system_settings(suite, base, scale)
    out: list[Difference] = []
    for system in suite_systems(suite):
        if system.id == base.id:
            continue
        settings = system_settings(suite, system, scale)
        both_train = system.variant.method != NO_TRAINING and base.variant.method != NO_TRAINING
        names = list(dict.fromkeys([*settings, *(base_settings if both_train else ())]))
        for name in names:
            mine, theirs = settings.get(name), base_settings.get(name)
            if not both_train and name.split(".")[0] in ("train", "options", "seeds", "checkpoints"):
                if mine is None:
                    continue
            value = mine.value if mine else None
            baseline = theirs.value if theirs else None
            if value == baseline:
                continue
            out.append(Difference(system.id, name, value, mine.source if mine else "", baseline,
                                  theirs.source if theirs else ""))
    return out


def diff_lines(suite: AblationSuite, scale: str, diffs: list[Difference] | None = None) -> list[str]:
    """The dry run's text of :func:`settings_diff`: per system, each differing setting with its source."""
    diffs = settings_diff(suite, scale) if diffs is None else diffs
    base = baseline_system(suite)
    lines = [f"settings that differ from the baseline {base.id} (value <- where it was set; baseline value):"]
    current = None
    for d in diffs:
        if d.system != current:
            lines.append(f"  {d.system}:")
            current = d.system
        lines.append(f"    {d.name} = {value_text(d.value)}  <- {d.source or '-'}   (baseline: {value_text(d.baseline)}"
                     + (f" <- {d.baseline_source}" if d.baseline_source else "") + ")")
    if not diffs:
        lines.append("  (every system has the baseline's settings)")
    return lines


def _plain(value: Any) -> Any:
    """A value as plain data (read-only mappings of a method's declarations become dicts)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def value_text(value: Any, width: int = 60) -> str:
    """A setting's value as the dry run and the report show it (``-``: the setting does not apply)."""
    if value is None:
        return "-"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


# ------------------------------------------------------------------ every resolved setting, classified
# The kinds of source a resolved value can rest on, most authoritative first.  ``spec`` is METHODS.md (the
# implementation spec checked against the official code); ``suite`` a suite-file line (a deliberate choice
# of whoever wrote the suite); ``harness`` a default of the harness that nothing else backs.
SOURCE_KINDS = ("paper", "code", "spec", "suite", "harness")
_SUITE_LINE = re.compile(r"^[^\s()]+\.ya?ml:\d+")
# Settings that change no number (logging, progress): never a strict-provenance problem.
_NO_NUMBERS = frozenset(f"train.{name}" for name in TrainSpec.NON_RESULT_FIELDS)


def source_kind(source: str) -> str:
    """Which of :data:`SOURCE_KINDS` a setting's source is: ``tdro.yaml:41`` is ``suite``; ``method tdro
    preset 'paper' (paper 000 Table 7)`` is ``paper`` (the reason in parentheses decides); ``TrainSpec default``
    and ``... (harness default: why)`` are ``harness``; an official repository's file is ``code``."""
    text = source.strip()
    if not text or text == "TrainSpec default":
        return "harness"
    if _SUITE_LINE.match(text) or text.startswith("the suite"):
        return "suite"
    reason = text
    if text.startswith("method ") and "(" in text:
        reason = text[text.index("(") + 1:text.rindex(")") if text.endswith(")") else len(text)]
    elif text.startswith("method "):
        return "harness"            # set by a method's code with no reason given
    reason = reason.strip().lower()
    if not reason or reason.startswith("harness"):
        return "harness"
    if reason.startswith("paper"):
        return "paper"
    if reason.startswith("methods.md"):
        return "spec"
    return "code"


@dataclass(frozen=True)
class ResolvedSetting:
    """One resolved setting of one run of a suite: a system's own run (``stage`` None) or a stage it trains
    first (its label), with the value's source and that source's kind (:data:`SOURCE_KINDS`)."""

    system: str
    stage: str | None
    name: str
    value: Any
    source: str
    kind: str

    def line(self) -> str:
        where = self.system + (f" / {self.stage}" if self.stage else "")
        return f"{where}: {self.name} = {value_text(self.value)}  <- {self.source or '-'}"


def resolved_settings(suite: AblationSuite, scale: str) -> list[ResolvedSetting]:
    """Every resolved setting of every system at ``scale`` and of every training stage it needs first
    (tDRO's reference and stage 1, COCO pretraining), each with its source; what ``--dry-run --format json``
    prints under ``provenance`` and ``--strict-provenance`` checks."""
    out: list[ResolvedSetting] = []
    for system in suite_systems(suite):
        settings = system_settings(suite, system, scale)
        out.extend(ResolvedSetting(system.id, None, s.name, s.value, s.source, source_kind(s.source))
                   for s in settings.values())
        if system.variant.method == NO_TRAINING:
            continue
        method = get_method(system.variant.method)
        spec = replicate_spec(suite, replicates(suite, system, scale)[0], scale, str(settings["model"].value))
        out.extend(_stage_settings(system.id, method, spec, settings, suite.scale(scale).preset_scale))
    return out


def _stage_settings(system: str, owner: Any, owner_spec: TrainSpec, owner_settings: Mapping[str, Setting],
                    scale: str, prefix: str = "") -> list[ResolvedSetting]:
    """The settings of the training stages ``owner`` declares under ``owner_spec`` (depth first): a value
    equal to the owner's keeps the owner's source; a changed one takes the stage's declared source, else the
    stage method's preset or option default, else it rests on the harness."""
    out: list[ResolvedSetting] = []
    for stage in owner.stages(owner_spec):
        if not isinstance(stage, Stage):
            continue        # data stages are computed from the owner's options, listed as the owner's
        label = prefix + stage.label
        method = owner.named(stage.method)
        preset_name = scale if scale in method.presets else next(iter(method.presets), scale)
        preset = method.presets.get(preset_name, {})
        option_sources = _option_sources(method)
        settings: dict[str, Setting] = {}
        settings["model"] = _stage_setting("model", stage.spec.model, owner_settings.get("model"),
                                           stage.sources.get("model"), f"method {owner.name} stage {stage.name}")
        for f in dataclasses.fields(TrainSpec):
            if f.name in _NOT_SHOWN:
                continue
            value = _plain(getattr(stage.spec, f.name))
            why = preset.source(f.name) if f.name in preset and hasattr(preset, "source") else ""
            in_preset = f.name in preset and _plain(preset[f.name]) == value
            default = (f"method {method.name} preset {preset_name!r}" + (f" ({why})" if why else "") if in_preset
                       else f"method {owner.name} stage {stage.name}")
            key = f"train.{f.name}"
            settings[key] = _stage_setting(key, value, owner_settings.get(key), stage.sources.get(f.name), default)
        options = {**method.default_options, **stage.spec.method_options}
        for name, value in options.items():
            is_default = _plain(method.default_options.get(name)) == _plain(value)
            default = (f"method {method.name} default" + (f" ({option_sources[name]})" if option_sources.get(name)
                                                          else "")
                       if is_default else f"method {owner.name} stage {stage.name}")
            key = f"options.{name}"
            settings[key] = _stage_setting(key, _plain(value), owner_settings.get(key), stage.sources.get(key), default)
        out.extend(ResolvedSetting(system, label, s.name, s.value, s.source, source_kind(s.source))
                   for s in settings.values())
        out.extend(_stage_settings(system, method, stage.spec, settings, scale, prefix=label + " / "))
    return out


def _stage_setting(name: str, value: Any, inherited: Setting | None, declared: str | None, default: str) -> Setting:
    """A stage's setting: the owner's source when the value is the owner's, else the declared one, else ``default``."""
    if inherited is not None and inherited.value == value:
        return Setting(name, value, inherited.source)
    return Setting(name, value, declared or default)


def provenance_counts(settings: list[ResolvedSetting]) -> dict[str, int]:
    """How many resolved settings rest on each kind of source, and the total."""
    counts = {kind: 0 for kind in SOURCE_KINDS}
    for s in settings:
        counts[s.kind] += 1
    return {"total": len(settings), **counts}


def strict_provenance_problems(settings: list[ResolvedSetting]) -> list[ResolvedSetting]:
    """The settings that change numbers and rest only on a harness default (``--strict-provenance``).

    A ``None`` value is a switch left off or a choice delegated (``pooling: null`` takes the model's own,
    ``lora: null`` is full fine-tuning, ``gradcache_chunk_size: null`` no gradient cache), and an empty
    mapping sets nothing (``base_options: {}`` without a ``base``); both are listed with their source but
    not counted as problems."""
    return [s for s in settings if s.kind == "harness" and s.name not in _NO_NUMBERS
            and s.value is not None and s.value != {}]
