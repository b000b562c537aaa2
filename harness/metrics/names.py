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
from typing import Any

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
from harness.registry import Registry

# How each metric treats a cutoff: "required", "optional" or "none".
_CUTOFF_REQUIRED, _CUTOFF_OPTIONAL, _CUTOFF_NONE = "required", "optional", "none"
# What a metric is scored on (MetricKind.scored_on).
SCORED_ON = ("qrels", "answers")


def _scored_on_answers(judged: JudgedRun, cutoff: int) -> np.ndarray:
    raise ConfigError(f"acc@{cutoff} is scored on answer strings, not on relevance judgements: evaluate it under "
                      "a benchmark whose protocol has answers (e.g. MKQA)")


@dataclass(frozen=True)
class MetricKind:
    """A metric family: its per-query function ``compute(judged, cutoff)`` and how it takes a cutoff."""

    # The cutoff argument is an int where ``cutoff`` is "required", None where "none", either if "optional".
    compute: Callable[[JudgedRun, Any], np.ndarray]
    cutoff: str                # "required", "optional" or "none"
    trec_eval: str = ""        # trec_eval measure name without a cutoff ("" if none)
    trec_eval_cut: str | None = None   # with a cutoff; "{k}" is replaced by the cutoff
    description: str = ""
    # What the metric is scored on: "qrels" (relevance judgements, :func:`harness.metrics.evaluate`) or
    # "answers" (answer strings found in the retrieved passages: a benchmark suite with answers scores it).
    scored_on: str = "qrels"

    def __post_init__(self) -> None:
        if self.cutoff not in (_CUTOFF_REQUIRED, _CUTOFF_OPTIONAL, _CUTOFF_NONE):
            raise ConfigError(f"metric kind {self.compute.__name__}: cutoff must be required, optional or none, "
                              f"got {self.cutoff!r}")
        if self.scored_on not in SCORED_ON:
            raise ConfigError(f"metric kind {self.compute.__name__}: scored_on must be one of "
                              f"{', '.join(SCORED_ON)}, got {self.scored_on!r}")

    @property
    def origin(self) -> Callable:
        """The definition the registry names when two metrics claim one name."""
        return self.compute


# Built-in metrics are registered here; other packages add theirs through the
# ``retrieval_harness.metrics`` entry point group (name = a MetricKind object).
METRICS: Registry[MetricKind] = Registry("metric", check=lambda obj: isinstance(obj, MetricKind))

for _name, _kind in {
    "ndcg": MetricKind(ndcg, _CUTOFF_OPTIONAL, "ndcg", "ndcg_cut_{k}", "nDCG (trec_eval ndcg / ndcg_cut.k)"),
    "recall": MetricKind(recall, _CUTOFF_REQUIRED, "", "recall_{k}", "recall@k: relevant in top k / R"),
    "p": MetricKind(precision, _CUTOFF_REQUIRED, "", "P_{k}", "precision@k: relevant in top k / k"),
    "mrr": MetricKind(reciprocal_rank, _CUTOFF_OPTIONAL, "recip_rank", None,
                      "reciprocal rank of the first relevant document (optionally cut at k)"),
    "map": MetricKind(average_precision, _CUTOFF_OPTIONAL, "map", "map_cut_{k}", "mean average precision"),
    "success": MetricKind(success, _CUTOFF_REQUIRED, "", "success_{k}", "1 if a relevant document is in the top k"),
    "r-prec": MetricKind(r_precision, _CUTOFF_NONE, "Rprec", None, "R-precision: relevant in the top R / R"),
    # Scored by the benchmark suites with answer strings (suites.answers.accuracy_at_k), not by evaluate().
    "acc": MetricKind(_scored_on_answers, _CUTOFF_REQUIRED, "", None,
                      "answer accuracy@k: 1 if a top-k passage contains an answer string (MKQA protocol)",
                      scored_on="answers"),
}.items():
    METRICS.register(_name, _kind)


def register_metric(name: str, kind: MetricKind) -> MetricKind:
    """Add a metric family under ``name`` (e.g. from a plug-in package)."""
    return METRICS.register(name, kind)


def known_metrics() -> str:
    """The metric names for error messages, with their cutoff rule (``ndcg[@k], recall@k, ...``)."""
    shown = {_CUTOFF_REQUIRED: "{}@k", _CUTOFF_OPTIONAL: "{}[@k]", _CUTOFF_NONE: "{}"}
    return ", ".join(shown[METRICS.get(n).cutoff].format(n) for n in METRICS.names())


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

@dataclass(frozen=True)
class Metric:
    """A metric and its cutoff, e.g. ``Metric("ndcg", 10)``; ``str()`` gives the canonical name."""

    name: str
    cutoff: int | None = None

    def __post_init__(self) -> None:
        kind = METRICS.get(self.name)
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
        kind = METRICS.get(self.name)
        template = kind.trec_eval if self.cutoff is None else kind.trec_eval_cut
        return template.format(k=self.cutoff) if template else None

    def compute(self, judged: JudgedRun) -> np.ndarray:
        """Per-query values, aligned with ``judged.query_ids``."""
        return METRICS.get(self.name).compute(judged, self.cutoff)


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
    canonical = _ALIASES.get(alias) if alias is not None else None
    if canonical is None and alias is not None and alias in METRICS:
        canonical = alias   # a metric a plug-in registered under its own name
    if canonical is None:
        raise ConfigError(f"unknown metric {text!r}; known metrics: {known_metrics()}")
    assert match is not None   # no match leaves canonical None, refused above
    cutoff_text = match.group("cutoff")
    if cutoff_text is None and alias in _NEED_CUTOFF:
        raise ConfigError(f"metric {text!r} needs a cutoff, e.g. {alias}.10")
    try:
        return Metric(canonical, int(cutoff_text) if cutoff_text is not None else None)
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
