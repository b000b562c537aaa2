"""Interleaved timing shared by the speed tests: the reference runs in the untimed pedantic ``setup``
(timed by hand), the measured code is the benchmark target, so load from other processes hits both
alike; ratios are reported best-vs-best and as the median of per-round ratios."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def interleaved_rounds(benchmark: Any, reference: Callable[[], Any], ours: Callable[[], Any],
                       rounds: int) -> tuple[Any, list[float], list[float]]:
    """``(last result of ours, reference seconds per round, our seconds per round)``."""
    reference_times: list[float] = []
    ours_times: list[float] = []

    def timed_reference() -> None:
        started = time.perf_counter()
        reference()
        reference_times.append(time.perf_counter() - started)

    def timed_ours() -> Any:
        started = time.perf_counter()
        out = ours()
        ours_times.append(time.perf_counter() - started)
        return out

    result = benchmark.pedantic(timed_ours, setup=timed_reference, rounds=rounds, iterations=1)
    return result, reference_times, ours_times


def speed_ratios(reference_times: list[float], ours_times: list[float]) -> tuple[float, float]:
    """``(best-round ratio, median of per-round ratios)`` of reference time over ours (> 1: we are faster)."""
    best = min(reference_times) / min(ours_times)
    paired = float(np.median([r / o for r, o in zip(reference_times, ours_times)]))
    return best, paired
