"""``harness list methods|suites|metrics|models``: what the registries hold, one line each.

Built-ins and plug-ins installed through entry points (``retrieval_harness.methods``,
``retrieval_harness.suites``, ``retrieval_harness.metrics``, ``retrieval_harness.models``) are listed
alike.  ``models`` lists the shipped model aliases (``minilm``, ...) and the known released checkpoints
(:mod:`harness.encoders.known`): kind, the settings each is encoded with, where it loads from and the
source of every setting (a setting no source states shows the harness default it falls back to).
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from harness.recipe import describe_options, option_infos
from harness.registry import Registry

if TYPE_CHECKING:
    from harness.encoders.refs import ModelDefaults

KINDS = ("methods", "suites", "metrics", "models")
# The encoding settings a model listing shows, in this order.
MODEL_SETTINGS = ("pooling", "normalize", "query_prompt", "doc_prompt", "query_max_length", "doc_max_length",
                  "append_eos", "similarity", "instruction")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list the registered methods, benchmark suites, metrics or known models",
                       description="List what the registries hold (built-ins and installed plug-ins), one line "
                                   "each with its description; 'models' lists the model aliases and the known "
                                   "released checkpoints with their settings, where they load from and the source "
                                   "of each setting.")
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
    if kind == "models":
        return model_lines()
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
    the declared options, each with type, default, choices, unit, bounds, source and doc) when asked;
    ``models``: :func:`model_records`."""
    if kind == "models":
        return model_records()
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


# ---------------------------------------------------------------------------- models
def model_records() -> list[dict[str, object]]:
    """One record per shipped alias and per known checkpoint: ``name``, ``description``, ``kind``, ``origin``
    (``alias`` or ``known``), ``loads_from``, ``hub_id``, ``cached`` (a known checkpoint: whether the local hub
    cache holds it, so it loads offline), ``aliases``, ``settings`` (each ``{value, source}``: the value used
    at evaluation unless the suite, protocol card or CLI sets it), ``papers`` and ``notes``."""
    # Imported here: the other listings must not load the encoder modules (start-up speed).
    from harness.encoders.known import known_models
    from harness.encoders.refs import ALIAS_ORIGINS, ALIASES, hub_snapshot, known_defaults

    out: list[dict[str, object]] = []
    for alias, (_, defaults) in ALIASES.items():
        settings = _defaults_settings(defaults)
        source = "harness alias table (harness/encoders/refs.py)"
        out.append({"name": alias, "description": "model alias", "kind": _alias_kind(defaults),
                    "origin": "alias", "loads_from": ALIAS_ORIGINS[alias], "hub_id": None, "cached": None,
                    "aliases": [],
                    "settings": {key: {"value": value, "source": source} for key, value in settings.items()},
                    "papers": [], "notes": ""})
    for model in known_models():
        settings = _defaults_settings(known_defaults(model))
        settings["similarity"] = model.similarity or ("cos" if settings["normalize"] else "dot")
        settings["instruction"] = model.instruction
        stated = {"doc_prompt": "document_prompt"}
        cached = hub_snapshot(model.hub_id) is not None
        where = "in the local cache" if cached else "not cached: downloaded on first use, unless offline"
        out.append({"name": model.hub_id, "description": model.name or model.hub_id, "kind": model.kind,
                    "origin": "known", "loads_from": f"hub id {model.hub_id} ({where})", "hub_id": model.hub_id,
                    "cached": cached, "aliases": list(model.aliases),
                    "settings": {key: {"value": value,
                                       "source": model.source(stated.get(key, key)) or _UNSTATED}
                                 for key, value in settings.items()},
                    "papers": list(model.papers), "notes": model.notes})
    return out


_UNSTATED = "not stated by a source: harness default"


def _defaults_settings(defaults: ModelDefaults) -> dict[str, object]:
    return {"pooling": defaults.pooling, "normalize": defaults.normalize, "query_prompt": defaults.query_prompt,
            "doc_prompt": defaults.doc_prompt,
            "query_max_length": defaults.query_max_length or defaults.max_length,
            "doc_max_length": defaults.doc_max_length or defaults.max_length, "append_eos": defaults.append_eos,
            "similarity": "dot" if defaults.representation == "sparse" or not defaults.normalize else "cos",
            "instruction": None}


def _alias_kind(defaults: ModelDefaults) -> str:
    if defaults.representation == "sparse":
        return "sparse"
    return "decoder" if defaults.pooling == "last" else "dense"


def model_lines() -> list[str]:
    """``harness list models``: per model a header line, its settings, where it loads from, then (known
    checkpoints) each setting's source, the paper rows it appears in and its notes."""
    out: list[str] = []
    for record in model_records():
        aliases = [str(a) for a in _as_list(record["aliases"])]
        also = f" (aliases: {', '.join(aliases)})" if aliases else ""
        out.append(f"{record['name']}  [{record['kind']}]  {record['description']}{also}")
        settings = record["settings"]
        assert isinstance(settings, dict)
        out.append("    " + "  ".join(f"{key}={_show(settings[key]['value'])}" for key in MODEL_SETTINGS
                                      if settings[key]["value"] is not None))
        out.append(f"    loads from: {record['loads_from']}")
        if record["origin"] != "known":
            continue
        out.append("    sources:")
        out.extend(f"      {key}: {settings[key]['source']}" for key in MODEL_SETTINGS)
        papers = [str(p) for p in _as_list(record["papers"])]
        if papers:
            out.append(f"    papers: {', '.join(papers)}")
        if record["notes"]:
            out.append(f"    notes: {record['notes']}")
    return out


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _show(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def run(args: argparse.Namespace) -> int:
    if args.json:
        import json

        print(json.dumps(records(args.kind, args.options), indent=2, ensure_ascii=False, default=str))
        return 0
    for line in lines(args.kind, args.options):
        print(line)
    return 0
