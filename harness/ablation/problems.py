"""Collecting every problem of a suite plan, to report them all at once.

Fixing a suite one error per run (each after minutes of data loading) is slow; the
parser and the plan validator add each problem here with its key path
(``scales.tiny.train.steps``) and, when the file was read by
:func:`harness.ablation.yamlsafe.load_yaml`, its line, then raise one
:class:`SuitePlanError` listing them all.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, InputError

KeyPath = tuple[Any, ...]


def format_keypath(keypath: Iterable[Any]) -> str:
    """``("variants", 1, "train")`` -> ``variants[1].train``."""
    out = ""
    for part in keypath:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class Problem:
    keypath: KeyPath
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = format_keypath(self.keypath)
        prefix = "" if self.line is None else \
            f"line {self.line}, column {self.column}: " if self.column is not None else f"line {self.line}: "
        return f"{prefix}{where + ': ' if where else ''}{self.message}"


class SuitePlanError(InputError, ConfigError):
    """Every problem found in a suite file or its plan (both an InputError and a ConfigError)."""

    def __init__(self, path: str | Path | None, problems: list[Problem]):
        # In file order: the reader fixes them top to bottom.
        self.problems = sorted(problems, key=lambda p: (p.line is None, p.line or 0))
        if len(self.problems) == 1:
            only = self.problems[0]
            where = format_keypath(only.keypath)
            super().__init__(path, f"{where + ': ' if where else ''}{only.message}", only.line, column=only.column)
        else:
            bullets = "\n".join(f"  - {p}" for p in self.problems)
            super().__init__(path, f"{len(self.problems)} problems in the suite (nothing was run):\n{bullets}")


class Problems:
    """A list of problems with the file's line map; ``raise_if_any`` turns them into one error."""

    def __init__(self, path: str | Path | None = None, lines: dict[KeyPath, int] | None = None,
                 columns: dict[KeyPath, int] | None = None):
        self.path = path
        self.lines = lines or {}
        self.columns = columns or {}
        self.items: list[Problem] = []

    def add(self, keypath: KeyPath, message: str, at: KeyPath | None = None) -> None:
        """A problem reported at ``keypath``; its line is that of ``at`` (default: ``keypath``).  The same
        problem found twice (by the file's reader and the plan's validator) is listed once."""
        where = keypath if at is None else at
        problem = Problem(tuple(keypath), message, self.line(where), self.column(where))
        if problem not in self.items:
            self.items.append(problem)

    def line(self, keypath: KeyPath) -> int | None:
        """The line of ``keypath``, else of its nearest enclosing key that has one."""
        keypath = tuple(keypath)
        while keypath:
            if keypath in self.lines:
                return self.lines[keypath]
            keypath = keypath[:-1]
        return None

    def column(self, keypath: KeyPath) -> int | None:
        """The column of the key whose line :meth:`line` gives (None when it is not known)."""
        keypath = tuple(keypath)
        while keypath:
            if keypath in self.lines:
                return self.columns.get(keypath)
            keypath = keypath[:-1]
        return None

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise SuitePlanError(self.path, self.items)
