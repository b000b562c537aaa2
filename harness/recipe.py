"""Typed recipes: a method's options and presets as declarations that say where every value comes from.

A method declares its options (``Method.Options``) as a frozen dataclass whose fields are made by
:func:`option`::

    @dataclass(frozen=True)
    class PegOptions:
        alpha: float = option(0.5, doc="threshold mixing the positive and negative statistics",
                              bounds="[0, 1]", source="paper 002 §3.1")
        a_mode: str = option("pos", doc="...", choices=("pos", "neg"), source="harness default: ...")

Each field carries its type (the annotation), a doc line, its choices or range, a unit, and the source of
its default: a paper section (``"paper 000 §4.1"``), an official code file
(``"naver/splade splade/losses/pairwise.py"``) or ``"harness default: <why>"``.  From the declaration
come the validation of method options (:func:`validate_options`, :func:`option_problems`: unknown names
with a did-you-mean, wrong types, values outside the choices or the range), the plain defaults
(:func:`defaults`) and the listing ``harness list methods --options`` (:func:`describe_options`).

Presets are :class:`Preset` values: the TrainSpec overrides of one scale plus, per field, the source of
its value (:func:`preset`).  A preset is a read-only mapping of the overrides, so code that reads
``Method.presets[scale]`` as a mapping of TrainSpec fields keeps working and no run key changes.

This module is engine code: it imports neither methods nor suites nor reports.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from harness.errors import ConfigError
from harness.train.spec import _coerce, _matches, closest, describe_type

__all__ = ["BaseLossOptions", "NoOptions", "OptionInfo", "Preset", "declaration_from_defaults", "defaults",
           "describe_options", "option", "option_infos", "option_problems", "preset", "rebased", "validate_options"]

# ``source`` of an option must name where its default comes from (DESIGN: every number traceable).
SOURCE_KINDS = ("paper", "code", "harness default", "undeclared")
_BOUNDS = re.compile(r"^\s*([\[(])\s*([^,]*?)\s*,\s*([^,]*?)\s*([\])])\s*$")


@dataclass(frozen=True)
class Bounds:
    """An interval such as ``(0, 1]`` or ``[1, inf)``: the range a numeric option must lie in."""

    low: float
    high: float
    low_open: bool
    high_open: bool
    text: str

    @classmethod
    def parse(cls, text: str) -> Bounds:
        match = _BOUNDS.match(text)
        if not match:
            raise ValueError(f"bounds {text!r}: write an interval such as '(0, 1]' or '[1, inf)'")
        left, low, high, right = match.groups()
        return cls(float(low or "-inf"), float(high or "inf"), left == "(", right == ")", text.strip())

    def phrase(self, tp: Any = float) -> str:
        """``lie in (0, 1]`` for an interval, ``be a number >= 0`` / ``be an integer >= 1`` for a half-line."""
        kinds = [a for a in (typing.get_args(tp) or (tp,)) if a is not type(None)]
        what = describe_type(kinds[0]) if len(kinds) == 1 else "a number"
        if math.isinf(self.high) and not math.isinf(self.low):
            return f"be {what} {'>' if self.low_open else '>='} {_number(self.low)}"
        if math.isinf(self.low) and not math.isinf(self.high):
            return f"be {what} {'<' if self.high_open else '<='} {_number(self.high)}"
        return f"lie in {self.text}"

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


@dataclass(frozen=True)
class OptionInfo:
    """One declared option: what ``option(...)`` recorded, with the field's name and type."""

    name: str
    type: Any
    default: Any
    doc: str
    source: str
    choices: tuple[Any, ...] | None = None
    unit: str | None = None
    bounds: Bounds | None = None

    def type_text(self) -> str:
        return describe_type(self.type)

    def describe(self) -> str:
        """One line for listings: name, type, default, choices or range and unit, source, doc."""
        parts = [f"{self.name}: {_short_type(self.type)} = {self.default!r}"]
        if self.choices is not None:
            parts.append("one of " + ", ".join(str(c) for c in self.choices))
        if self.bounds is not None:
            parts.append(f"in {self.bounds.text}")
        if self.unit:
            parts.append(f"unit: {self.unit}")
        parts.append(f"source: {self.source}")
        return "; ".join(parts) + (f" -- {self.doc}" if self.doc else "")

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "type": _short_type(self.type), "default": _plain(self.default),
                "choices": list(self.choices) if self.choices is not None else None, "unit": self.unit,
                "bounds": self.bounds.text if self.bounds else None, "source": self.source, "doc": self.doc}


