"""What runs and qrels share: rows of (query id, doc id, value) grouped by query."""
from __future__ import annotations

import abc
from collections.abc import Iterator

import numpy as np

from harness.data.ids import as_id_array, group_bounds


class QueryGrouped(abc.ABC):
    """Mixin for columnar tables whose rows are sorted so each query's rows are contiguous.

    Subclasses have ``query_ids``, ``doc_ids``, a ``_bounds`` cache dict, and define
    ``values`` (the third column) and ``_take(mask)`` (a copy with the selected rows).
    """

    query_ids: np.ndarray
    doc_ids: np.ndarray
    _bounds: dict

    @property
    @abc.abstractmethod
    def values(self) -> np.ndarray:
        """The third column (relevance labels or scores)."""

    @abc.abstractmethod
    def _take(self, keep: np.ndarray):
        """A copy holding only the rows where ``keep`` is true."""

    def __len__(self) -> int:
        return len(self.query_ids)

    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(unique query ids, starts, ends)``: the rows of query i are ``starts[i]:ends[i]``."""
        if "b" not in self._bounds:
            starts, ends = group_bounds(self.query_ids)
            self._bounds["b"] = (self.query_ids[starts], starts, ends)
        return self._bounds["b"]

    def query_list(self) -> list[str]:
        return self.bounds()[0].tolist()

    def groups(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """Yield ``(query id, doc ids, values)`` per query, in row order."""
        qids, starts, ends = self.bounds()
        values = self.values
        for qid, s, e in zip(qids.tolist(), starts, ends):
            yield qid, self.doc_ids[s:e], values[s:e]

    def subset(self, query_ids):
        """The rows of the given queries only."""
        return self._take(np.isin(self.query_ids, as_id_array(list(query_ids))))

    def to_dict(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for q, d, v in zip(self.query_ids.tolist(), self.doc_ids.tolist(), self.values.tolist()):
            out.setdefault(q, {})[d] = v
        return out
