"""The mining kernels against METHODS.md 5.6 oracles M1-M8, through the public API.

Oracle list c1..c14 = (0.95, 0.85, 0.78, 0.74, 0.70, 0.66, 0.62, 0.55, 0.50, 0.45, 0.40, 0.35,
0.30, 0.25), positive 0.80, K = 4.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from harness.errors import ConfigError
from methods.mining import (
    fn_vote,
    keeps,
    language_topic_batches,
    loss_weights,
    positive_threshold,
    sample_from_pool,
    select,
    select_negatives,
    weighted_batch_loss,
)

C = [0.95, 0.85, 0.78, 0.74, 0.70, 0.66, 0.62, 0.55, 0.50, 0.45, 0.40, 0.35, 0.30, 0.25]
POS = 0.80


def picked(strategy, positive=POS, k=4, **kw):
    return [C[i] for i in select_negatives(C, positive, strategy, k, **kw)]


# ------------------------------------------------------------------ M1
def test_m1_naive_and_shifted():
    assert picked("naive") == [0.95, 0.85, 0.78, 0.74]
    assert picked("shifted", shift=10) == [0.40, 0.35, 0.30, 0.25]
    assert picked("shifted", shift=2) == [0.78, 0.74, 0.70, 0.66]
    assert select_negatives(C, POS, "shifted", 4) == [10, 11, 12, 13]    # default shift 10
    assert select_negatives(C, POS, "shifted", 4, shift=12) == [12, 13]  # past the end: fewer than k


def test_shifted_random_after_window_is_seeded_and_inside_the_window():
    a = select_negatives(C, POS, "shifted_random_after", 4, shift=2, window=12, seed=7)
    assert a == select_negatives(C, POS, "shifted_random_after", 4, shift=2, window=12, seed=7)
    assert len(a) == 4 and len(set(a)) == 4 and all(2 <= i < 12 for i in a) and a == sorted(a)
    draws = {tuple(select_negatives(C, POS, "shifted_random_after", 4, shift=2, window=12, seed=s)) for s in range(20)}
    assert len(draws) > 10                                 # the seed matters
    # a window no larger than k is the consecutive shifted selection
    assert select_negatives(C, POS, "shifted_random_after", 4, shift=2, window=6, seed=3) == [2, 3, 4, 5]
    counts = np.zeros(len(C))
    for s in range(2000):
        counts[select_negatives(C, POS, "shifted_random_after", 2, shift=4, seed=s)] += 1
    assert counts[:4].sum() == 0 and counts[4:].min() > 0.8 * 2000 * 2 / 10   # uniform over ranks 5..14


# ------------------------------------------------------------------ M2
def test_m2_threshold_strategies():
    assert picked("abs", threshold=0.6) == [0.55, 0.50, 0.45, 0.40]
    assert positive_threshold(POS, "margin_pos", margin=0.15) == pytest.approx(0.65)
    assert picked("margin_pos", margin=0.15) == [0.62, 0.55, 0.50, 0.45]
    assert positive_threshold(POS, "perc_pos", percent=0.9) == pytest.approx(0.72)
    assert picked("perc_pos", percent=0.9) == [0.70, 0.66, 0.62, 0.55]
    assert positive_threshold(POS, "perc_pos", percent=0.95) == pytest.approx(0.76)
    assert picked("perc_pos", percent=0.95) == [0.74, 0.70, 0.66, 0.62]
    assert picked("abs") == picked("abs", threshold=0.6)           # defaults are the paper's best values
    assert picked("margin_pos") == [0.62, 0.55, 0.50, 0.45] and picked("perc_pos") == [0.70, 0.66, 0.62, 0.55]


def test_rules_are_inclusive():
    assert select_negatives([0.7, 0.6, 0.5], 0.9, "abs", 3, threshold=0.6) == [1, 2]
    assert select_negatives([0.75, 0.5, 0.25], 1.0, "perc_pos", 3, percent=0.5) == [1, 2]   # threshold exactly 0.5


# ------------------------------------------------------------------ M3
def test_m3_several_positives_min_and_max():
    assert positive_threshold([0.80, 0.60], "perc_pos", percent=0.9) == pytest.approx(0.54)
    assert picked("perc_pos", positive=[0.80, 0.60], percent=0.9) == [0.50, 0.45, 0.40, 0.35]
    assert picked("perc_pos", positive=[0.80, 0.60], percent=0.9, pos_agg="max") == [0.70, 0.66, 0.62, 0.55]
    assert picked("margin_pos", positive=[0.80, 0.60], margin=0.12) == [0.45, 0.40, 0.35, 0.30]   # threshold 0.48


# ------------------------------------------------------------------ M4
def test_m4_under_full_pool_sampled_with_replacement(caplog):
    # M4 states "Abs 0.3 leaves only (0.25)", an equality case the corrected inclusive rule (<=)
    # decides the other way: 0.30 <= 0.3 stays.  Pinned both ways; the pool of one uses 0.28.
    assert [C[i] for i in select_negatives(C, POS, "abs", 30, threshold=0.3)] == [0.30, 0.25]
    pool = select_negatives(C, POS, "abs", 30, threshold=0.28)
    assert [C[i] for i in pool] == [0.25]
    with caplog.at_level(logging.WARNING, logger="methods.mining.selection"):
        draw, under = sample_from_pool(pool, 7, np.random.default_rng(0))
    assert draw == [13] * 7 and under
    assert "holds 1 < 7" in caplog.text
    full = select_negatives(C, POS, "naive", 10)
    draw, under = sample_from_pool(full, 7, np.random.default_rng(0))
    assert not under and len(set(draw)) == 7 and set(draw) <= set(full)


def test_removed_counts_per_rule():
    sel = select(C, POS, "perc_pos", 4, percent=0.9)
    assert sel.threshold == pytest.approx(0.72)
    assert sel.removed == {"threshold": 4, "pool_size": 6}        # 4 above 0.72, 6 beyond k
    assert select(C, POS, "shifted", 4, shift=2).removed == {"shift": 2, "pool_size": 8}


# ------------------------------------------------------------------ M5
@pytest.mark.parametrize("votes,label,kept", [
    ([0, 0, 1, 2], 0, True),
    ([2, 2, 0, 1], 2, False),
    ([1, 0, -1, 1], 1, False),
    ([0, 1, -1, -1], 0, True),
    ([1, 0, 0, 1], 1, False),
])
def test_m5_fn_vote(votes, label, kept):
    assert fn_vote(votes) == label
    assert keeps(fn_vote(votes)) is kept


def test_fn_vote_modes_and_failures():
    assert fn_vote([-1, -1, -1, -1]) == -1
    assert keeps(-1, "keep_zero") is False and keeps(-1, "drop_two") is True
    assert keeps(1, "drop_two") is True and keeps(2, "drop_two") is False
    with pytest.raises(ConfigError, match="vote must be one of"):
        fn_vote([0, 3])
    with pytest.raises(ConfigError, match="unknown filter mode"):
        keeps(0, "paper")


# ------------------------------------------------------------------ M6
def test_m6_round_robin_topics_across_batches():
    names = ["a1", "a2", "a3", "a4", "b1", "b2"]
    langs = ["en"] * 6
    topics = ["A", "A", "A", "A", "B", "B"]
    batches = language_topic_batches(langs, topics, 3, shuffle=False)
    assert [[names[i] for i in b] for b in batches] == [["a1", "b1", "a2"], ["b2", "a3", "a4"]]


def test_m6_first_appearance_order_and_monolingual_batches():
    langs = ["de", "en", "en", "de", "en", "de", "en"]
    topics = ["x", "B", "A", "y", "B", "x", "A"]
    batches = language_topic_batches(langs, topics, 2, shuffle=False)
    assert batches == [[0, 3], [5], [1, 2], [4, 6]]       # B first: it appears before A
    for seed in range(5):
        shuffled = language_topic_batches(langs, topics, 2, seed=seed)
        assert sorted(i for b in shuffled for i in b) == list(range(7))
        assert all(len({langs[i] for i in b}) == 1 for b in shuffled)
    assert language_topic_batches(langs, topics, 2, seed=1) == language_topic_batches(langs, topics, 2, seed=1)


def test_batches_are_topic_diverse_when_shuffled():
    rng = np.random.default_rng(0)
    langs = ["en"] * 60
    topics = rng.choice(["t1", "t2", "t3"], size=60, p=[0.4, 0.3, 0.3]).tolist()
    for b in language_topic_batches(langs, topics, 3, seed=4)[:5]:
        assert len({topics[i] for i in b}) == 3       # every topic has 18+ examples: the first batches cover all


# ------------------------------------------------------------------ M7
def test_m7_constant_weights():
    assert weighted_batch_loss(2.0, ["en", "de"], ["A", "B"]) == pytest.approx(1.7)
    assert loss_weights(["en"], ["A"]).tolist() == pytest.approx([0.85])


def test_portion_weights_favour_rare_labels():
    w = loss_weights(["en", "en", "en", "de"], ["A", "A", "A", "A"], mode="portion")
    # shares 3/4 and 1/4 -> inverse 4/3 and 4, mean 8/3 -> w_l = 0.45 * (0.5, 1.5); one topic -> 0.4
    assert w.tolist() == pytest.approx([0.625, 0.625, 0.625, 1.075])


# ------------------------------------------------------------------ M8
def test_m8_sign_safe_perc_pos():
    assert positive_threshold(-0.20, "perc_pos", percent=0.9) == pytest.approx(-0.22)
    assert select_negatives([-0.19, -0.25], -0.20, "perc_pos", 2, percent=0.9) == [1]
    # the naive p * s_pos (-0.18) would have kept -0.19, a candidate scoring above the positive
    assert 0.9 * -0.20 > -0.19 > -0.20


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs,match", [
    ({"strategy": "topk"}, "unknown selection strategy 'topk'"),
    ({"strategy": "perc_pos", "percent": 0.0}, r"percent must lie in \(0, 1\]"),
    ({"strategy": "perc_pos", "percent": 1.5}, r"percent must lie in \(0, 1\]"),
    ({"strategy": "perc_pos", "percent": 90}, r"percent must lie in \(0, 1\]"),
    ({"strategy": "naive", "k": 0}, "k must be an integer >= 1"),
    ({"strategy": "margin_pos", "positive": []}, "needs at least one positive"),
    ({"strategy": "perc_pos", "pos_agg": "mean"}, "pos_agg must be one of min, max"),
    ({"strategy": "shifted", "shift": -1}, "shift must be an integer >= 0"),
    ({"strategy": "shifted_random", "shift": 5, "window": 5}, "window .5. must lie beyond shift"),
    ({"strategy": "abs", "threshold": float("nan")}, "threshold must be a finite number"),
])
def test_bad_input_is_a_config_error(kwargs, match):
    args = {"positive": POS, "k": 4, **kwargs}
    with pytest.raises(ConfigError, match=match):
        select_negatives(C, args.pop("positive"), args.pop("strategy"), args.pop("k"), **args)


def test_unsorted_or_non_finite_candidates_are_refused():
    with pytest.raises(ConfigError, match="sorted by descending score"):
        select_negatives([0.1, 0.5], POS, "naive", 2)
    with pytest.raises(ConfigError, match="must be finite"):
        select_negatives([0.5, float("nan")], POS, "naive", 2)
    with pytest.raises(ConfigError, match="2 language labels but 1 topic"):
        language_topic_batches(["en", "en"], ["A"], 2)
    with pytest.raises(ConfigError, match="batch_size must be a positive integer"):
        language_topic_batches(["en"], ["A"], 0)
    assert select_negatives([], POS, "naive", 3) == []
