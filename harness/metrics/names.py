"""Metric names: parsing ``"ndcg@10"`` into hashable value objects.

Canonical names are lower case ``<metric>[@<cutoff>]``: ``ndcg@10``, ``ndcg``,
``recall@100``, ``p@10``, ``mrr``, ``mrr@10``, ``map``, ``map@100``,
``success@10``, ``r-prec``.  Common spellings are accepted and normalised,
including trec_eval's own (``ndcg_cut_10``, ``ndcg_cut.10``, ``P_10``,
``recall.100``, ``recip_rank``, ``map_cut_100``, ``success.10``, ``Rprec``) and
mixed case (``nDCG@10``, ``MRR@10``).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError
from harness.metrics.average_precision import average_precision
from harness.metrics.judged import JudgedRun
from harness.metrics.ndcg import ndcg
from harness.metrics.precision import precision
from harness.metrics.r_precision import r_precision
from harness.metrics.recall import recall
from harness.metrics.reciprocal_rank import reciprocal_rank
from harness.metrics.success import success

# How each metric treats a cutoff: "required", "optional" or "none".
_CUTOFF_REQUIRED, _CUTOFF_OPTIONAL, _CUTOFF_NONE = "required", "optional", "none"


@dataclass(frozen=True)
class _Kind:
    compute: Callable[[JudgedRun, int | None], np.ndarray]
    cutoff: str
    trec_eval: str            # trec_eval measure name; "{k}" is replaced by the cutoff
    trec_eval_cut: str | None


_KINDS: dict[str, _Kind] = {
    "ndcg": _Kind(ndcg, _CUTOFF_OPTIONAL, "ndcg", "ndcg_cut_{k}"),
    "recall": _Kind(recall, _CUTOFF_REQUIRED, "", "recall_{k}"),
    "p": _Kind(precision, _CUTOFF_REQUIRED, "", "P_{k}"),
    "mrr": _Kind(reciprocal_rank, _CUTOFF_OPTIONAL, "recip_rank", None),
    "map": _Kind(average_precision, _CUTOFF_OPTIONAL, "map", "map_cut_{k}"),
    "success": _Kind(success, _CUTOFF_REQUIRED, "", "success_{k}"),
    "r-prec": _Kind(r_precision, _CUTOFF_NONE, "Rprec", None),
}

# Accepted spellings (lower-cased) -> canonical metric.  Names listed in
# _NEED_CUTOFF are trec_eval's cut measures, which make no sense without one.
_ALIASES = {
    "ndcg": "ndcg", "ndcg_cut": "ndcg",
    "recall": "recall", "r": "recall",
    "p": "p", "precision": "p",
    "mrr": "mrr", "recip_rank": "mrr", "rr": "mrr",
    "map": "map", "map_cut": "map", "ap": "map",
    "success": "success", "hit_rate": "success",
    "r-prec": "r-prec", "rprec": "r-prec", "r_prec": "r-prec", "r-precision": "r-prec",
}
_NEED_CUTOFF = {"ndcg_cut", "map_cut"}

_PATTERN = re.compile(r"^(?P<name>[a-z][a-z_\-]*?)(?:[@_.](?P<cutoff>[0-9]+))?$")

KNOWN = "ndcg[@k], recall@k, p@k, mrr[@k], map[@k], success@k, r-prec"


@dataclass(frozen=True)
class Metric:
    """A metric and its cutoff, e.g. ``Metric("ndcg", 10)``; ``str()`` gives the canonical name."""

    name: str
    cutoff: int | None = None

    def __post_init__(self) -> None:
        kind = _KINDS.get(self.name)
        if kind is None:
            raise ConfigError(f"unknown metric {self.name!r}; known metrics: {KNOWN}")
        cutoff = self.cutoff
        if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, (int, np.integer))):
            raise ConfigError(f"metric {self.name!r}: cutoff must be an integer, got {self.cutoff!r}")
        if kind.cutoff == _CUTOFF_REQUIRED and self.cutoff is None:
            raise ConfigError(f"metric {self.name!r} needs a cutoff, e.g. {self.name}@10")
        if kind.cutoff == _CUTOFF_NONE and self.cutoff is not None:
            raise ConfigError(f"metric {self.name!r} takes no cutoff")
        if self.cutoff is not None:
            if self.cutoff < 1:
                raise ConfigError(f"metric {self.name!r}: cutoff must be >= 1, got {self.cutoff}")
            object.__setattr__(self, "cutoff", int(self.cutoff))

    def __str__(self) -> str:
        return self.name if self.cutoff is None else f"{self.name}@{self.cutoff}"

    @property
    def trec_eval_name(self) -> str | None:
        """The trec_eval measure this equals (``ndcg_cut_10``), or None (``mrr@k`` has none)."""
        kind = _KINDS[self.name]
        template = kind.trec_eval if self.cutoff is None else kind.trec_eval_cut
        return template.format(k=self.cutoff) if template else None

    def compute(self, judged: JudgedRun) -> np.ndarray:
        """Per-query values, aligned with ``judged.query_ids``."""
        return _KINDS[self.name].compute(judged, self.cutoff)


def parse_metric(text: str | Metric) -> Metric:
    """Parse a metric name such as ``"ndcg@10"``, ``"nDCG@10"`` or ``"ndcg_cut.10"``.

    Raises :class:`~harness.errors.ConfigError` for unknown names and bad cutoffs.
    """
    if isinstance(text, Metric):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"metric name must be a string, got {text!r}")
    match = _PATTERN.match(text.strip().lower())
    alias = match.group("name") if match else None
    if alias not in _ALIASES:
        raise ConfigError(f"unknown metric {text!r}; known metrics: {KNOWN}")
    cutoff_text = match.group("cutoff")
    if cutoff_text is None and alias in _NEED_CUTOFF:
        raise ConfigError(f"metric {text!r} needs a cutoff, e.g. {alias}.10")
    try:
        return Metric(_ALIASES[alias], int(cutoff_text) if cutoff_text is not None else None)
    except ConfigError as exc:
        raise ConfigError(f"bad metric {text!r}: {exc}") from None


def parse_metrics(texts: Iterable[str | Metric]) -> list[Metric]:
    """Parse several names, dropping repeats (``ndcg@10`` and ``ndcg_cut_10`` are one metric)."""
    if isinstance(texts, (str, Metric)):
        texts = [texts]
    out: list[Metric] = []
    for text in texts:
        metric = parse_metric(text)
        if metric not in out:
            out.append(metric)
    if not out:
        raise ConfigError("no metrics requested")
    return out
