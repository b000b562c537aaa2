"""Paths built from data (suite names, entry ids, dataset names, cell keys) stay inside their root.

A name read from a YAML file or a dataset must never become ``/etc``, ``..`` or
``a/../../b`` when it is joined to a results root: a later write, or worse a
removal, would reach outside the folder the harness owns.
"""
from __future__ import annotations

import re
from pathlib import Path

from harness.errors import ConfigError

# One path component: letters, digits, '.', '_', '-', '+', '@', '=' (no separators, not '.' or '..').
_COMPONENT = re.compile(r"[A-Za-z0-9_@=+][A-Za-z0-9._@=+-]*")


def check_component(name: object, what: str) -> str:
    """``name`` if it is one safe path component, else a ConfigError naming ``what``."""
    if not isinstance(name, str) or not _COMPONENT.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"{what} {name!r} cannot be used as a folder name: use letters, digits, '.', '_', '-' "
                          "(no '/', no '..', not absolute)")
    return name


def child_of(root: str | Path, *names: str, what: str = "name") -> Path:
    """``root/names...``, each name a safe component, and the result provably inside ``root``."""
    root = Path(root)
    path = root.joinpath(*(check_component(n, what) for n in names))
    resolved_root = root.resolve()
    resolved = path.resolve()
    if resolved != resolved_root and resolved_root not in resolved.parents:
        raise ConfigError(f"{path} resolves outside {root} (through a link?); refusing to use it")
    return path
