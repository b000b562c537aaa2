"""The false-negative filter's vote (METHODS.md 5.3, oracle M5).

The judge is asked 4 times per (query, positive, candidate) with the released (top_p,
temperature) pairs; each answer is 0 (irrelevant), 1 (partly relevant) or 2 (a false
negative), or -1 when the call failed or returned no label.  Failed calls are dropped, the
majority wins and a tie goes to the tied value that occurs first in the vote list (what
``Counter(votes).most_common(1)`` returns in the released code).
"""
from __future__ import annotations

from collections.abc import Sequence

from harness.errors import ConfigError

LABELS = (0, 1, 2)
FAILED = -1
# The released code keeps only candidates voted 0; paper 004 (App. B.2) drops only those voted 2.
FILTER_MODES = {"keep_zero": "keep only vote 0 (code)", "drop_two": "drop only vote 2 (paper)"}


def fn_vote(votes: Sequence[int]) -> int:
    """The voted label of one candidate: majority of the valid votes, ties to the first in the
    list; -1 when every call failed."""
    counts: dict[int, int] = {}
    for v in votes:
        if isinstance(v, bool) or not isinstance(v, int) or v not in (*LABELS, FAILED):
            raise ConfigError(f"a vote must be one of 0, 1, 2 or -1 (failed call), got {v!r}")
        if v != FAILED:
            counts[v] = counts.get(v, 0) + 1   # dict order = order of first appearance
    if not counts:
        return FAILED
    best = max(counts.values())
    return next(label for label, c in counts.items() if c == best)


def keeps(voted: int, mode: str = "keep_zero") -> bool:
    """Whether a candidate with this voted label stays a negative.  A candidate nobody could
    judge (-1) is dropped when only 0 is kept and kept when only 2 is dropped."""
    if mode not in FILTER_MODES:
        raise ConfigError(f"unknown filter mode {mode!r}; choose one of {', '.join(FILTER_MODES)}")
    return voted == 0 if mode == "keep_zero" else voted != 2
