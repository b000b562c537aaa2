"""Encoder settings: pooling, normalisation, prompts, max lengths, EOS handling.

Settings come from three layers, highest first: explicit keyword arguments, the
``harness_encoder.json`` file that the trainer writes next to a checkpoint, and the
defaults of the model (alias table, known released checkpoint or sentence-transformers folder,
see :func:`harness.encoders.refs.resolve_model`).  Resolving them in one place keeps
the cache key and the manifest honest: they record the values actually used.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.encoders.pooling import POOLING_MODES
from harness.encoders.refs import ModelDefaults
from harness.errors import ConfigError, InputError
from harness.io import atomic_write_json

ENCODER_CONFIG_FILE = "harness_encoder.json"
# The term aggregations of sparse (SPLADE) models (harness.encoders.heads.AGGREGATIONS): a saved folder whose
# pooling is one of them holds a term-weight model, evaluated by the sparse path (harness.encoders.sparse).
SPARSE_POOLING_MODES = ("max", "sum")


@dataclass(frozen=True)
class EncoderSettings:
    """Every option of a dense HF encoder that changes its vectors (besides weights and dtype)."""

    pooling: str = "cls"
    normalize: bool = False
    query_prompt: str = ""
    doc_prompt: str = ""
    query_max_length: int = 512
    doc_max_length: int = 512
    append_eos: bool = False

    def __post_init__(self) -> None:
        if self.pooling not in POOLING_MODES + SPARSE_POOLING_MODES:
            raise ConfigError(f"unknown pooling {self.pooling!r}; choose one of "
                              f"{', '.join(POOLING_MODES + SPARSE_POOLING_MODES)}")
        for name in ("query_max_length", "doc_max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ConfigError(f"{name} must be an integer >= 2, got {value!r}")
        for name in ("normalize", "append_eos"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("query_prompt", "doc_prompt"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name} must be a string, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SETTING_NAMES = tuple(EncoderSettings.__dataclass_fields__)


def read_encoder_config(folder: str | Path) -> dict[str, Any]:
    """Read ``<folder>/harness_encoder.json`` if present (else ``{}``), validating its keys."""
    path = Path(folder) / ENCODER_CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON ({exc.msg})", exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(SETTING_NAMES))
    if unknown:
        raise InputError(path, f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(SETTING_NAMES)}")
    try:
        EncoderSettings(**{**_defaults_dict(ModelDefaults()), **data})
    except ConfigError as exc:
        raise InputError(path, str(exc)) from None
    return data


def write_encoder_config(folder: str | Path, settings: EncoderSettings) -> Path:
    """Write ``harness_encoder.json`` (atomically) so that a checkpoint encodes as it was trained."""
    path = Path(folder) / ENCODER_CONFIG_FILE
    atomic_write_json(path, settings.to_dict())
    return path


def _defaults_dict(defaults: ModelDefaults) -> dict[str, Any]:
    return {
        "pooling": defaults.pooling,
        "normalize": defaults.normalize,
        # A known checkpoint's prompts and per-side lengths (harness.encoders.known); else one length.
        "query_prompt": defaults.query_prompt,
        "doc_prompt": defaults.doc_prompt,
        "query_max_length": defaults.query_max_length or defaults.max_length,
        "doc_max_length": defaults.doc_max_length or defaults.max_length,
        "append_eos": defaults.append_eos,
    }


def resolve_settings(defaults: ModelDefaults, saved: dict[str, Any], overrides: dict[str, Any]) -> EncoderSettings:
    """Merge model defaults < saved ``harness_encoder.json`` < explicit overrides (``None`` = not given)."""
    merged: dict[str, Any] = _defaults_dict(defaults)
    merged.update(saved)
    merged.update({k: v for k, v in overrides.items() if v is not None})
    return EncoderSettings(**merged)
