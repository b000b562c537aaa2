"""Per-query evaluation results: the unit that statistics, tables and checks consume."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class EvaluationResult:
    """Per-query metric values (columnar) plus their averages.

    ``per_query[m][i]`` is metric ``m`` of query ``query_ids[i]``.  ``aggregate[m]``
    is the mean over the queries in ``query_ids``; which queries those are (only
    those in both run and qrels, or every judged query as ``trec_eval -c``) is
    recorded in ``options``.
    """

    query_ids: list[str]
    per_query: dict[str, np.ndarray]
    aggregate: dict[str, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, values in self.per_query.items():
            values = np.asarray(values, dtype=np.float64)
            if len(values) != len(self.query_ids):
                raise ValueError(f"metric {name!r} has {len(values)} values for {len(self.query_ids)} queries")
            self.per_query[name] = values
        if not self.aggregate:
            self.aggregate = {m: (float(v.mean()) if len(v) else 0.0) for m, v in self.per_query.items()}

    @property
    def metrics(self) -> list[str]:
        return list(self.per_query)

    def metric(self, name: str) -> dict[str, float]:
        """``{query id: value}`` for one metric."""
        return dict(zip(self.query_ids, self.per_query[name].tolist()))

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        if not per_query:
            return dict(self.aggregate)
        rows = {q: {m: float(self.per_query[m][i]) for m in self.per_query} for i, q in enumerate(self.query_ids)}
        return {"aggregate": dict(self.aggregate), "per_query": rows}

    def to_frame(self, per_query: bool = True) -> pd.DataFrame:
        """A long DataFrame: ``query_id, metric, value`` per query (``per_query``), else ``metric, value,
        n_queries`` per metric (the stored averages).  Tables, exports and notebooks share this shape."""
        import pandas as pd

        if not per_query:
            return pd.DataFrame({"metric": list(self.aggregate),
                                 "value": np.array(list(self.aggregate.values()), dtype=np.float64),
                                 "n_queries": np.full(len(self.aggregate), len(self.query_ids), dtype=np.int64)})
        n = len(self.query_ids)
        return pd.DataFrame({
            "query_id": list(self.query_ids) * len(self.per_query),
            "metric": np.repeat(np.array(list(self.per_query), dtype=object), n),
            "value": np.concatenate(list(self.per_query.values())) if self.per_query else np.zeros(0),
        })
