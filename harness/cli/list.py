"""``harness list methods|suites|metrics``: what the registries hold, one line each.

Built-ins and plug-ins installed through entry points (``retrieval_harness.methods``,
``retrieval_harness.suites``, ``retrieval_harness.metrics``) are listed alike.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping

from harness.recipe import describe_options, option_infos
from harness.registry import Registry

KINDS = ("methods", "suites", "metrics")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list the registered methods, benchmark suites or metrics",
                       description="List what the registries hold (built-ins and installed plug-ins), one line "
                                   "each with its description.")
    p.add_argument("kind", choices=KINDS, help="what to list")
    p.add_argument("--options", action="store_true",
                   help="also show each method's options (type, default, choices or range, unit, the source of the "
                        "default, doc), or each suite's declared load options")
    p.add_argument("--json", action="store_true",
                   help="print JSON: a list of {name, description} (with --options: and options; methods also their "
                        "presets, each value with its source) instead of lines")
    p.set_defaults(func=run)


def registry(kind: str) -> Registry:
    # Imported here: listing metrics must not import the method registry's dependencies, and so on.
    if kind == "methods":
        from harness.method import METHODS  # lazy (start-up speed): imports numpy
        return METHODS
    if kind == "suites":
        from harness.benchmark import SUITES  # lazy (start-up speed): imports numpy
        return SUITES
    from harness.metrics import METRICS  # lazy (start-up speed): imports numpy
    return METRICS


def lines(kind: str, with_options: bool = False) -> list[str]:
    """The listing ``harness list KIND`` prints."""
    reg = registry(kind)
    items = reg.describe() if kind == "metrics" else sorted(reg.describe())  # metrics: canonical order
    width = max((len(name) for name, _ in items), default=0)
    out = []
    for name, description in items:
        out.append(f"{name:<{width}}  {description}".rstrip())
        if with_options:
            out.extend(f"{'':<{width}}    {line}" for line in _option_lines(kind, reg.get(name)))
    return out


def _option_lines(kind: str, obj) -> list[str]:
    if kind == "methods":
        return describe_options(obj)
    if kind == "suites":
        return [option.describe() for option in obj.options]
    return []


def records(kind: str, with_options: bool = False) -> list[dict[str, object]]:
    """What ``harness list KIND --json`` prints: ``{name, description}`` per entry, with ``options`` (methods:
    the declared options, each with type, default, choices, unit, bounds, source and doc) when asked."""
    reg = registry(kind)
    items = reg.describe() if kind == "metrics" else sorted(reg.describe())
    out: list[dict[str, object]] = []
    for name, description in items:
        record: dict[str, object] = {"name": name, "description": description}
        if with_options and kind == "methods":
            method = reg.get(name)
            record["options"] = [info.as_dict() for info in option_infos(method.Options)]
            record["presets"] = {scale: {key: {"value": _plain(preset[key]), "source": _source(preset, key)}
                                         for key in preset} for scale, preset in method.presets.items()}
        elif with_options:
            record["options"] = _option_lines(kind, reg.get(name))
        out.append(record)
    return out


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _source(preset: Mapping[str, object], key: str) -> str | None:
    source = getattr(preset, "source", None)
    return source(key) if callable(source) else None


def run(args: argparse.Namespace) -> int:
    if args.json:
        import json

        print(json.dumps(records(args.kind, args.options), indent=2, ensure_ascii=False, default=str))
        return 0
    for line in lines(args.kind, args.options):
        print(line)
    return 0
