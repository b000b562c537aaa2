"""Resolving the symbolic names a suite file may use into real paths.

* ``{shared}``: the real-data root, ``$HARNESS_SHARED_DATA`` or ``../shared/data``
  beside the repository;
* ``synthetic:<preset>[/sub/path]``: the synthetic world of a preset
  (``WorldSpec.<preset>()``, seed 0), generated into the cache on first use;
* model ``synthetic:<preset>/tiny-bert`` or ``.../tiny-decoder``: a tiny random model
  whose tokenizer covers that world's vocabulary (cached, deterministic).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC_PREFIX = "synthetic:"
TINY_MODEL_KINDS = {"tiny-bert": "bert", "tiny-decoder": "decoder"}


def shared_root() -> Path:
    return Path(os.environ.get("HARNESS_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def _world_spec(preset: str):
    from harness.synthetic import WorldSpec

    factory = getattr(WorldSpec, preset, None)
    if factory is None or not callable(factory):
        raise ConfigError(f"unknown synthetic world preset {preset!r} (WorldSpec has no {preset}() preset)")
    return factory()


def synthetic_world(preset: str) -> Path:
    from harness.synthetic import world_dir

    return world_dir(_world_spec(preset), 0)


def resolve_path(text: str) -> Path:
    """Resolve ``{shared}`` and ``synthetic:<preset>/...`` in a path string."""
    text = text.replace("{shared}", str(shared_root()))
    if text.startswith(SYNTHETIC_PREFIX):
        preset, _, sub = text[len(SYNTHETIC_PREFIX):].partition("/")
        return synthetic_world(preset) / sub if sub else synthetic_world(preset)
    return Path(text).expanduser()


def resolve_data_entry(entry: Any) -> Any:
    """A training-data entry: a path string (resolved; a synthetic world means its ``train/`` folder) or a dict."""
    if isinstance(entry, dict):
        out = dict(entry)
        if "path" in out:
            out["path"] = str(resolve_data_entry(out["path"]))
        return out
    text = str(entry)
    path = resolve_path(text)
    if text.startswith(SYNTHETIC_PREFIX) and "/" not in text[len(SYNTHETIC_PREFIX):]:
        path = path / "train"
    return str(path)


def resolve_model(name: str) -> str:
    """A model name; ``synthetic:<preset>/tiny-bert`` becomes the path of the generated tiny model."""
    if not name.startswith(SYNTHETIC_PREFIX):
        return name.replace("{shared}", str(shared_root()))
    preset, _, kind = name[len(SYNTHETIC_PREFIX):].partition("/")
    if kind not in TINY_MODEL_KINDS:
        raise ConfigError(f"synthetic model {name!r}: expected synthetic:<preset>/tiny-bert or .../tiny-decoder")
    from harness.synthetic import tiny_model_dir

    return str(tiny_model_dir(_world_spec(preset), kind=TINY_MODEL_KINDS[kind]))
