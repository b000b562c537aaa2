"""Speed of generating the default world, against loading the written world (same run).

Generation must stay cheap enough that the cache is a convenience, not a necessity:
it is measured relative to reading the same world back through the harness loaders
(BEIR sets, training rows, ground truth), with rounds interleaved so that load from
other processes hits both alike.
"""
from __future__ import annotations

import json
import time

import pytest

from harness.data import load_beir, read_training_rows
from harness.synthetic import make_world

ROUNDS = 3


@pytest.mark.benchmark
def test_generation_vs_loading_the_written_world(benchmark, world, world_dir):
    def load_written():
        for name in world.domains:
            load_beir(world_dir / "eval" / name)
            read_training_rows(world_dir / "train" / f"{name}.jsonl")
        json.loads((world_dir / "truth.json").read_text(encoding="utf-8"))

    load_times: list[float] = []

    def timed_load():
        start = time.perf_counter()
        load_written()
        load_times.append(time.perf_counter() - start)
        return (), {}

    benchmark.pedantic(make_world, setup=timed_load, rounds=ROUNDS, iterations=1)
    generate = benchmark.stats.stats.min
    load = min(load_times)
    ratio = generate / load
    print(f"default world: generate {generate:.3f} s, load written files {load:.3f} s, ratio {ratio:.1f}")
    assert generate < 5.0
    assert ratio < 30
