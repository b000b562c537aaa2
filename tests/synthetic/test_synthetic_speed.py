"""Speed of generating the default world, against loading the written world (same run).

Generation must stay cheap enough that the cache is a convenience, not a necessity:
it is measured relative to reading the same world back through the harness loaders
(BEIR sets, training rows, ground truth), with rounds interleaved (loading in pedantic's untimed
``setup``) and both timed in process CPU seconds with BLAS on one thread (tests/train/benchutil.py),
so that other processes' load adds to neither side; the bound is on the median per-round ratio.
"""
from __future__ import annotations

import json

import pytest
from benchutil import one_thread_each, paired_rounds

from harness.data import load_beir, read_training_rows
from harness.synthetic import make_world

ROUNDS = 5
MAX_RATIO = 30            # generation / loading, median round (see the report for the measured spread)
MAX_GENERATE_CPU_S = 5.0  # absolute, in CPU seconds (load does not add to it)


@pytest.mark.benchmark
def test_generation_vs_loading_the_written_world(benchmark, world, world_dir):
    def load_written():
        for name in world.domains:
            load_beir(world_dir / "eval" / name)
            read_training_rows(world_dir / "train" / f"{name}.jsonl")
        json.loads((world_dir / "truth.json").read_text(encoding="utf-8"))

    with one_thread_each():
        times = paired_rounds(benchmark, load_written, make_world, ROUNDS)
    times.report(benchmark, "default world: generate / load the written files")
    assert times.result.domains == world.domains
    assert min(times.ours) < MAX_GENERATE_CPU_S
    times.assert_at_most(MAX_RATIO, "generate / load")
