"""Argument types shared by the subcommands (argparse ``type=`` callables with clear messages)."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1 (thread counts, depths, batch sizes): 0 or -1 never means 'default' here."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (1 or more), got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (decimals, sizes where 0 means 'none')."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def open_fraction(text: str) -> float:
    """A number strictly between 0 and 1 (significance levels, confidence levels)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value
