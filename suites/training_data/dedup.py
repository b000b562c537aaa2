"""Deduplicating training queries against evaluation queries: exact, normalised text, SimHash.

Paper 000 (tDRO), Table 2 caption: "strict deduplication is performed on all training sets with
Simhash (Manku, Jain, and Sarma 2007) to ensure no overlap between training and testing sets"; the
released script (tdro data/inspect_duplicates.py) drops a training row whose query has any test query
within Hamming distance 2 of its 64-bit SimHash (``SimhashIndex(k=2)`` of the ``simhash`` package), the
test queries being BEIR's test queries and MIRACL's dev topics, after removing ``_``.

The fingerprint here follows the ``simhash`` package's defaults: the text lower-cased, reduced to its
word characters (spaces and punctuation dropped), cut into overlapping character 4-grams, each feature
hashed with MD5 (its low 64 bits) and weighted by its count.  That regular expression drops combining
marks (Indic and Thai vowel signs), so two queries differing only in them share a fingerprint; kept for
parity with tDRO's deduplication (the normalised level keeps the marks).  Three levels, each row attributed to the
first that catches it so the counts add up: ``exact`` (identical text), ``normalised``
(:func:`suites.training_data._release.normalise`), ``simhash`` (distance <= ``max_distance``).
Candidate pairs come from the pigeonhole rule: fingerprints within distance k agree exactly on at least
one of k+1 bit blocks, so only queries sharing a block are compared.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

from harness.errors import ConfigError
from suites.training_data._release import normalise

LEVELS = ("none", "exact", "normalised", "simhash")
_FEATURE_CHARS = re.compile(r"[\w\u4e00-\u9fcc]+")
WIDTH = 4          # character n-gram width (simhash package default)
BITS = 64


def simhash(text: str) -> int:
    """64-bit SimHash of ``text`` (see the module docstring for the features)."""
    content = "".join(_FEATURE_CHARS.findall(text.lower()))
    grams = [content[i:i + WIDTH] for i in range(max(len(content) - WIDTH + 1, 1))]
    totals = [0] * BITS
    for gram, weight in Counter(grams).items():
        h = int.from_bytes(hashlib.md5(gram.encode()).digest(), "big")  # noqa: S324 - a fingerprint, not security
        for bit in range(BITS):
            totals[bit] += weight if (h >> bit) & 1 else -weight
    return sum(1 << bit for bit in range(BITS) if totals[bit] > 0)


@dataclass
class EvalIndex:
    """The evaluation queries, ready for the three checks."""

    level: str
    max_distance: int = 2
    exact: set[str] = field(default_factory=set)
    normalised: set[str] = field(default_factory=set)
    blocks: list[dict[int, list[int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ConfigError(f"dedup must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if not 0 <= self.max_distance < 16:
            raise ConfigError(f"simhash_distance must be in 0..15, got {self.max_distance}")
        self.blocks = [{} for _ in range(self.max_distance + 1)]

    def _spans(self) -> list[tuple[int, int]]:
        n = self.max_distance + 1
        edges = [round(i * BITS / n) for i in range(n + 1)]
        return [(edges[i], edges[i + 1] - edges[i]) for i in range(n)]

    def add(self, text: str) -> None:
        self.exact.add(text)
        norm = normalise(text)
        if norm:
            self.normalised.add(norm)
        if self.level == "simhash" and norm:
            fp = simhash(text.replace("_", ""))
            for table, (start, width) in zip(self.blocks, self._spans()):
                table.setdefault((fp >> start) & ((1 << width) - 1), []).append(fp)

    def match(self, text: str) -> str | None:
        """The first level at which ``text`` duplicates an evaluation query, or None."""
        if self.level == "none":
            return None
        if text in self.exact:
            return "exact"
        if self.level == "exact":
            return None
        norm = normalise(text)
        if norm and norm in self.normalised:
            return "normalised"
        if self.level == "simhash" and norm:
            fp = simhash(text.replace("_", ""))
            for table, (start, width) in zip(self.blocks, self._spans()):
                for other in table.get((fp >> start) & ((1 << width) - 1), ()):
                    if bin(fp ^ other).count("1") <= self.max_distance:
                        return "simhash"
        return None
