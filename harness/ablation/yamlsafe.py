"""Reading suite YAML safely: bounded alias expansion, and the line of every key.

``yaml.safe_load`` shares aliased nodes, so a 250-byte "billion laughs" document
loads quickly, but anything that walks the result (validation, hashing, JSON) expands
it to billions of items.  :func:`load_yaml` composes the node graph first, counts the
nodes the document stands for *after* alias expansion (a memoised walk, cheap even for
a bomb) and refuses documents over ``MAX_EXPANDED_NODES`` or with recursive aliases
before anything is constructed.  It also returns the 1-based line of every mapping key
and list item, addressed by its key path (``("scales", "tiny", "train", "steps")``),
so validation errors can point at the line to fix; a key repeated in one mapping
(which YAML would silently overwrite) is an error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputError

# A suite file is a few thousand nodes at most (the tdro suite: ~1,500); this leaves room
# for generated suites while keeping a malicious document from expanding without bound.
MAX_EXPANDED_NODES = 100_000

KeyPath = tuple[Any, ...]
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path, text: str | None = None,
              columns: dict[KeyPath, int] | None = None) -> tuple[Any, dict[KeyPath, int]]:
    """``(data, {key path: line})`` of a YAML file; InputError (file and line) for invalid or oversized YAML.
    With ``columns``, the 1-based column of every key path is added there."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if text is None else text
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        size = expanded_size(node, path)
        if size > MAX_EXPANDED_NODES:
            raise InputError(path, f"YAML aliases expand to {size:,} nodes (limit {MAX_EXPANDED_NODES:,}); "
                                   "a suite file does not need that many: is it an alias bomb?",
                             node.start_mark.line + 1)
        lines: dict[KeyPath, int] = {}
        _record_lines(node, (), lines, path, columns)
        return loader.construct_document(node), lines
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, f"invalid YAML: {getattr(exc, 'problem', None) or exc}",
                         None if mark is None else mark.line + 1,
                         column=None if mark is None else mark.column + 1) from None
    finally:
        loader.dispose()


def expanded_size(node: yaml.Node, path: Path | None = None) -> int:
    """Nodes the document stands for once every alias is expanded (a shared node counts at each use)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise InputError(path, "recursive YAML alias (a node contains itself)", n.start_mark.line + 1)
        active.add(key)
        if isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in n.value)
        elif isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        else:
            total = 1
        active.discard(key)
        sizes[key] = total
        return total

    return size(node)


def _record_lines(node: yaml.Node, keypath: KeyPath, lines: dict[KeyPath, int], path: Path,
                  columns: dict[KeyPath, int] | None = None) -> None:
    lines.setdefault(keypath, node.start_mark.line + 1)
    if columns is not None:
        columns.setdefault(keypath, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = _scalar_key(key_node)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":
                raise InputError(path, f"key {key!r} appears twice in one mapping (first on line {seen[key]})", line)
            seen[key] = line
            lines[keypath + (key,)] = line
            if columns is not None:
                columns[keypath + (key,)] = key_node.start_mark.column + 1
            _record_lines(value_node, keypath + (key,), lines, path, columns)
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _record_lines(child, keypath + (i,), lines, path, columns)


def _scalar_key(node: yaml.ScalarNode) -> Any:
    """The key as safe_load constructs it (``1`` is an int, ``true`` a bool), for matching key paths."""
    try:
        return yaml.safe_load(yaml.serialize(node)) if node.tag != "tag:yaml.org,2002:str" else node.value
    except yaml.YAMLError:
        return node.value
