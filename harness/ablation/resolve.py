"""Resolving the symbolic names a suite file may use into real paths.

* ``{shared}``: the real-data root, ``$HARNESS_SHARED_DATA`` or ``../shared/data``
  beside the repository;
* ``{<name>}`` (any other lower-case name, e.g. ``{tdro_data}``): a user's data root,
  taken from the environment variable ``HARNESS_<NAME>`` (``HARNESS_TDRO_DATA``).
  An unset placeholder stays in the text, so a dry run can still print the plan;
  :func:`require_resolved` turns it into a clear error where the data is needed;
* ``synthetic:<preset>[/sub/path]``: the synthetic world of a preset
  (``WorldSpec.<preset>()``, seed 0), generated into the cache on first use;
* model ``synthetic:<preset>/tiny-bert`` or ``.../tiny-decoder``: a tiny random model
  whose tokenizer covers that world's vocabulary (cached, deterministic).

Run keys do not hold the real paths: ``harness.method.train_run_config`` writes a path under one of these
roots back as ``{shared}/...``, ``{cache}/...`` or ``{<name>}/...`` (``harness.method.portable``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.method.portable import shared_root  # the one definition of {shared}: run keys invert it
from harness.synthetic import world_dir
from harness.synthetic.refs import SYNTHETIC_PREFIX, TINY_MODEL_KINDS, resolve_synthetic_model  # noqa: F401
from harness.synthetic.refs import world_spec as _world_spec


def synthetic_world(preset: str) -> Path:
    return world_dir(_world_spec(preset), 0)


_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


def placeholder_variable(name: str) -> str:
    """The environment variable behind ``{name}``: ``tdro_data`` -> ``HARNESS_TDRO_DATA``."""
    return f"HARNESS_{name.upper()}"


def substitute(text: str) -> str:
    """``{shared}`` and every set ``{<name>}`` placeholder replaced; unset ones are left in place."""
    def repl(match: re.Match) -> str:
        name = match.group(1)
        if name == "shared":
            return str(shared_root())
        value = os.environ.get(placeholder_variable(name))
        return value if value else match.group(0)

    return _PLACEHOLDER.sub(repl, text)


def unresolved(text: Any) -> list[str]:
    """Placeholders still in a (resolved) string or data-entry dict, e.g. ``["tdro_data"]``."""
    if isinstance(text, dict):
        return [n for v in text.values() for n in unresolved(v)]
    return _PLACEHOLDER.findall(str(text)) if isinstance(text, (str, Path)) else []


def require_resolved(values: Any, what: str) -> None:
    """Raise ConfigError naming the environment variable to set when a placeholder is unset."""
    items = values if isinstance(values, (list, tuple)) else [values]
    for value in items:
        names = unresolved(value)
        if names:
            variable = placeholder_variable(names[0])
            raise ConfigError(f"{what} {value!s} uses the placeholder {{{names[0]}}}: set {variable} to the "
                              f"folder it stands for (e.g. export {variable}=/path/to/data)")


def resolve_path(text: str) -> Path:
    """Resolve ``{shared}``, set ``{<name>}`` placeholders and ``synthetic:<preset>/...`` in a path string."""
    text = substitute(text)
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
        return substitute(name)
    return resolve_synthetic_model(name)


def resolve_option_value(value: Any) -> Any:
    """Method options as a suite file writes them, with paths resolved: every string holding a
    placeholder or a ``synthetic:`` reference (in lists and mappings too) becomes a real path; a
    ``synthetic:<preset>/tiny-bert``-style name becomes the generated model's folder.  Other values
    are returned unchanged.  (Methods key corpora and models by content, not by these paths.)"""
    if isinstance(value, dict):
        return {k: resolve_option_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_option_value(v) for v in value]
    if not isinstance(value, str) or not (_PLACEHOLDER.search(value) or value.startswith(SYNTHETIC_PREFIX)):
        return value
    if value.startswith(SYNTHETIC_PREFIX) and value.rsplit("/", 1)[-1] in TINY_MODEL_KINDS:
        return resolve_model(value)
    return str(resolve_path(value))
