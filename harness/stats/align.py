"""Pairing per-query scores of two systems by query id, with explicit missing-query policy.

A query scored for one system but not the other is never dropped silently:

* ``missing="error"`` (default) raises :class:`MissingQueriesError`, naming how many
  queries are missing on each side and a few examples;
* ``missing="zero"`` scores every missing query as 0 (what ``trec_eval -c`` does
  for a query a run did not answer), and the number filled in on each side is
  recorded in the result.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats.paired import StatisticsError

MISSING_POLICIES = ("error", "zero")
_EXAMPLES = 5

QueryScores = Mapping[str, float] | EvaluationResult | tuple


class MissingQueriesError(StatisticsError):
    """The two systems were not scored on the same queries (and ``missing="error"``)."""


@dataclass(frozen=True)
class PairedScores:
    """Scores of baseline and system on the same queries, in ``query_ids`` order."""

    query_ids: np.ndarray
    base: np.ndarray
    system: np.ndarray
    missing_in_base: int = 0      # queries filled with 0 for the baseline
    missing_in_system: int = 0    # queries filled with 0 for the system

    @property
    def n(self) -> int:
        return len(self.query_ids)

    @property
    def diff(self) -> np.ndarray:
        return self.system - self.base


def query_scores(scores: QueryScores, metric: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(query ids, values)`` from a mapping, an :class:`EvaluationResult` (with ``metric``) or a pair."""
    if isinstance(scores, EvaluationResult):
        if metric is None:
            raise StatisticsError("a metric name is needed to take scores from an EvaluationResult")
        if metric not in scores.per_query:
            known = ", ".join(scores.metrics) or "(none)"
            raise ConfigError(f"metric {metric!r} has no per-query values; available: {known}")
        raw_values: npt.ArrayLike
        raw_ids, raw_values = list(scores.query_ids), scores.per_query[metric]
    elif isinstance(scores, Mapping):
        raw_ids, raw_values = list(scores.keys()), list(scores.values())
    else:
        raw_ids, raw_values = scores
    ids = np.asarray([str(q) for q in raw_ids], dtype=str) if len(raw_ids) else np.asarray([], dtype=str)
    values = np.asarray(raw_values, dtype=np.float64).reshape(-1)
    if len(ids) != len(values):
        raise StatisticsError(f"{len(ids)} query ids but {len(values)} values")
    uniq, counts = np.unique(ids, return_counts=True)
    if np.any(counts > 1):
        raise StatisticsError(f"query {uniq[counts > 1][0]!r} has more than one score")
    return ids, values


def _examples(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(q) for q in list(ids)[:_EXAMPLES])
    return shown + (", ..." if len(ids) > _EXAMPLES else "")


def align(base: QueryScores, system: QueryScores, *, metric: str | None = None, missing: str = "error",
          base_name: str = "baseline", system_name: str = "system") -> PairedScores:
    """Pair two systems' per-query scores by query id (sorted ids), applying the missing policy."""
    if missing not in MISSING_POLICIES:
        raise StatisticsError(f"missing must be one of {', '.join(MISSING_POLICIES)}; got {missing!r}")
    base_ids, base_values = query_scores(base, metric)
    sys_ids, sys_values = query_scores(system, metric)
    only_base = np.setdiff1d(base_ids, sys_ids)
    only_sys = np.setdiff1d(sys_ids, base_ids)
    if (len(only_base) or len(only_sys)) and missing == "error":
        parts = []
        if len(only_base):
            parts.append(f"{len(only_base)} queries scored for {base_name} but not for {system_name} "
                         f"(e.g. {_examples(only_base.tolist())})")
        if len(only_sys):
            parts.append(f"{len(only_sys)} queries scored for {system_name} but not for {base_name} "
                         f"(e.g. {_examples(only_sys.tolist())})")
        what = f" on {metric}" if metric else ""
        raise MissingQueriesError(f"cannot pair {system_name} with {base_name}{what}: " + "; ".join(parts)
                                  + "; evaluate both on the same queries, or score them as 0 (harness compare "
                                  "--missing zero; Python: missing='zero')")
    all_ids = np.union1d(base_ids, sys_ids)
    return PairedScores(all_ids, _reindex(all_ids, base_ids, base_values), _reindex(all_ids, sys_ids, sys_values),
                        missing_in_base=len(only_sys), missing_in_system=len(only_base))


def _reindex(target: np.ndarray, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Values of ``ids`` placed at their positions in sorted ``target``; absent ids get 0."""
    out = np.zeros(len(target), dtype=np.float64)
    out[np.searchsorted(target, ids)] = values
    return out
