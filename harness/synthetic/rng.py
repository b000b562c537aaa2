"""A random stream whose output is the same on every Python version.

Python guarantees only that ``random.Random(seed).random()`` reproduces across
versions; ``randrange``, ``sample``, ``shuffle`` and ``choices`` may change their
algorithms.  The world must not change under a new interpreter (a benchmark whose
data silently changes is worse than none), so every draw here is built from
``random()`` alone.
"""
from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


class StableRng:
    """The few drawing operations the generator needs, from ``random()`` only."""

    def __init__(self, seed: int):
        self._random = random.Random(seed).random

    def random(self) -> float:
        return self._random()

    def randrange(self, n: int) -> int:
        """Uniform integer in ``[0, n)`` (the float bias, below 2**-40 for our n, is irrelevant)."""
        if n <= 0:
            raise ValueError("randrange needs n > 0")
        return min(int(self._random() * n), n - 1)

    def randint(self, a: int, b: int) -> int:
        """Uniform integer in ``[a, b]``."""
        return a + self.randrange(b - a + 1)

    def choice(self, seq: Sequence[T]) -> T:
        return seq[self.randrange(len(seq))]

    def shuffle(self, items: list) -> None:
        """Fisher-Yates, in place."""
        for i in range(len(items) - 1, 0, -1):
            j = self.randrange(i + 1)
            items[i], items[j] = items[j], items[i]

    def sample(self, population: Sequence[T], k: int) -> list[T]:
        """``k`` distinct elements in random order (partial Fisher-Yates on a copy)."""
        pool = list(population)
        if not 0 <= k <= len(pool):
            raise ValueError(f"sample of {k} from a population of {len(pool)}")
        n = len(pool)
        for i in range(k):
            j = i + self.randrange(n - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]

    def choices(self, population: Sequence[T], cum_weights: Sequence[float], k: int) -> list[T]:
        """``k`` draws with replacement, weighted by the cumulative weights."""
        total = cum_weights[-1]
        hi = len(population) - 1
        return [population[min(bisect.bisect_right(cum_weights, self._random() * total), hi)] for _ in range(k)]


def make_rng(*parts: object) -> StableRng:
    """A stream keyed by any values (SHA-256 of their text, not Python's salted ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return StableRng(int.from_bytes(digest[:16], "little"))