def option(default: Any, *, doc: str, source: str, choices: Sequence[Any] | None = None, unit: str | None = None,
           bounds: str | None = None) -> Any:
    """A field of an options declaration: its default, a doc line, where the default comes from, and the
    choices, unit or range (``bounds``, an interval like ``"(0, 1]"``) it is checked against."""
    if not source.strip():
        raise ValueError("option(): every default needs a source (paper section, code file or 'harness default: why')")
    if choices is not None and default is not None and default not in choices:
        raise ValueError(f"option(): default {default!r} is not one of {tuple(choices)}")
    parsed = Bounds.parse(bounds) if bounds is not None else None
    metadata = {"recipe": {"doc": doc, "source": source, "unit": unit, "bounds": parsed,
                           "choices": tuple(choices) if choices is not None else None}}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=functools.partial(copy.deepcopy, default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class NoOptions:
    """The declaration of a method without options."""


@functools.cache
def option_infos(declaration: type) -> tuple[OptionInfo, ...]:
    """The declared options of ``declaration`` (a dataclass made with :func:`option` fields), in order."""
    if not dataclasses.is_dataclass(declaration):
        raise TypeError(f"{declaration!r} is not an options dataclass")
    hints = typing.get_type_hints(declaration)
    infos = []
    for f in dataclasses.fields(declaration):
        meta = f.metadata.get("recipe")
        if meta is None:
            raise TypeError(f"{declaration.__qualname__}.{f.name}: declare options with harness.recipe.option(...)")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
        infos.append(OptionInfo(f.name, hints[f.name], default, meta["doc"], meta["source"], meta["choices"],
                                meta["unit"], meta["bounds"]))
    return tuple(infos)


def defaults(declaration: type) -> dict[str, Any]:
    """The declared defaults as a plain dict (fresh copies of mutable values)."""
    return {info.name: copy.deepcopy(info.default) for info in option_infos(declaration)}


def declaration_from_defaults(name: str, values: Mapping[str, Any], source: str) -> type:
    """An untyped declaration (every type ``Any``) for a method that gives only a ``default_options`` dict
    (e.g. a plug-in written before typed recipes): unknown names are still refused, nothing else checked."""
    fields = [(key, Any, option(_plain(value), doc="", source=source)) for key, value in values.items()]
    return dataclasses.make_dataclass(f"{name}Options", fields, frozen=True)


def _declaration(of: Any, owner: str) -> tuple[type, str]:
    """``(declaration, owner)`` of a method class or instance (its ``Options`` and ``method 'name'``) or of
    an options dataclass itself."""
    declared = getattr(of, "Options", None)
    if declared is not None:
        return declared, owner or f"method {getattr(of, 'name', '') or type(of).__name__!r}"
    return of, owner


def option_problems(declaration: Any, options: Mapping[str, Any], owner: str = "") -> list[tuple[str, str]]:
    """``(option, problem)`` for every unknown name (with a did-you-mean and the known names), value of the
    wrong type, value outside the choices and value outside the range of ``options``.  Nothing is raised,
    so a caller (a suite-file check) can report every problem, each at its own file line.

    ``declaration``: an options dataclass, or a method class or instance (its ``Options``; ``owner``
    then defaults to ``method 'name'``)."""
    declaration, owner = _declaration(declaration, owner)
    infos = {info.name: info for info in option_infos(declaration)}
    prefix = f"{owner}: " if owner else ""
    problems: list[tuple[str, str]] = []
    unknown = sorted(str(k) for k in options if k not in infos)
    if unknown:
        hints = "".join(f" ({u!r}: did you mean {s!r}?)" for u in unknown if (s := closest(u, infos)))
        problems.append((unknown[0], f"{prefix}unknown option(s) {', '.join(unknown)}{hints}; "
                                     f"options: {', '.join(sorted(infos)) or '(none)'}"))
    for key, raw in options.items():
        info = infos.get(key)
        if info is None:
            continue
        value = _coerce(raw, info.type)
        if info.choices is not None and value is not None:
            if value not in info.choices:
                choices = ", ".join(str(c) for c in info.choices)
                problems.append((key, f"{prefix}unknown {key} {value!r}: {key} must be one of {choices}"))
            continue
        if not _matches(value, info.type):
            problems.append((key, f"{prefix}{key} must be {describe_type(info.type)}, got {value!r} "
                                  f"({type(value).__name__})"))
            continue
        if info.bounds is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not info.bounds.contains(value):
            problems.append((key, f"{prefix}{key} must {info.bounds.phrase(info.type)}, got {value!r}"))
    return problems


def validate_options(declaration: Any, options: Mapping[str, Any], where: str = "", owner: str = "") -> dict[str, Any]:
    """The declared defaults merged with ``options`` (numeric strings such as YAML's ``1e-4`` read as
    numbers where a number belongs), or a :class:`ConfigError` listing every problem, each line prefixed
    with ``where`` (e.g. ``"suite.yaml:12: "``) and naming ``owner`` (e.g. ``"method 'peg'"``).

    ``declaration``: a method class or instance (``validate_options(get_method("peg"), opts, "f.yaml:3: ")``)
    or an options dataclass."""
    declaration, owner = _declaration(declaration, owner)
    problems = option_problems(declaration, options, owner)
    if problems:
        raise ConfigError("\n".join(f"{where}{message}" for _, message in problems))
    infos = {info.name: info for info in option_infos(declaration)}
    return {**defaults(declaration), **{k: _coerce(v, infos[k].type) for k, v in options.items()}}


def describe_options(declaration: Any) -> list[str]:
    """One line per declared option (``harness list methods --options``) of a declaration or a method."""
    declaration, _ = _declaration(declaration, "-")
    return [info.describe() for info in option_infos(declaration)]


# ----------------------------------------------------------------------------- presets

class Preset(Mapping[str, Any]):
    """The TrainSpec overrides of one scale (a read-only mapping, as presets always were) and, per field,
    where its value comes from (``sources``; fields without an entry fall back to ``default_source``)."""

    def __init__(self, overrides: Mapping[str, Any], sources: Mapping[str, str] | None = None,
                 default_source: str = "") -> None:
        self._overrides: Mapping[str, Any] = _frozen(dict(overrides))
        self.sources: Mapping[str, str] = _frozen(dict(sources or {}))
        self.default_source = default_source
        extra = sorted(set(self.sources) - set(self._overrides))
        if extra:
            raise ValueError(f"preset sources for fields it does not set: {', '.join(extra)}")

    def __getitem__(self, key: str) -> Any:
        return self._overrides[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._overrides)

    def __len__(self) -> int:
        return len(self._overrides)

    def __repr__(self) -> str:
        return f"Preset({dict(self._overrides)!r})"

    def source(self, key: str) -> str:
        """Where the value of ``key`` comes from."""
        if key not in self._overrides:
            raise KeyError(key)
        return self.sources.get(key, self.default_source)

    def derive(self, overrides: Mapping[str, Any],
               sources: Mapping[str, str] | Sequence[tuple[str, Sequence[str]]] = (),
               default_source: str | None = None) -> Preset:
        """This preset with ``overrides`` on top: the fields it keeps keep their sources; a changed field
        takes its source from ``sources`` or ``default_source``."""
        fallback = self.default_source if default_source is None else default_source
        kept = {k: self.source(k) for k in self._overrides if k not in overrides}
        given = _per_field(sources)
        new = {k: given.get(k, fallback) for k in overrides}
        merged = {**kept, **new}
        return Preset({**self._overrides, **overrides}, {k: v for k, v in merged.items() if v}, "")


def rebased(base: Mapping[str, Any], values: Mapping[str, Any], default_source: str,
            sources: Mapping[str, str] | Sequence[tuple[str, Sequence[str]]] = ()) -> Preset:
    """A :class:`Preset` of exactly ``values`` (a full preset dict built from ``base``'s, e.g. ``{**_PAPER, ...}``):
    a field given in ``sources`` takes that source; a field whose value equals ``base``'s keeps ``base``'s
    source (when ``base`` is a :class:`Preset`, as ``Method.presets`` values are); any other field (changed or
    new) takes ``default_source``."""
    given = _per_field(sources)
    out: dict[str, str] = {}
    for key, value in values.items():
        if key in given:
            out[key] = given[key]
        elif key in base and _plain(base[key]) == _plain(value) and isinstance(base, Preset):
            out[key] = base.source(key)
        else:
            out[key] = default_source
    return Preset(values, out)


def preset(overrides: Mapping[str, Any], default_source: str,
           sources: Mapping[str, str] | Sequence[tuple[str, Sequence[str]]] = ()) -> Preset:
    """A :class:`Preset`: ``overrides`` with ``default_source`` for every field except those given in
    ``sources``, a ``{field: source}`` mapping or ``(source, [field, ...])`` groups."""
    return Preset(overrides, _per_field(sources), default_source)


def _per_field(sources: Mapping[str, str] | Sequence[tuple[str, Sequence[str]]] | None) -> dict[str, str]:
    if not sources:
        return {}
    if isinstance(sources, Mapping):
        return dict(sources)
    out: dict[str, str] = {}
    for source, fields in sources:
        for name in fields:
            out[name] = source
    return out


# ----------------------------------------------------------------------------- helpers

def _frozen(value: Any) -> Any:
    """A read-only deep view (mappings become ``MappingProxyType``, lists tuples), as presets always were."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _short_type(tp: Any) -> str:
    if tp is Any:
        return "any"
    text = getattr(tp, "__name__", None) if isinstance(tp, type) else None
    return text or str(tp).replace("typing.", "").replace("NoneType", "None")


@dataclass(frozen=True)
class BaseLossOptions:
    """The options of a method that can wrap another method's per-sample loss."""

    base: str | None = option(None, doc="a registered method whose per-sample loss this method reweights "
                                        "(none: the method's own loss)",
                              source="harness default: the method's own loss, as its paper trains it")
    base_options: dict = option({}, doc="the base method's own options",
                                source="harness default: the base method's defaults")
