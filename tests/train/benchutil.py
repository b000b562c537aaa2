"""Interleaved timing shared by the speed tests: the reference runs in the untimed pedantic ``setup``
(timed by hand), the measured code is the benchmark target, so load from other processes hits both
alike; ratios are reported best-vs-best and as the median of per-round ratios.  ``clock`` may be
``time.process_time`` (this process's CPU seconds, which other processes' load does not add to) for code
on one thread."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def interleaved_rounds(benchmark: Any, reference: Callable[[], Any], ours: Callable[[], Any],
                       rounds: int, clock: Callable[[], float] = time.perf_counter,
                       ) -> tuple[Any, list[float], list[float]]:
    """``(last result of ours, reference seconds per round, our seconds per round)``, timed by ``clock``."""
    reference_times: list[float] = []
    ours_times: list[float] = []

    def timed_reference() -> None:
        started = clock()
        reference()
        reference_times.append(clock() - started)

    def timed_ours() -> Any:
        started = clock()
        out = ours()
        ours_times.append(clock() - started)
        return out

    result = benchmark.pedantic(timed_ours, setup=timed_reference, rounds=rounds, iterations=1)
    return result, reference_times, ours_times


def speed_ratios(reference_times: list[float], ours_times: list[float]) -> tuple[float, float]:
    """``(best-round ratio, median of per-round ratios)`` of reference time over ours (> 1: we are faster)."""
    best = min(reference_times) / min(ours_times)
    paired = float(np.median([r / o for r, o in zip(reference_times, ours_times)]))
    return best, paired
