"""Hard-negative selection strategies (METHODS.md 5.2, paper 004 Table 2).

Every strategy maps one query's ranked candidate list (scores s_1 >= s_2 >= ..., positives
already removed) and its positive score(s) to an ordered pool of at most ``k`` indices into
that list:

============== ===================================================== ===========
strategy       rule                                                  parameter
============== ===================================================== ===========
naive          the first k candidates                                -
shifted        drop ranks 1..shift, then the next k                  ``shift``
shifted_random FlagEmbedding's ``hn_mine``: the window of *raw* ranks     ``shift``,
               shift+1..window (positives counted), positives and    ``window``
               the query's own text removed inside it, k drawn
               (seeded) when more remain, a short pool topped up
               with random corpus passages (``rows.py``)
shifted_random_after  k drawn (seeded) from ranks shift+1..window    ``shift``,
               counted after the positives are removed, in rank      ``window``
               order, short pools left short (the earlier rule)
abs            keep s <= threshold, then the first k                 ``threshold``
margin_pos     keep s <= s_pos - margin, then the first k            ``margin``
perc_pos       keep s <= s_pos - |s_pos| (1 - percent), first k      ``percent``
============== ===================================================== ===========

Every rule is inclusive (<=), as the code of sentence-transformers and NeMo-Curator is.
PercPos is sign-safe: p * s_pos would lie *above* a negative positive score (NeMo-Curator's
bug, sentence-transformers issue #3819), s_pos - |s_pos| (1 - p) never does.  With several
positives, s_pos is their minimum (NVIDIA's miner, the default) or maximum (paper 004's
wording), chosen by ``pos_agg``.  ``shifted_random_after`` returns its draw in rank order;
``shifted_random`` in the order FlagEmbedding's ``random.sample`` draws it (Python's ``random``, seeded per
row), rank order when the window holds no more than k.

``shifted_random`` follows FlagEmbedding ``scripts/hn_mine.py`` (``find_knn_neg``): the search returns the
top ``window`` passages *including* the query's positives, the slice ``[shift, window)`` of that raw list is
taken, positives and passages equal to the query text are dropped from the slice, k are sampled when more
remain, and a pool still short of k is topped up with random corpus passages that are not positives
(:func:`hn_top_up`).  Our candidate lists arrive with the positives removed, so the caller passes the raw
ranks the positives held (``positive_ranks``; :func:`raw_positive_ranks` recovers them from the scores)
and the candidates to drop after the window (``exclude``: the query's own text, judged false negatives).
"""
from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.errors import ConfigError

log = logging.getLogger(__name__)

STRATEGIES = ("naive", "shifted", "shifted_random", "shifted_random_after", "abs", "margin_pos", "perc_pos")
POSITIVE_RELATIVE = ("margin_pos", "perc_pos")
POS_AGGREGATES = ("min", "max")


@dataclass
class Selection:
    """A pool and why the other candidates are not in it (counts per rule, for the mining report)."""

    indices: list[int]
    threshold: float | None = None        # the score bound of a threshold strategy
    removed: dict[str, int] = field(default_factory=dict)   # rule -> candidates it removed


