"""Known released checkpoints: a public model's own encoding settings, each with its source.

A released retriever only scores what its authors report when it is encoded as they encoded it:
multilingual-E5 mean-pools and needs ``"query: "``/``"passage: "`` prefixes, BGE-M3 takes the
normalised [CLS] vector, E5-Mistral pools the last token after an appended EOS, SPLADE++ max-pools
vocabulary weights.  A hub id alone says none of this (and the harness default, CLS without
normalisation, is wrong for most of them), so :class:`KnownModel` records, per hub id, the model kind,
pooling, normalisation, prompts, max lengths and EOS handling, and *where each value comes from*
(model card, official code, paper section).  A setting no source states stays ``None``: the model
then gets the harness default for it, and the listing says so.

The entries are data in a plug-in package (``suites/models/known_models.yaml``), registered into
:data:`KNOWN_MODELS` when the registry is first used; the engine finds that package by module name
(like methods and benchmark suites, :mod:`harness.registry`) and never imports it statically.
Installed packages add entries through the entry-point group ``retrieval_harness.models`` (a module
that calls :func:`register_known_models`).  :func:`harness.encoders.refs.resolve_model` turns a known
hub id or alias into these settings; an explicit setting (suite file, CLI, protocol card) still wins.

This module imports nothing of ``harness.encoders`` (``refs`` imports it), so it stays light.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, InputError
from harness.registry import Registry

KINDS = ("dense", "sparse", "decoder")
SIMILARITIES = ("cos", "dot")
DENSE_POOLING = ("cls", "mean", "last")      # harness.encoders.pooling.POOLING_MODES (kept torch-free here)
SPARSE_POOLING = ("max", "sum")              # harness.encoders.settings.SPARSE_POOLING_MODES
# The settings a source must be given for when they are set (None: unknown, the harness default applies).
SETTINGS = ("pooling", "normalize", "query_prompt", "document_prompt", "query_max_length", "doc_max_length",
            "append_eos", "similarity", "instruction", "echo")
SCHEMA = 1
_PAPER_ROW = re.compile(r"^\d{3}/table\d+:.+$")


@dataclass(frozen=True)
class KnownModel:
    """One released checkpoint: its hub id, aliases, kind and encoding settings, each with a source.

    ``instruction`` is a task-instruction template (``{task}`` stands for the task description) of an
    instruction-following model: it is shown, never applied, because the task text differs per dataset;
    a suite passes the filled-in text as ``query_prompt``.  ``papers`` names the transcribed table rows
    the checkpoint appears in (``<paper>/table<N>:<row>``).  ``sources`` maps each set setting to where
    it comes from; ``notes`` says what is left at the harness default and why.
    """

    hub_id: str
    kind: str
    name: str = ""
    aliases: tuple[str, ...] = ()
    pooling: str | None = None
    normalize: bool | None = None
    query_prompt: str | None = None
    document_prompt: str | None = None
    query_max_length: int | None = None
    doc_max_length: int | None = None
    append_eos: bool | None = None
    similarity: str | None = None
    instruction: str | None = None
    # True: a decoder read as echo embeddings (Springer et al. 2024): each text twice in an echo template,
    # hidden states pooled (mean or last) over the second occurrence and the template's EOS
    # (harness.encoders.dense_echo).  Dense models only.
    echo: bool | None = None
    papers: tuple[str, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()
    notes: str = ""
    origin: str = field(default="", compare=False)   # the data file (and line) that defined it

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            where = f" ({self.origin})" if self.origin else ""
            raise ConfigError(f"known model {self.hub_id!r}{where}: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Everything wrong with this entry (empty when it is valid)."""
        out: list[str] = []
        if not isinstance(self.hub_id, str) or not self.hub_id.strip() or ":" in self.hub_id \
                or self.hub_id.count("/") > 1 or self.hub_id.startswith(("/", ".", "~")):
            out.append("hub_id must be 'org/name' (or 'name'), without ':' or a leading '/', '.' or '~'")
        if self.kind not in KINDS:
            out.append(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        allowed = SPARSE_POOLING if self.kind == "sparse" else DENSE_POOLING
        if self.pooling is not None and self.pooling not in allowed:
            out.append(f"pooling of a {self.kind} model must be one of {', '.join(allowed)}, got {self.pooling!r}")
        if self.echo is not None and self.echo is not False:
            if self.echo is not True:
                out.append(f"echo must be true or false, got {self.echo!r}")
            elif self.kind != "dense" or self.pooling not in ("mean", "last"):
                out.append("echo: true is a dense model pooled over the second occurrence: kind 'dense' with "
                           f"pooling 'mean' or 'last', got kind {self.kind!r}, pooling {self.pooling!r}")
            elif self.append_eos:
                out.append("echo: true takes its EOS from the echo template ('{</s>}'), not append_eos")
        for name in ("normalize", "append_eos"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                out.append(f"{name} must be true or false, got {value!r}")
        for name in ("name", "notes"):
            if not isinstance(getattr(self, name), str):
                out.append(f"{name} must be a text, got {getattr(self, name)!r}")
        for name in ("query_prompt", "document_prompt", "instruction"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                out.append(f"{name} must be a string, got {value!r}")
        if self.instruction is not None and isinstance(self.instruction, str) and "{task}" not in self.instruction:
            out.append("instruction must hold '{task}' (where the task description goes)")
        for name in ("query_max_length", "doc_max_length"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
                out.append(f"{name} must be an integer >= 2, got {value!r}")
        if self.similarity is not None and self.similarity not in SIMILARITIES:
            out.append(f"similarity must be one of {', '.join(SIMILARITIES)}, got {self.similarity!r}")
        # The harness scores by dot product and calls it cosine exactly when vectors are L2-normalised.
        if self.similarity == "cos" and self.normalize is False:
            out.append("similarity 'cos' needs normalize: true (cosine is the dot product of normalised vectors)")
        if self.kind == "sparse" and (self.normalize or self.similarity == "cos"):
            out.append("a sparse model scores by dot product of term weights: no normalize, similarity 'dot'")
        if self.kind == "decoder" and self.pooling != "last":   # the harness default (CLS) means nothing here
            out.append(f"a decoder entry states its pooling, the last token ('last'), got {self.pooling!r}")
        seen: set[str] = set()
        for alias in self.aliases:
            if not isinstance(alias, str) or not alias.strip() or ":" in alias or "/" in alias:
                out.append(f"alias {alias!r} must be a non-empty name without ':' or '/'")
            elif alias.lower() in seen:
                out.append(f"alias {alias!r} is listed twice")
            seen.add(str(alias).lower())
        for ref in self.papers:
            if not isinstance(ref, str) or not _PAPER_ROW.match(ref):
                out.append(f"paper row {ref!r} must read '<paper>/table<N>:<row>' (e.g. '004/table1:me5-large')")
        named = dict(self.sources)
        for key, text in self.sources:
            if key not in SETTINGS:
                out.append(f"source for unknown setting {key!r} (settings: {', '.join(SETTINGS)})")
            elif not isinstance(text, str) or not text.strip():
                out.append(f"source of {key!r} must be a non-empty text")
        missing = [name for name in SETTINGS if getattr(self, name) is not None and name not in named]
        if missing:
            out.append(f"no source for {', '.join(missing)} (every stated setting names where it comes from; "
                       "leave a setting out when no source states it)")
        return out

    def source(self, setting: str) -> str | None:
        """Where ``setting`` comes from, or None (the setting is unknown: the harness default applies)."""
        return dict(self.sources).get(setting)

    def names(self) -> tuple[str, ...]:
        """The hub id and every alias: the names this entry answers to."""
        return (self.hub_id, *self.aliases)


def _check_known(obj: Any) -> bool:
    return isinstance(obj, KnownModel)


# Every name (hub id and aliases, lower-cased) -> its entry; kept by the registry's on_register hook, so
# entries from data files and from entry points alike are indexed and checked for clashes.
_BY_NAME: dict[str, KnownModel] = {}


def _index(_: str, model: KnownModel) -> None:
    for name in model.names():
        other = _BY_NAME.get(name.lower())
        if other is not None and other.hub_id != model.hub_id:
            raise ConfigError(f"known model {model.hub_id!r} ({model.origin or 'no file'}): the name {name!r} "
                              f"already names {other.hub_id!r} ({other.origin or 'no file'})")
    for name in model.names():
        _BY_NAME[name.lower()] = model


# Keyed by hub id.  Built-ins: the plug-in package ``suites.models`` (a string: no static import).
KNOWN_MODELS: Registry[KnownModel] = Registry("known model", builtins=("suites.models",),
                                              group="retrieval_harness.models", check=_check_known,
                                              on_register=_index)
_scanned = False


def register_known_model(model: KnownModel) -> KnownModel:
    """Add ``model``; an alias or hub id that another entry already answers to is refused, naming both."""
    return KNOWN_MODELS.register(model.hub_id, model, description=model.name or model.hub_id)


def find_known_model(name: str) -> KnownModel | None:
    """The known checkpoint ``name`` (a hub id or alias, any case) names, or None.

    Model resolution asks this for every hub id, known or not, so the entry points are scanned once per
    process here (a scan costs tens of milliseconds); :func:`known_models` rescans them."""
    global _scanned
    if not _scanned:
        KNOWN_MODELS.discover()
        _scanned = True
    return _BY_NAME.get(name.strip().lower())


def known_models() -> list[KnownModel]:
    """Every registered known checkpoint, sorted by hub id."""
    return sorted((KNOWN_MODELS.get(name) for name in KNOWN_MODELS.names()), key=lambda m: m.hub_id.lower())


# ---------------------------------------------------------------------------- the data file
_LIST_FIELDS = ("aliases", "papers")
_FIELDS = tuple(f.name for f in fields(KnownModel) if f.name != "origin")


def load_known_models(path: str | Path) -> list[KnownModel]:
    """Read a known-models YAML file (``schema: 1`` and a ``models:`` list); errors name file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read the known-models file ({exc.strerror})") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, f"malformed YAML ({getattr(exc, 'problem', exc)})",
                         mark.line + 1 if mark is not None else None) from None
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise InputError(path, "expected a mapping with 'schema' and 'models'", 1)
    if data.get("schema") != SCHEMA:
        raise InputError(path, f"'schema' must be {SCHEMA}, got {data.get('schema')!r}", 1)
    unknown = sorted(set(data) - {"schema", "models"})
    if unknown:
        raise InputError(path, f"unknown top-level key(s) {', '.join(map(repr, unknown))}; allowed: schema, models")
    models_node = next((v for k, v in root.value if k.value == "models"), None)
    entries = data.get("models")
    if not isinstance(entries, list) or not isinstance(models_node, yaml.SequenceNode):
        raise InputError(path, "'models' must be a list of entries", models_node.start_mark.line + 1
                         if models_node is not None else 1)
    out = []
    for entry, node in zip(entries, models_node.value):
        out.append(_entry(entry, path, node.start_mark.line + 1))
    return out


def _entry(entry: Any, path: Path, line: int) -> KnownModel:
    if not isinstance(entry, dict):
        raise InputError(path, f"a models entry must be a mapping, got {type(entry).__name__}", line)
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise InputError(path, f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(_FIELDS)}",
                         line)
    for key in ("hub_id", "kind"):
        if key not in entry:
            raise InputError(path, f"entry without {key!r}", line)
    values = dict(entry)
    for key in _LIST_FIELDS:
        value = values.get(key, [])
        if isinstance(value, str) or not isinstance(value, list):
            raise InputError(path, f"{key!r} must be a list, got {value!r}", line)
        values[key] = tuple(value)
    sources = values.get("sources", {})
    if not isinstance(sources, Mapping):
        raise InputError(path, f"'sources' must map a setting to where it comes from, got {sources!r}", line)
    values["sources"] = tuple((str(k), v) for k, v in sources.items())
    try:
        return KnownModel(**values, origin=f"{path.name}:{line}")
    except ConfigError as exc:
        raise InputError(path, str(exc), line) from None
    except TypeError as exc:      # a wrongly typed field the dataclass cannot even hold
        raise InputError(path, str(exc), line) from None


def register_known_models(path: str | Path) -> list[KnownModel]:
    """Load ``path`` and register every entry (how a plug-in package ships its known models)."""
    models = load_known_models(path)
    for model in models:
        try:
            register_known_model(model)
        except ConfigError as exc:
            raise InputError(path, str(exc), _line(model)) from None
    return models


def _line(model: KnownModel) -> int | None:
    _, _, line = model.origin.rpartition(":")
    return int(line) if line.isdigit() else None
