"""YAML loading that keeps line numbers and the exact text of every scalar.

Paper tables are transcribed as printed, so ``34.60`` and ``34.6`` must stay different (the
number of printed decimals sets the verify tolerance).  PyYAML's usual loaders turn both into
the same float, so this module composes the node tree and builds plain containers itself:
scalars stay strings (only ``null``/``~``/empty become ``None`` and ``true``/``false``
booleans), and every mapping and sequence remembers the line of each entry for error messages.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputError

_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"


class YDict(dict):
    """A mapping with ``line`` (1-based) and ``lines[key]`` (line of each key)."""

    line: int
    lines: dict[str, int]


class YList(list):
    """A sequence with ``line`` and ``lines[i]`` (line of each item)."""

    line: int
    lines: list[int]


def _build(node: yaml.Node, path: Path) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _NULL:
            return None
        if node.tag == _BOOL:
            return node.value.lower() in ("true", "yes", "on")
        return node.value
    if isinstance(node, yaml.SequenceNode):
        seq = YList(_build(item, path) for item in node.value)
        seq.line = line
        seq.lines = [item.start_mark.line + 1 for item in node.value]
        return seq
    if isinstance(node, yaml.MappingNode):
        out = YDict()
        out.line = line
        out.lines = {}
        for key_node, value_node in node.value:
            key = _build(key_node, path)
            key_line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise InputError(path, f"mapping keys must be strings, got {key!r}", key_line)
            if key in out:
                raise InputError(path, f"duplicate key {key!r}", key_line)
            out[key] = _build(value_node, path)
            out.lines[key] = key_line
        return out
    raise InputError(path, f"unsupported YAML node {type(node).__name__}", line)  # pragma: no cover


def load_yaml(path: str | Path) -> Any:
    """Load one YAML document from ``path`` with line numbers; syntax errors become InputError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(path, f"YAML syntax error: {exc.problem or exc.context}",
                         mark.line + 1 if mark else None) from exc
    except yaml.YAMLError as exc:
        raise InputError(path, f"YAML error: {exc}") from exc
    if node is None:
        raise InputError(path, "empty file")
    return _build(node, path)
