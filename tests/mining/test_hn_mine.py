"""``shifted_random`` is FlagEmbedding's ``hn_mine`` rule (scripts/hn_mine.py, ``find_knn_neg``), checked on
hidden random cases against an independent statement of that rule over the *raw* ranking.

The rule, as FlagEmbedding states it in its script: search the top ``end`` passages of the corpus (the query's
positives and a passage equal to the query text included), take the raw slice ``[start, end)``, drop the
positives and the query text from it, ``random.sample`` k of them when more remain, and top a short pool up
with ``k - len + len(pos)`` random corpus passages of which the non-positives are appended up to k.

Our path differs in how it gets there: the candidate pool arrives with the positives removed, their raw ranks
are recovered from the scores (:func:`raw_positive_ranks`), the window is taken on those raw ranks
(:func:`select`) and the top-up is :func:`hn_top_up`.  Both are driven by one ``random.Random`` per row, so
on every case the negatives must be identical, order included."""
from __future__ import annotations

import random

import numpy as np
import pytest

from methods.mining.selection import hn_top_up, raw_positive_ranks, select, select_negatives


def flagembedding_rule(ranked: list[str], pos: list[str], query: str, start: int, end: int, n: int,
                       corpus: list[str], rng: random.Random) -> list[str]:
    """The hn_mine rule on a raw ranking (our own statement of it, from the script's behaviour)."""
    chosen = [d for d in ranked[start:end] if d not in pos and d != query]
    if len(chosen) > n:
        chosen = rng.sample(chosen, n)
    if len(chosen) < n:
        extra = rng.sample(corpus, n - len(chosen) + len(pos))
        chosen += [d for d in extra if d not in pos][: n - len(chosen)]
    return chosen


def ours(ranked: list[str], scores: list[float], pos: list[str], pos_scores: list[float], query: str, start: int,
         end: int, n: int, corpus: list[str], rng: random.Random) -> list[str]:
    """The production path: candidates without the positives, raw ranks recovered from the scores."""
    cand = [(d, s) for d, s in zip(ranked, scores) if d not in pos]
    texts = [d for d, _ in cand]
    cand_scores = [s for _, s in cand]
    retrieved = sum(d in pos for d in ranked)
    ranks = raw_positive_ranks(cand_scores, pos_scores, retrieved)
    exclude = [i for i, d in enumerate(texts) if d == query]
    sel = select(cand_scores, pos_scores, "shifted_random", n, shift=start, window=end, seed=rng,
                 positive_ranks=ranks, exclude=exclude)
    return hn_top_up([texts[i] for i in sel.indices], n, corpus, pos, rng)


def make_case(rng: np.random.Generator):
    corpus = [f"d{i}" for i in range(int(rng.integers(15, 60)))]
    query = "the query"
    if rng.random() < 0.3:
        corpus.append(query)                 # the query's own text is a corpus passage
    n_pos = int(rng.integers(1, 4))
    pos = list(rng.choice(corpus[:-1] if corpus[-1] == query else corpus, size=n_pos, replace=False))
    depth = int(rng.integers(5, len(corpus) + 1))
    scores = np.sort(rng.random(len(corpus)))[::-1]          # distinct scores, best first
    order = list(rng.permutation(len(corpus)))
    ranked_all = [corpus[i] for i in order]
    score_of = dict(zip(ranked_all, scores.tolist()))
    ranked = ranked_all[:depth]                               # the search returns the top `depth`
    start = int(rng.integers(0, min(6, depth)))
    end = int(rng.integers(start + 1, depth + 1))
    n = int(rng.integers(1, 12))
    pos_scores = [score_of[p] for p in pos]
    return ranked, [score_of[d] for d in ranked], pos, pos_scores, query, start, end, n, corpus


def test_shifted_random_equals_flagembeddings_rule_on_hidden_cases():
    gen = np.random.default_rng(20240504)
    topped = sampled = moved = 0
    for case in range(600):
        ranked, scores, pos, pos_scores, query, start, end, n, corpus = make_case(gen)
        want = flagembedding_rule(ranked, pos, query, start, end, n, corpus, random.Random(case))
        got = ours(ranked, scores, pos, pos_scores, query, start, end, n, corpus, random.Random(case))
        assert got == want, (case, ranked[:end], pos, query, start, end, n)
        in_window = [d for d in ranked[start:end] if d not in pos and d != query]
        topped += len(in_window) < n
        sampled += len(in_window) > n
        # a positive inside the raw prefix shifts the window: counting ranks after removal would differ
        moved += any(d in pos for d in ranked[:end])
    # the cases exercise every branch: short pools topped up, sampling down, positives inside the window
    assert topped > 50 and sampled > 50 and moved > 50


def test_raw_ranks_count_the_positives():
    # raw: p(0.9) a(0.8) q(0.7) b(0.6) c(0.5) -- positives p and q; candidates a, b, c
    assert raw_positive_ranks([0.8, 0.6, 0.5], [0.9, 0.7], 2) == [0, 2]
    assert raw_positive_ranks([0.8, 0.6, 0.5], [0.9, 0.1], 1) == [0]        # the other one was not retrieved
    # window [1, 3): raw ranks 1 (a) and 2 (q, a positive) -> only a; counting after removal would give a, b
    assert select_negatives([0.8, 0.6, 0.5], [0.9, 0.7], "shifted_random", 5, shift=1, window=3,
                            positive_ranks=[0, 2]) == [0]
    assert select_negatives([0.8, 0.6, 0.5], [0.9, 0.7], "shifted_random_after", 5, shift=1, window=3) == [1, 2]


def test_top_up_is_random_non_positive_corpus_passages():
    rng = random.Random(3)
    out = hn_top_up(["a"], 4, ["a", "b", "c", "p", "d", "e"], ["p"], rng)
    assert len(out) == 4 and out[0] == "a" and "p" not in out
    assert hn_top_up(["a", "b"], 2, ["x"], [], random.Random(0)) == ["a", "b"]        # full: untouched
    assert hn_top_up([], 3, [], [], random.Random(0)) == []                              # no corpus: as is


@pytest.mark.parametrize("seed", [0, 1])
def test_more_than_k_in_the_window_are_sampled_in_draw_order(seed):
    a = select_negatives([0.9 - 0.01 * i for i in range(30)], [0.95], "shifted_random", 4, shift=2, window=30,
                         seed=seed)
    assert len(set(a)) == 4 and all(2 <= i < 30 for i in a)
    assert a == random.Random(seed).sample(list(range(2, 30)), 4)
