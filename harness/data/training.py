"""Training rows: one ``{"query": str, "pos": [str, ...], "neg": [str, ...]}`` per jsonl line.

``pos`` must hold at least one non-empty passage; ``neg`` may be empty or absent
(negatives can be mined later).  Optional extra keys are kept in ``meta``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.data.beir import iter_jsonl
from harness.errors import InputError
from harness.io.readers import check_input_file


@dataclass
class TrainingRow:
    query: str
    pos: list[str]
    neg: list[str]
    meta: dict = field(default_factory=dict)


def _missing_field(key: str, obj: dict, columns: Mapping[str, str] | None) -> str:
    """A missing row field, the fields the line has, and the mapping that would supply it."""
    found = ", ".join(repr(k) for k in obj) or "none"
    mapped = f" (after --map {format_column_map(columns)})" if columns else ""
    return (f"missing field {key!r}; fields found{mapped}: {found}; rows need 'query', 'pos' and optionally "
            "'neg': map the file's own names with --map (a data entry's 'map'), "
            "e.g. --map question=query,positive=pos")


def format_column_map(columns: Mapping[str, str]) -> str:
    """``{"question": "query"}`` as ``question=query`` (the --map syntax)."""
    return ",".join(f"{k}={v}" for k, v in columns.items())


def _passage_list(obj: dict, key: str, path, line_no: int, required: bool) -> list[str]:
    if key not in obj:
        if required:
            raise InputError(path, f"missing field {key!r}", line_no)
        return []
    value = obj[key]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise InputError(path, f"field {key!r} must be a list of strings, got {type(value).__name__}", line_no)
    for j, item in enumerate(value):
        if not isinstance(item, str):
            raise InputError(path, f"{key}[{j}] must be a string, got {type(item).__name__}", line_no)
        if not item.strip():
            raise InputError(path, f"{key}[{j}] is empty", line_no)
    if required and not value:
        raise InputError(path, f"field {key!r} is an empty list (need at least one positive)", line_no)
    return list(value)


FIELDS = ("query", "pos", "neg")


def read_training_rows(path: str | Path, columns: Mapping[str, str] | None = None) -> list[TrainingRow]:
    """Read and validate a training jsonl file (``.gz`` allowed).

    ``columns`` renames a file's own keys to the row fields (``{"question": "query", "positive": "pos"}``,
    what ``harness train --map`` and a data entry's ``map`` give)."""
    path = check_input_file(path, "training file")
    rows: list[TrainingRow] = []
    for line_no, obj in iter_jsonl(path, "training file"):
        if columns:
            obj = {columns.get(k, k): v for k, v in obj.items()}
        for key in ("query", "pos"):
            if key not in obj:
                raise InputError(path, _missing_field(key, obj, columns), line_no)
        query = obj["query"]
        if not isinstance(query, str):
            raise InputError(path, f"field 'query' must be a string, got {type(query).__name__}", line_no)
        if not query.strip():
            raise InputError(path, "field 'query' is empty", line_no)
        pos = _passage_list(obj, "pos", path, line_no, required=True)
        neg = _passage_list(obj, "neg", path, line_no, required=False)
        meta = {k: v for k, v in obj.items() if k not in ("query", "pos", "neg")}
        meta["line"] = line_no
        rows.append(TrainingRow(query, pos, neg, meta))
    if not rows:
        raise InputError(path, "training file contains no rows")
    return rows