def _as_scores(values, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be numbers, got {values!r}") from None
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{what} must be finite, got {arr.tolist()}")
    return arr


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def positive_threshold(positive_scores, strategy: str, *, margin: float = 0.15, percent: float = 0.9,
                       pos_agg: str = "min") -> float:
    """The score bound of a positive-relative strategy (candidates at or below it are kept)."""
    if pos_agg not in POS_AGGREGATES:
        raise ConfigError(f"pos_agg must be one of {', '.join(POS_AGGREGATES)}, got {pos_agg!r}")
    pos = _as_scores(positive_scores, "positive_scores")
    if pos.size == 0:
        raise ConfigError(f"strategy {strategy!r} needs at least one positive score (the query has no positive)")
    s_pos = float(pos.min() if pos_agg == "min" else pos.max())
    if strategy == "margin_pos":
        return s_pos - _check_float("margin", margin)
    if strategy == "perc_pos":
        p = _check_float("percent", percent)
        if not 0.0 < p <= 1.0:
            raise ConfigError(f"percent must lie in (0, 1], got {percent!r} (e.g. 0.9 for 90%)")
        return s_pos - abs(s_pos) * (1.0 - p)
    raise ConfigError(f"strategy {strategy!r} has no positive-relative threshold")


def raw_positive_ranks(candidate_scores, positive_scores, retrieved: int) -> list[int]:
    """The 0-based ranks the ``retrieved`` best positives held in the raw ranking (candidates and positives
    together, by descending score; a positive ties ahead of a candidate), before they were removed."""
    cands = _as_scores(candidate_scores, "candidate_scores")
    pos = sorted(_as_scores(positive_scores, "positive_scores").tolist(), reverse=True)[:max(0, int(retrieved))]
    # candidates strictly above the positive, plus the better positives before it
    return [int(np.sum(cands > p)) + j for j, p in enumerate(pos)]


def hn_mine_window(n_candidates: int, start: int, end: int | None, k: int, rng: random.Random, *,
                   positive_ranks: Sequence[int] = (), exclude: Sequence[int] = ()) -> tuple[list[int], int]:
    """FlagEmbedding's window on raw ranks: candidate indices whose raw rank lies in ``[start, end)``
    (``positive_ranks`` occupy raw ranks but are no candidates), less ``exclude``, sampled down to ``k``
    with ``rng.sample``.  Returns the picks and how many candidates the window held before sampling."""
    taken = set(int(r) for r in positive_ranks)
    skip = set(int(c) for c in exclude)
    total = n_candidates + len(taken)
    stop = total if end is None else min(int(end), total)
    kept: list[int] = []
    c = -1
    for raw in range(stop):
        if raw in taken:
            continue
        c += 1
        if raw >= start and c not in skip:
            kept.append(c)
    held = len(kept)
    if held > k:
        kept = rng.sample(kept, k)
    return kept, held


def hn_top_up(negatives: Sequence[str], k: int, corpus: Sequence[str], positives: Sequence[str],
              rng: random.Random) -> list[str]:
    """FlagEmbedding's top-up of a short pool: ``k - len + len(positives)`` random corpus passages, those
    that are positives dropped, the first ``k - len`` appended (duplicates of picked negatives possible, as
    there)."""
    out = list(negatives)
    if len(out) >= k or not corpus:
        return out
    draw = rng.sample(list(corpus), min(len(corpus), k - len(out) + len(positives)))
    pos = set(positives)
    out.extend([t for t in draw if t not in pos][:k - len(out)])
    return out


def select(candidate_scores, positive_scores, strategy: str, k: int, *, shift: int = 10, threshold: float = 0.6,
           margin: float = 0.15, percent: float = 0.9, pos_agg: str = "min", window: int | None = None,
           seed: int | np.random.Generator | random.Random = 0, positive_ranks: Sequence[int] = (),
           exclude: Sequence[int] = ()) -> Selection:
    """:func:`select_negatives` with the threshold used and the number each rule removed."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown selection strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    k = _check_int("k", k, 1)
    scores = _as_scores(candidate_scores, "candidate_scores")
    if np.any(np.diff(scores) > 0):
        raise ConfigError("candidate_scores must be sorted by descending score (rank 1 first)")
    n = len(scores)
    if strategy == "shifted_random":
        start = _check_int("shift", shift, 0)
        if window is not None and _check_int("window", window, 1) <= shift:
            raise ConfigError(f"window ({window}) must lie beyond shift ({shift})")
        rng = seed if isinstance(seed, random.Random) else random.Random(
            _check_int("seed", seed, 0) if not isinstance(seed, np.random.Generator) else int(seed.integers(2**62)))
        picked, held = hn_mine_window(n, start, window, k, rng, positive_ranks=positive_ranks, exclude=exclude)
        # each candidate is picked, beyond k (pool_size), excluded (counted by the caller) or outside the window
        dropped = len({int(c) for c in exclude if 0 <= int(c) < n})
        return Selection(picked, None, {"window": n - held - dropped, "pool_size": held - len(picked)})
    if strategy in ("naive", "shifted", "shifted_random_after"):
        start = 0 if strategy == "naive" else min(_check_int("shift", shift, 0), n)
        if strategy != "shifted_random_after":
            picked = list(range(start, min(start + k, n)))
            return Selection(picked, None, {"shift": start, "pool_size": max(0, n - start - len(picked))})
        if window is not None and _check_int("window", window, 1) <= shift:
            raise ConfigError(f"window ({window}) must lie beyond shift ({shift})")
        stop = n if window is None else min(int(window), n)
        if isinstance(seed, random.Random):
            raise ConfigError("shifted_random_after draws with numpy: give an integer seed or a numpy Generator")
        gen = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(_check_int("seed", seed, 0))
        span = max(0, stop - start)
        draw = sorted(int(i) + start for i in gen.choice(span, size=min(k, span), replace=False)) if span else []
        return Selection(draw, None, {"shift": start, "window": n - stop, "pool_size": span - len(draw)})
    if strategy == "abs":
        bound = _check_float("threshold", threshold)
    else:
        bound = positive_threshold(positive_scores, strategy, margin=margin, percent=percent, pos_agg=pos_agg)
    kept = np.flatnonzero(scores <= bound)   # inclusive, as the anchors' code
    picked = [int(i) for i in kept[:k]]
    return Selection(picked, bound, {"threshold": n - len(kept), "pool_size": len(kept) - len(picked)})


def select_negatives(candidate_scores, positive_scores, strategy: str, k: int, *, shift: int = 10,
                     threshold: float = 0.6, margin: float = 0.15, percent: float = 0.9, pos_agg: str = "min",
                     window: int | None = None, seed: int | np.random.Generator | random.Random = 0,
                     positive_ranks: Sequence[int] = (), exclude: Sequence[int] = ()) -> list[int]:
    """Indices (into the candidate list, sorted by descending score) of at most ``k`` hard negatives.

    ``strategy`` is one of :data:`STRATEGIES`; ``positive_scores`` is one score or a list of them
    (used by ``margin_pos``/``perc_pos`` through ``pos_agg``).  ``window``/``seed`` configure the
    seeded random rank window of ``shifted_random`` / ``shifted_random_after`` (``window`` is the exclusive
    end rank, default the whole list); ``positive_ranks``/``exclude`` are ``shifted_random``'s raw ranks of
    the removed positives and the candidates dropped inside its window.  Bad input raises
    :class:`~harness.errors.ConfigError`.
    """
    return select(candidate_scores, positive_scores, strategy, k, shift=shift, threshold=threshold, margin=margin,
                  percent=percent, pos_agg=pos_agg, window=window, seed=seed, positive_ranks=positive_ranks,
                  exclude=exclude).indices


def sample_from_pool(pool: Sequence[int], n: int, rng: np.random.Generator) -> tuple[list[int], bool]:
    """Draw ``n`` negatives from a pool for one training step: without replacement when the pool
    holds ``n`` or more, else with replacement (an under-full pool, METHODS.md M4: logged).
    Returns the draw and whether the pool was under-full."""
    n = _check_int("n", n, 0)
    if not pool:
        raise ConfigError("cannot sample negatives from an empty pool")
    under = len(pool) < n
    if under:
        log.warning("negative pool holds %d < %d: sampling with replacement", len(pool), n)
    picks = rng.choice(len(pool), size=n, replace=under)
    return [pool[int(i)] for i in picks], under
