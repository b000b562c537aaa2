"""Errors raised by the harness.

Every problem with user input is an :class:`InputError` that names the file, the
line (1-based, when there is one) and what is wrong, so that a researcher can open
the file at that line and fix it.  The CLI turns these into a one-line message on
stderr and a non-zero exit status.
"""
from __future__ import annotations

from pathlib import Path


class HarnessError(Exception):
    """Base class of every error the harness raises on purpose."""


class InputError(HarnessError, ValueError):
    """Bad user input: a file that does not parse or violates its format."""

    def __init__(self, path: str | Path | None, problem: str, line: int | None = None, column: int | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        self.column = column
        self.problem = problem
        where = self.path or "<input>"
        if line is not None:
            where = f"{where}:{line}" + (f":{column}" if column is not None else "")
        super().__init__(f"{where}: {problem}")


class ConfigError(HarnessError, ValueError):
    """An invalid option, spec or suite definition."""


class ProtocolMismatchError(HarnessError):
    """Two results were produced under different protocol cards and cannot be compared."""
