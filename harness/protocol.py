"""Protocol cards: everything about an evaluation that changes its numbers.

A card travels with every stored result.  Two results may only be compared when
their cards agree on every field that affects scores; otherwise
:func:`assert_comparable` raises :class:`~harness.errors.ProtocolMismatchError`
naming the fields that differ.  Fields that do not affect scores (free-text notes)
live in ``notes`` and are ignored by the comparison.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.errors import ConfigError, ProtocolMismatchError

# How BM25 ranks documents with equal scores (harness.retrieval.bm25): "trec_eval" keeps
# Lucene's exact scores (ties ordered by doc id descending at evaluation, as trec_eval
# does); "pyserini" reproduces Pyserini's LuceneSearcher (4-decimal scores, ties by doc
# id ascending).  The default is left out of the fingerprint, so cards written before the
# field existed keep theirs.
BM25_TIES = ("trec_eval", "pyserini")
DEFAULT_BM25_TIES = BM25_TIES[0]


@dataclass(frozen=True)
class ProtocolCard:
    suite: str = "beir"
    dataset: str = ""
    split: str = "test"
    metrics: tuple[str, ...] = ("ndcg@10", "recall@100")
    relevance_threshold: int = 1
    exclude_self: bool = False          # drop doc == query id from runs (ArguAna, Quora)
    complete: bool = False              # trec_eval -c: average over all judged queries
    top_k: int = 1000                   # depth of the stored run
    query_prompt: str = ""
    doc_prompt: str = ""
    query_max_length: int | None = None
    doc_max_length: int | None = None
    bm25_language: str = "en"
    bm25_ties: str = DEFAULT_BM25_TIES  # BM25 score-tie protocol: one of BM25_TIES
    answer_normalizer: str | None = None  # MKQA-style answer containment
    data_hash: str = ""
    extra: tuple[tuple[str, Any], ...] = ()  # suite-specific fields (e.g. sub-gallery seed)
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.bm25_ties not in BM25_TIES:
            raise ConfigError(f"bm25_ties must be one of {', '.join(BM25_TIES)}, got {self.bm25_ties!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrics"] = list(self.metrics)
        d["extra"] = {k: v for k, v in self.extra}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProtocolCard:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        if "metrics" in kwargs:
            kwargs["metrics"] = tuple(kwargs["metrics"])
        if "extra" in kwargs and isinstance(kwargs["extra"], dict):
            kwargs["extra"] = tuple(sorted(kwargs["extra"].items()))
        return cls(**kwargs)

    def with_(self, **changes: Any) -> ProtocolCard:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(changes)
        if isinstance(d.get("extra"), dict):
            d["extra"] = tuple(sorted(d["extra"].items()))
        return ProtocolCard(**d)

    def scoring_fields(self) -> dict[str, Any]:
        """The fields that change scores (everything but ``notes``)."""
        d = self.to_dict()
        d.pop("notes", None)
        return d

    def fingerprint(self) -> str:
        fields_ = self.scoring_fields()
        if fields_["bm25_ties"] == DEFAULT_BM25_TIES:
            del fields_["bm25_ties"]  # the default keeps the fingerprint cards had before the field
        blob = json.dumps(fields_, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def card_differences(a: ProtocolCard, b: ProtocolCard, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    """Fields whose values differ between two cards: ``{field: (a value, b value)}``."""
    da, db = a.scoring_fields(), b.scoring_fields()
    return {k: (da.get(k), db.get(k)) for k in sorted(set(da) | set(db))
            if k not in ignore and da.get(k) != db.get(k)}


def assert_comparable(a: ProtocolCard, b: ProtocolCard, what: str = "results",
                      ignore: tuple[str, ...] = ("metrics",)) -> None:
    """Refuse to compare results produced under different protocols.

    ``metrics`` is ignored by default: results evaluated with more metrics can be
    compared on the metrics they share.
    """
    diff = card_differences(a, b, ignore)
    if diff:
        parts = ", ".join(f"{k}: {va!r} vs {vb!r}" for k, va, vb in ((k, *v) for k, v in diff.items()))
        raise ProtocolMismatchError(f"cannot compare {what}: protocol cards differ in {parts}")
