"""Samplers (oracles O0.4, O0.5) and per-example passage/prompt picking (METHODS.md 0.3)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from trainutil import make_data

from harness.errors import ConfigError
from harness.train.batching import apply_template, build_batch
from harness.train.samplers import DatasetStream, WeightedSampler
from harness.train.spec import TrainSpec


def test_o04_uniform_over_25_datasets():
    sampler = WeightedSampler([3] * 25, [1.0] * 25, global_batch=1, seed=42)
    draws = np.array([sampler.next_batch()[0][0] for _ in range(100_000)])
    freq = np.bincount(draws, minlength=25) / len(draws)
    assert np.abs(freq - 0.04).max() < 0.005
    # 100 blocks of 1000 steps: batches per dataset have mean 40 and sd sqrt(1000*0.04*0.96) = 6.197.
    per_block = np.stack([np.bincount(b, minlength=25) for b in draws.reshape(100, 1000)])
    assert per_block.mean() == pytest.approx(40.0)
    assert per_block.std() == pytest.approx(6.197, rel=0.1)


def test_o05_zero_weight_never_drawn_and_batches_homogeneous():
    sampler = WeightedSampler([10, 10, 10], [0.5, 0.5, 0.0], global_batch=8, seed=1)
    seen = Counter()
    for _ in range(2000):
        batch = sampler.next_batch()
        ids = {g for g, _ in batch}
        assert len(ids) == 1
        seen[ids.pop()] += 1
    assert seen[2] == 0 and seen[0] > 900 and seen[1] > 900


def test_weights_are_normalised_and_validated():
    sampler = WeightedSampler([5, 5], [3.0, 1.0], global_batch=1, seed=0)
    assert sampler.weights.tolist() == [0.75, 0.25]
    with pytest.raises(ConfigError, match="not all 0"):
        WeightedSampler([5, 5], [0.0, 0.0], global_batch=1, seed=0)
    with pytest.raises(ConfigError, match="expected 2 dataset weights"):
        sampler.set_weights([1.0])


def test_stream_shuffles_each_epoch_and_cycles():
    stream = DatasetStream(5, seed=3, source=0)
    first, second = stream.take(5), stream.take(5)
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4]
    assert first != second                     # a new permutation each epoch
    assert stream.take(12)[:5] != []           # cycles past the end (oversampling small sources)
    assert stream.epoch == 4 and stream.cursor == 2


def test_mixed_sampler_counts_are_multinomial():
    sampler = WeightedSampler([50, 50, 50], [0.2, 0.3, 0.5], global_batch=100, seed=7, mode="mixed")
    counts = np.zeros(3)
    mixed_batches = 0
    for _ in range(200):
        batch = sampler.next_batch()
        c = np.bincount([g for g, _ in batch], minlength=3)
        counts += c
        mixed_batches += (c > 0).sum() > 1
    assert mixed_batches == 200
    assert np.allclose(counts / counts.sum(), [0.2, 0.3, 0.5], atol=0.01)


def test_state_dict_resumes_the_same_sequence_and_weights():
    a = WeightedSampler([7, 4, 9], [1, 2, 3], global_batch=5, seed=11)
    for _ in range(13):
        a.next_batch()
    a.set_weights([0, 1, 1])
    state = a.state_dict()
    expected = [a.next_batch() for _ in range(10)]
    b = WeightedSampler([7, 4, 9], [1, 1, 1], global_batch=5, seed=11)
    b.load_state_dict(state)
    assert [b.next_batch() for _ in range(10)] == expected
    assert b.weights.tolist() == pytest.approx([0, 0.5, 0.5])


def test_ranks_draw_the_same_batch_and_take_disjoint_slices():
    samplers = [WeightedSampler([6, 6], [1, 1], global_batch=8, seed=5) for _ in range(2)]
    for _ in range(5):
        batches = [s.next_batch() for s in samplers]
        assert batches[0] == batches[1]
        slices = [WeightedSampler.local_slice(batches[0], r, 4) for r in range(4)]
        assert sum(slices, []) == batches[0]


# ---------------------------------------------------------------------------------- batches

def spec(**kw) -> TrainSpec:
    base = dict(model="minilm", batch_size=4, steps=1, warmup_steps=0, n_hard_negatives=1, precision="fp32")
    base.update(kw)
    return TrainSpec(**base)


def test_one_positive_uniform_and_negatives_without_replacement():
    from harness.data.collections import TrainingData, TrainingSource
    from harness.data.training import TrainingRow

    row = TrainingRow("q", ["p0", "p1", "p2"], ["n0", "n1", "n2", "n3"])
    data = TrainingData([TrainingSource("s", [row])])
    s = spec(n_hard_negatives=3, use_instructions=False, batch_size=1)
    pos, negs_distinct = Counter(), 0
    for micro in range(3000):
        b = build_batch([(0, 0)], data, s, micro)
        pos[b.passages[0]] += 1
        negs_distinct += len(set(b.passages[1:])) == 3
    assert negs_distinct == 3000                   # without replacement when enough exist
    assert all(abs(pos[p] / 3000 - 1 / 3) < 0.03 for p in ("p0", "p1", "p2"))


def test_negatives_with_replacement_and_fill_modes():
    from harness.data.collections import TrainingData, TrainingSource
    from harness.data.training import TrainingRow

    rows = [TrainingRow("q0", ["p0"], ["n0"]), TrainingRow("q1", ["p1"], []), TrainingRow("q2", ["p2"], [])]
    data = TrainingData([TrainingSource("s", rows)])
    b = build_batch([(0, 0)], data, spec(n_hard_negatives=3, use_instructions=False, batch_size=1), 0)
    assert b.passages == ["p0", "n0", "n0", "n0"]  # fewer than m: sampled with replacement
    b = build_batch([(0, 1)], data, spec(n_hard_negatives=2, use_instructions=False, batch_size=1), 0)
    assert set(b.passages[1:]) <= {"p0", "p2"} and b.passage_valid.all()   # random in-source positives
    b = build_batch([(0, 1)], data, spec(n_hard_negatives=2, fill_negatives="mask", batch_size=1,
                                         use_instructions=False), 0)
    assert b.passage_valid.tolist() == [True, False, False]


def test_prompts_template_and_symmetric_documents():
    data = make_data(n_sources=2, rows=3)
    s = spec(batch_size=2)
    b = build_batch([(0, 0), (1, 0)], data, s, 0)
    row0, row1 = data.sources[0].rows[0], data.sources[1].rows[0]
    assert b.queries[0] == f"Instruct: Find passages for task 0\nQuery: {row0.query}"
    assert b.passages[0] == row0.pos[0]                                   # asymmetric: documents unprompted
    assert b.passages[2] == f"Instruct: Find passages for task 1\nQuery: {row1.pos[0]}"   # symmetric source
    b = build_batch([(1, 0)], data, spec(batch_size=1, symmetric_doc_prompt=False), 0)
    assert b.passages[0] == row1.pos[0]
    b = build_batch([(0, 0)], data, spec(batch_size=1, use_instructions=False), 0)
    assert b.queries[0] == row0.query
    assert apply_template("Instruct: {prompt}\nQuery: {text}", "P", "a {text} b") == "Instruct: P\nQuery: a {text} b"


def test_several_prompts_are_drawn_per_example():
    data = make_data(n_sources=1, rows=2)
    data.sources[0].prompt = ["first", "second"]
    s = spec(batch_size=1)
    seen = Counter(build_batch([(0, 0)], data, s, i).queries[0].split("\n")[0] for i in range(400))
    assert set(seen) == {"Instruct: first", "Instruct: second"} and min(seen.values()) > 150


def test_rank_slices_concatenate_to_the_single_process_batch():
    data = make_data(n_sources=2, rows=10)
    s = spec(batch_size=4)
    examples = [(0, 1), (0, 5), (1, 2), (1, 7)]
    whole = build_batch(examples, data, s, micro_index=9)
    parts = [build_batch(examples, data, s, micro_index=9, rank=r, world_size=2) for r in range(2)]
    assert parts[0].queries + parts[1].queries == whole.queries
    assert parts[0].passages + parts[1].passages == whole.passages
    assert np.concatenate([p.group_ids for p in parts]).tolist() == [0, 0, 1, 1]
