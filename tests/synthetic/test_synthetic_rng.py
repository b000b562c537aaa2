"""The version-stable random stream: uniformity, exactness and a pinned sequence."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest

from harness.synthetic.rng import StableRng, make_rng


def test_stream_is_pinned():
    # random.Random(seed).random() is guaranteed stable across Python versions; every
    # other draw derives from it, so these values must never change.
    rng = StableRng(12345)
    assert [rng.randrange(10) for _ in range(8)] == [4, 0, 8, 2, 3, 1, 5, 1]
    assert make_rng("a", 1).sample(range(10), 4) == make_rng("a", 1).sample(range(10), 4)
    assert make_rng("a", 1).sample(range(10), 4) != make_rng("a", 2).sample(range(10), 4)


def test_randrange_and_randint_are_uniform():
    rng = StableRng(0)
    counts = Counter(rng.randrange(5) for _ in range(50_000))
    assert set(counts) == set(range(5))
    assert all(abs(c / 50_000 - 0.2) < 0.01 for c in counts.values())
    assert {rng.randint(3, 5) for _ in range(1000)} == {3, 4, 5}


def test_shuffle_gives_every_permutation_equally_often():
    rng = StableRng(1)
    counts = Counter()
    for _ in range(24_000):
        items = [0, 1, 2, 3]
        rng.shuffle(items)
        counts[tuple(items)] += 1
    assert set(counts) == set(itertools.permutations(range(4)))
    assert all(abs(c / 24_000 - 1 / 24) < 0.01 for c in counts.values())


def test_sample_is_distinct_and_uniform():
    rng = StableRng(2)
    firsts = Counter()
    for _ in range(20_000):
        s = rng.sample("abcde", 3)
        assert len(set(s)) == 3
        firsts[s[0]] += 1
    assert all(abs(c / 20_000 - 0.2) < 0.015 for c in firsts.values())
    with pytest.raises(ValueError):
        rng.sample("ab", 3)


def test_choices_follow_the_weights():
    rng = StableRng(3)
    counts = Counter(rng.choices("abc", cum_weights=[1.0, 3.0, 6.0], k=60_000))
    assert abs(counts["a"] / 60_000 - 1 / 6) < 0.01
    assert abs(counts["b"] / 60_000 - 2 / 6) < 0.01
    assert abs(counts["c"] / 60_000 - 3 / 6) < 0.01
