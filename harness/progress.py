"""When progress bars are drawn: on a terminal by default, never into a log file or a pipe.

tqdm redraws a bar with carriage returns; written into a log that is one line per update (a
600-step quickstart logged about 1,300 of them, 148 KB).  Every bar of the harness takes its
``disable`` from :func:`bar_disabled`, which tqdm reads as: ``True`` off, ``False`` on, ``None``
on only when its stream is a terminal.  The CLI's ``--progress`` (bars even where the stream is
not a terminal, e.g. under some job schedulers' pseudo-logs) and ``--quiet`` / ``run --no-progress``
(no bars) set ``HARNESS_PROGRESS``, so worker processes follow the same choice.
"""
from __future__ import annotations

import os

PROGRESS_ENV = "HARNESS_PROGRESS"
MODES = ("auto", "on", "off")


def bar_disabled(progress: bool = True) -> bool | None:
    """tqdm's ``disable`` for a bar its caller wants (``progress``): off when the caller or
    ``HARNESS_PROGRESS=off`` says so, on with ``HARNESS_PROGRESS=on``, else on a terminal only."""
    if not progress:
        return True
    mode = os.environ.get(PROGRESS_ENV, "auto").strip().lower()
    if mode == "off":
        return True
    if mode == "on":
        return False
    return None
