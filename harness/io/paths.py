"""Paths built from data (suite names, entry ids, dataset names, cell keys) stay inside their root.

A name read from a YAML file or a dataset must never become ``/etc``, ``..`` or
``a/../../b`` when it is joined to a results root: a later write, or worse a
removal, would reach outside the folder the harness owns.

:func:`check_component` is the one place that decides whether a name may become one
path component; every name from user input (suite names, variant, benchmark, scale
and layout ids, generated cell ids, expected-score ids, training-source names) goes
through it, and :func:`child_of` joins such names to a root and proves the result
stays inside it.  A safe component is

* ASCII letters, digits and ``. _ - + @ =`` only: no ``/`` or ``\\``, no NUL or other
  control character, no space, no non-ASCII character (so no Unicode look-alike of
  ``.`` or ``/`` such as U+2024 ONE DOT LEADER or U+FF0E FULLWIDTH FULL STOP);
* not empty, not ``.`` or ``..``, not starting with ``.`` (hidden) or ``-`` (read as an
  option by command-line tools);
* at most :data:`MAX_COMPONENT_CHARS` characters (file systems allow 255 bytes; the
  cap leaves room for the suffixes the harness appends, ``@seed=3``, ``.tmp-...``).
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from harness.errors import ConfigError

MAX_COMPONENT_CHARS = 128
# One path component: letters, digits, '.', '_', '-', '+', '@', '=' (no separators; no leading '.' or '-').
_COMPONENT = re.compile(r"[A-Za-z0-9_@=+][A-Za-z0-9._@=+-]*")
_ALLOWED = "letters, digits, '.', '_', '-', '+', '@', '=' (ASCII), not starting with '.' or '-'"


def check_component(name: object, what: str) -> str:
    """``name`` if it is one safe path component (see the module docstring), else a ConfigError naming
    ``what`` and the reason.  The only judge of that question in the harness: extend it, do not copy it."""
    reason = None
    if not isinstance(name, str):
        reason = f"it is not a string but {type(name).__name__}"
    elif not name:
        reason = "it is empty"
    elif name in (".", ".."):
        reason = "it names a folder itself or its parent"
    elif "/" in name or "\\" in name:
        reason = "it contains a path separator" + (" (an absolute path)" if name[0] in "/\\" else "")
    elif any(ord(c) > 127 for c in name):
        c = next(c for c in name if ord(c) > 127)
        reason = f"it contains the non-ASCII character U+{ord(c):04X} {unicodedata.name(c, '(unnamed)')}"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        c = next(c for c in name if ord(c) < 32 or ord(c) == 127)
        reason = f"it contains the control character {c!r}"
    elif len(name) > MAX_COMPONENT_CHARS:
        reason = f"it is {len(name)} characters long (at most {MAX_COMPONENT_CHARS})"
    elif name[0] in ".-":
        reason = f"it starts with {name[0]!r} (a hidden file or a command-line option)"
    elif not _COMPONENT.fullmatch(name):
        c = next(c for c in name if not _COMPONENT.fullmatch("a" + c))
        reason = f"it contains {c!r}"
    if reason is not None:
        raise ConfigError(f"{what} {_shown(name)} cannot be used as a folder name: {reason}; "
                          f"use {_ALLOWED}")
    assert isinstance(name, str)
    return name


def _shown(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def child_of(root: str | Path, *names: str, what: str = "name") -> Path:
    """``root/names...``, each name a safe component, and the result provably inside ``root``."""
    root = Path(root)
    path = root.joinpath(*(check_component(n, what) for n in names))
    resolved_root = root.resolve()
    resolved = path.resolve()
    if resolved != resolved_root and resolved_root not in resolved.parents:
        raise ConfigError(f"{path} resolves outside {root} (through a link?); refusing to use it")
    return path
