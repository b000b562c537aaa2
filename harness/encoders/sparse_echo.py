"""Sparse term weights from a decoder's LM head, read through echo templates (Echo-Mistral-SPLADE):
the settings and checks of :class:`harness.encoders.sparse.EchoSparseEncoder`.

:class:`~harness.encoders.sparse.EchoSparseEncoder` loads a model with ``AutoModelForCausalLM`` (its own LM
head: untied in Mistral/Llama, tied in SmolLM2), fills each text into the query or document template of
:mod:`harness.encoders.echo_inputs` (echo: the text twice; plain: once), and pools
``log(1 + relu(logit))`` over the pooled positions only (the second occurrence; ``include_eos`` adds
the final EOS) by ``max`` or ``sum``, the SPLADE pooling the trainer's head uses.  Vocabulary logits
are computed only from the first pooled column of a batch on (``logits_to_keep``).

Settings come from, lowest first: the alias defaults (``smollm2-echo-splade`` / ``smollm2-plain-splade``),
the ``harness_echo.json`` a trained folder holds (:func:`write_echo_settings`: echo, include_eos,
templates, the base model of a LoRA adapter), and explicit arguments.  The templates and
``include_eos`` are part of :meth:`identity`, hence of the sparse cache key.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.encoders.echo_inputs import parse_template
from harness.encoders.refs import resolve_model
from harness.errors import ConfigError, InputError
from harness.io import atomic_write_json
from harness.io.readers import read_json_object

ECHO_SETTINGS_FILE = "harness_echo.json"


@dataclass(frozen=True)
class EchoSettings:
    """How a decoder LM reads texts for sparse term weights (written next to a trained model)."""

    echo: bool = True
    include_eos: bool = False
    query_template: str | None = None      # None: the mode's default (instructed when a query prompt is given)
    doc_template: str | None = None
    base_model: str | None = None          # a LoRA adapter folder: the model it adapts (alias, path or hub id)
    query_prompt: str | None = None        # the %%prompt%% the model was trained with (a card's prompt wins)
    top_k: int | None = None               # prune each text to its top_k weights unless told otherwise

    def __post_init__(self) -> None:
        for name in ("echo", "include_eos"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("query_template", "doc_template"):
            value = getattr(self, name)
            if value is not None:
                parse_template(value)
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or self.top_k < 1):
            raise ConfigError(f"top_k must be a positive integer or null, got {self.top_k!r}")
        if self.query_prompt is not None and not isinstance(self.query_prompt, str):
            raise ConfigError(f"query_prompt must be a string, got {self.query_prompt!r}")
        if self.base_model is not None and (not isinstance(self.base_model, str) or not self.base_model):
            raise ConfigError(f"base_model must be a model name, got {self.base_model!r}")


def write_echo_settings(folder: str | Path, settings: EchoSettings) -> Path:
    """Write ``harness_echo.json`` (atomically): the folder then evaluates as an echo/plain sparse model."""
    path = Path(folder) / ECHO_SETTINGS_FILE
    atomic_write_json(path, asdict(settings))
    return path


def read_echo_settings(folder: str | Path) -> dict[str, Any]:
    """``harness_echo.json`` of ``folder`` (``{}`` without one), validated."""
    path = Path(folder) / ECHO_SETTINGS_FILE
    if not path.is_file():
        return {}
    data = read_json_object(path, "echo settings")
    known = tuple(EchoSettings.__dataclass_fields__)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise InputError(path, f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(known)}")
    try:
        EchoSettings(**data)
    except ConfigError as exc:
        raise InputError(path, str(exc)) from None
    return data


def is_echo_model(name: str) -> bool:
    """A decoder read as sparse term weights: an alias with an echo default, or a folder with ``harness_echo.json``."""
    try:
        path, defaults = resolve_model(name)
    except ConfigError:
        return False
    return defaults.echo is not None or (Path(path) / ECHO_SETTINGS_FILE).is_file()


def check_causal_lm(name: str, owner: str = "echo sparse encoder") -> None:
    """Refuse a model folder whose saved architecture has no causal-LM head (a ``LlamaModel``, a BERT encoder):
    ``AutoModelForCausalLM`` would add a *random* head (or fail), and its term weights would mean nothing."""
    path, _ = resolve_model(name)
    folder = Path(path)
    config = folder / "config.json"
    if not config.is_file():
        if (folder / "adapter_config.json").is_file():
            return                      # checked through the base model when it is loaded
        return                          # a hub id: transformers refuses architectures without an LM head itself
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    except (json.JSONDecodeError, AttributeError):
        raise InputError(config, "not a JSON object of a model config; fix or re-save the model") from None
    if architectures and not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in architectures):
        raise ConfigError(f"{owner}: model {name!r} is a {', '.join(architectures)} without a causal-LM head; its "
                          "vocabulary logits come from a decoder's own LM head (an AutoModelForCausalLM checkpoint "
                          "such as MistralForCausalLM or LlamaForCausalLM, e.g. smollm2)")


def first_given(*values: Any) -> Any:
    """The first value that is not None (None when all are)."""
    return next((v for v in values if v is not None), None)


__all__ = ["ECHO_SETTINGS_FILE", "EchoSettings", "write_echo_settings", "read_echo_settings", "is_echo_model",
           "check_causal_lm", "first_given"]
