"""Interleaved timing shared by the speed tests.

The reference runs in the untimed pedantic ``setup`` (timed by hand), the measured code is the benchmark
target, so load from other processes hits both alike.  ``clock`` may be ``time.process_time`` (this
process's CPU seconds, which other processes' load does not add to) for code on one thread.

:func:`paired_rounds` is the load-robust form every speed bound uses: each round times both sides back to
back in process CPU time *and* wall time, and :class:`PairedTimes` gives the median of the per-round
ratios (each pair under the same load), their spread, best-vs-best and the wall-clock median, reports
them in ``benchmark.extra_info`` and in the assertion message.  Tests whose work runs in child processes
fill :class:`PairedTimes` from the children's own CPU times (``resource.getrusage`` inside the child).
"""
from __future__ import annotations

import contextlib
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass
class PairedTimes:
    """Per-round seconds of both sides of an interleaved measurement.  Ratios are *ours over the
    reference* (a cost ratio: < 1 means ours is faster), computed round by round on CPU seconds."""

    reference: list[float]                  # CPU seconds per round
    ours: list[float]
    reference_wall: list[float] = field(default_factory=list)
    ours_wall: list[float] = field(default_factory=list)
    result: Any = None                      # the last value ours returned
    load: float = field(default_factory=lambda: os.getloadavg()[0])
    others: dict[str, list[float]] = field(default_factory=dict)   # CPU seconds of reported-only sides

    def other_ratios(self) -> dict[str, float]:
        """Per other side, the median per-round ratio ours / that side."""
        return {name: float(statistics.median(o / t for o, t in zip(self.ours, ts)))
                for name, ts in self.others.items()}

    @property
    def ratios(self) -> list[float]:
        return [o / r for o, r in zip(self.ours, self.reference)]

    @property
    def median(self) -> float:
        """The asserted number: the median of the per-round CPU ratios."""
        return float(statistics.median(self.ratios))

    @property
    def spread(self) -> float:
        """Largest minus smallest per-round ratio (what a bound's margin must cover)."""
        return max(self.ratios) - min(self.ratios)

    @property
    def best(self) -> float:
        return min(self.ours) / min(self.reference)

    @property
    def wall_median(self) -> float | None:
        if not self.ours_wall or not self.reference_wall:
            return None
        return float(statistics.median(o / r for o, r in zip(self.ours_wall, self.reference_wall)))

    def summary(self) -> str:
        rounds = ", ".join(f"{r:.3f}" for r in self.ratios)
        wall = self.wall_median
        others = "".join(f"; vs {name} median {r:.3f}" for name, r in self.other_ratios().items())
        return (f"CPU ratio ours/reference median {self.median:.3f} (rounds {rounds}; spread {self.spread:.3f}; "
                f"best-vs-best {self.best:.3f}" + (f"; wall median {wall:.3f}" if wall is not None else "")
                + f"; load average {self.load:.1f}; fastest rounds: reference {min(self.reference) * 1e3:.1f} ms, "
                f"ours {min(self.ours) * 1e3:.1f} ms CPU){others}")

    def info(self, prefix: str = "") -> dict[str, Any]:
        """The numbers for ``benchmark.extra_info`` (keys prefixed by ``prefix``)."""
        out: dict[str, Any] = {"reference_cpu_s": self.reference, "ours_cpu_s": self.ours,
                               "ratio_rounds": [round(r, 4) for r in self.ratios],
                               "ratio_median": round(self.median, 4), "ratio_spread": round(self.spread, 4),
                               "ratio_best": round(self.best, 4), "load_average": self.load}
        for name, ts in self.others.items():
            out.update({f"{name}_cpu_s": ts, f"ratio_median_vs_{name}": round(self.other_ratios()[name], 4)})
        if self.wall_median is not None:
            out.update({"reference_wall_s": self.reference_wall, "ours_wall_s": self.ours_wall,
                        "wall_ratio_median": round(self.wall_median, 4)})
        return {prefix + k: v for k, v in out.items()}

    def report(self, benchmark: Any, label: str, prefix: str = "") -> None:
        """Record :meth:`info` in the benchmark's extra_info and print the summary under ``label``."""
        if benchmark is not None:
            benchmark.extra_info.update(self.info(prefix))
        print(f"\n{label}: {self.summary()}")

    def assert_at_most(self, bound: float, what: str) -> None:
        """Assert the median per-round ratio is within ``bound``, with every number in the message."""
        assert self.median <= bound, f"{what}: median ratio {self.median:.3f} > bound {bound}; {self.summary()}"


def paired_rounds(benchmark: Any, reference: Callable[[], Any], ours: Callable[[], Any], rounds: int,
                  warmup: bool = True, others: Mapping[str, Callable[[], Any]] | None = None) -> PairedTimes:
    """Interleaved rounds (reference in the untimed pedantic ``setup``, ours as the target), each side
    timed in this process's CPU seconds and in wall seconds.  CPU seconds count every thread of the
    process, so multi-threaded code should run on one thread (the ``one_thread`` fixture): spinning
    worker threads under load would add CPU time that is no work.  ``others`` (reported, not asserted)
    run in the same setup before the reference, each timed apart into ``PairedTimes.others``."""
    if warmup:
        for fn in (*(others or {}).values(), reference, ours):
            fn()
    times = PairedTimes([], [], [], [])
    times.others = {name: [] for name in others or {}}

    def timed(fn: Callable[[], Any], cpu: list[float], wall: list[float]) -> Any:
        # The cyclic GC off for both sides (pytest-benchmark's --benchmark-disable-gc covers only the
        # target, not ``setup``), after an untimed collection, so neither side pays for the other's garbage.
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            started, cpu_started = time.perf_counter(), time.process_time()
            out = fn()
            cpu.append(time.process_time() - cpu_started)
            wall.append(time.perf_counter() - started)
        finally:
            if enabled:
                gc.enable()
        return out

    def reference_round() -> None:          # pedantic's setup must return None
        for name, fn in (others or {}).items():
            timed(fn, times.others[name], [])
        timed(reference, times.reference, times.reference_wall)

    times.result = benchmark.pedantic(lambda: timed(ours, times.ours, times.ours_wall), setup=reference_round,
                                      rounds=rounds, iterations=1)
    times.load = os.getloadavg()[0]
    return times


def paired_from_children(reference: Sequence[dict], ours: Sequence[dict], cpu_key: str = "cpu",
                         wall_key: str | None = "wall") -> PairedTimes:
    """:class:`PairedTimes` from child processes' reports (one dict per round, the same order)."""
    return PairedTimes([r[cpu_key] for r in reference], [o[cpu_key] for o in ours],
                       [r[wall_key] for r in reference] if wall_key else [],
                       [o[wall_key] for o in ours] if wall_key else [])


@contextlib.contextmanager
def one_thread_each() -> Iterator[None]:
    """BLAS (through threadpoolctl, when installed) and torch (when already imported) on one thread
    inside the block, restored after: process CPU time then measures work, not threads spinning at a
    barrier while other processes hold the cores."""
    with contextlib.ExitStack() as stack:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:             # not installed: BLAS keeps its threads (matrix products only)
            pass
        else:
            stack.enter_context(threadpool_limits(limits=1))
        torch = sys.modules.get("torch")
        if torch is not None:
            before = torch.get_num_threads()
            torch.set_num_threads(1)
            stack.callback(torch.set_num_threads, before)
        yield
