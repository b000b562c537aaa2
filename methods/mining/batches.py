"""Monolingual, topic-diverse mini-batches and their loss weights (METHODS.md 5.5, M6/M7).

Batches: a batch holds one language.  Within a language, topics are visited round-robin
(in a seeded shuffled order, or in order of first appearance without shuffling) and each
topic is drawn without replacement; the topic cycle continues across batches and skips
exhausted topics, so every example appears exactly once per epoch.  With shuffling the
language of the next batch is drawn in proportion to the examples it has left (its share
n_l/N at the start of the epoch); without, languages follow in order of first appearance.
A language's last batch may be short; no batch mixes languages.

Weights: the loss is multiplied by the batch mean of w_l(language) + w_t(topic); constants
0.45 / 0.4 by default, or (flagged, our design) ``"portion"``: 0.45 (1/p_l) / mean(1/p_l')
with p_l the language's share of the examples, likewise 0.4 for topics.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from harness.errors import ConfigError

LANGUAGE_WEIGHT = 0.45
TOPIC_WEIGHT = 0.4
WEIGHT_MODES = ("constant", "portion")


def _first_order(labels: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    return groups


def _check_pair(languages: Sequence[Hashable], topics: Sequence[Hashable]) -> None:
    if len(languages) != len(topics):
        raise ConfigError(f"{len(languages)} language labels but {len(topics)} topic labels")


def _language_batches(indices: list[int], topics: Sequence[Hashable], batch_size: int,
                      rng: np.random.Generator | None) -> list[list[int]]:
    queues = list(_first_order([topics[i] for i in indices]).values())
    queues = [[indices[j] for j in q] for q in queues]
    if rng is not None:
        queues = [queues[i] for i in rng.permutation(len(queues))]
        queues = [[q[i] for i in rng.permutation(len(q))] for q in queues]
    heads = [0] * len(queues)
    left, cursor, batches = len(indices), 0, []
    while left:
        batch: list[int] = []
        while len(batch) < batch_size and left:
            while heads[cursor] == len(queues[cursor]):     # skip exhausted topics
                cursor = (cursor + 1) % len(queues)
            batch.append(queues[cursor][heads[cursor]])
            heads[cursor] += 1
            left -= 1
            cursor = (cursor + 1) % len(queues)
        batches.append(batch)
    return batches


def language_topic_batches(languages: Sequence[Hashable], topics: Sequence[Hashable], batch_size: int, *,
                           shuffle: bool = True, seed: int = 0) -> list[list[int]]:
    """One epoch of batches as lists of example indices (see the module docstring)."""
    _check_pair(languages, topics)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    rng = np.random.default_rng(seed) if shuffle else None
    per_language = [_language_batches(idx, topics, batch_size, rng) for idx in _first_order(languages).values()]
    if rng is None:
        return [b for batches in per_language for b in batches]
    remaining = np.array([sum(len(b) for b in batches) for batches in per_language], dtype=np.float64)
    heads = [0] * len(per_language)
    out: list[list[int]] = []
    while remaining.sum() > 0:
        lang = int(rng.choice(len(per_language), p=remaining / remaining.sum()))
        batch = per_language[lang][heads[lang]]
        heads[lang] += 1
        remaining[lang] -= len(batch)
        out.append(batch)
    return out


def _portion(labels: Sequence[Hashable], scale: float) -> dict[Hashable, float]:
    groups = _first_order(labels)
    inverse = {label: len(labels) / len(idx) for label, idx in groups.items()}   # 1 / share
    mean = sum(inverse.values()) / len(inverse)
    return {label: scale * inv / mean for label, inv in inverse.items()}


def loss_weights(languages: Sequence[Hashable], topics: Sequence[Hashable], *, mode: str = "constant",
                 language_weight: float = LANGUAGE_WEIGHT, topic_weight: float = TOPIC_WEIGHT) -> np.ndarray:
    """Per-example w_l + w_t (the batch loss is multiplied by their mean over the batch)."""
    _check_pair(languages, topics)
    if mode not in WEIGHT_MODES:
        raise ConfigError(f"unknown weight mode {mode!r}; choose one of {', '.join(WEIGHT_MODES)}")
    if mode == "constant":
        return np.full(len(languages), language_weight + topic_weight, dtype=np.float64)
    w_l, w_t = _portion(languages, language_weight), _portion(topics, topic_weight)
    return np.array([w_l[lang] + w_t[top] for lang, top in zip(languages, topics)], dtype=np.float64)


def weighted_batch_loss(loss: float, languages: Sequence[Hashable], topics: Sequence[Hashable], **kw) -> float:
    """A batch loss times the mean weight of its examples (METHODS.md M7)."""
    return float(loss) * float(loss_weights(languages, topics, **kw).mean())
