"""Retrieval runs (ranked lists) as columnar arrays, and TREC run file I/O.

A TREC run line is ``qid Q0 docid rank score tag``.  Like trec_eval, the harness
ignores the rank column and orders each query's documents by score descending,
breaking ties by document id descending (``strcmp`` order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from harness.data.ids import as_id_array, factorize, group_bounds
from harness.errors import InputError
from harness.io import atomic_write, open_text


@dataclass(frozen=True)
class Run:
    """A run as parallel arrays, sorted by query id and then in trec_eval rank order."""

    query_ids: np.ndarray
    doc_ids: np.ndarray
    scores: np.ndarray
    name: str = "run"
    source: str | None = None
    _bounds: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_arrays(cls, query_ids, doc_ids, scores, name: str = "run", source: str | None = None) -> "Run":
        """Build a run; rows are sorted into trec_eval order (score desc, doc id desc)."""
        q = as_id_array(query_ids)
        d = as_id_array(doc_ids)
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if not (len(q) == len(d) == len(s)):
            raise ValueError("query_ids, doc_ids and scores must have the same length")
        if len(s) and not np.all(np.isfinite(s)):
            i = int(np.flatnonzero(~np.isfinite(s))[0])
            raise InputError(source, f"score of query {q[i]!r} document {d[i]!r} is not finite ({s[i]})")
        if len(q) == 0:
            return cls(q, d, s, name, source)
        _, dcode = factorize(d)
        order = np.lexsort((-dcode, -s, q))
        q, d, s, dcode = q[order], d[order], s[order], dcode[order]
        # Duplicates are adjacent only if scores tie; check via (q, doc code) pairs.
        pair_order = np.lexsort((dcode, q))
        pq, pd = q[pair_order], dcode[pair_order]
        dup = np.flatnonzero((pq[1:] == pq[:-1]) & (pd[1:] == pd[:-1]))
        if len(dup):
            i = pair_order[dup[0] + 1]
            raise InputError(source, f"document {d[i]!r} appears twice for query {q[i]!r}")
        return cls(q, d, s, name, source)

    @classmethod
    def from_dict(cls, run: Mapping[str, Mapping[str, float]], name: str = "run") -> "Run":
        qs, ds, ss = [], [], []
        for qid, docs in run.items():
            for did, score in docs.items():
                qs.append(str(qid))
                ds.append(str(did))
                ss.append(float(score))
        return cls.from_arrays(qs, ds, ss, name=name)

    def to_dict(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for q, d, s in zip(self.query_ids.tolist(), self.doc_ids.tolist(), self.scores.tolist()):
            out.setdefault(q, {})[d] = s
        return out

    def __len__(self) -> int:
        return len(self.query_ids)

    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(unique query ids, starts, ends)``; rows ``starts[i]:ends[i]`` are query i in rank order."""
        if "b" not in self._bounds:
            starts, ends = group_bounds(self.query_ids)
            self._bounds["b"] = (self.query_ids[starts], starts, ends)
        return self._bounds["b"]

    def query_list(self) -> list[str]:
        return self.bounds()[0].tolist()

    def groups(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """Yield ``(query id, doc ids, scores)`` per query, in rank order."""
        qids, starts, ends = self.bounds()
        for qid, s, e in zip(qids.tolist(), starts, ends):
            yield qid, self.doc_ids[s:e], self.scores[s:e]

    def ranks(self) -> np.ndarray:
        """1-based rank of every row within its query."""
        _, starts, ends = self.bounds()
        ranks = np.arange(len(self), dtype=np.int64)
        return ranks - np.repeat(starts, ends - starts) + 1

    def top_k(self, k: int) -> "Run":
        """Keep the first ``k`` documents of every query (after trec_eval ordering)."""
        keep = self.ranks() <= k
        return Run(self.query_ids[keep], self.doc_ids[keep], self.scores[keep], self.name, self.source)

    def subset(self, query_ids) -> "Run":
        keep = np.isin(self.query_ids, as_id_array(list(query_ids)))
        return Run(self.query_ids[keep], self.doc_ids[keep], self.scores[keep], self.name, self.source)

    def without_self_hits(self) -> "Run":
        """Drop rows whose document id equals the query id (BEIR's ArguAna/Quora protocol)."""
        keep = self.query_ids != self.doc_ids
        return Run(self.query_ids[keep], self.doc_ids[keep], self.scores[keep], self.name, self.source)


def _parse_score(text: str, path, line_no: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, f"score {text!r} is not a number", line_no) from None
    if math.isnan(value) or math.isinf(value):
        raise InputError(path, f"score {text!r} is not finite", line_no)
    return value


def read_run(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``; ``.gz`` allowed)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "run file does not exist")
    qs: list[str] = []
    ds: list[str] = []
    ss: list[float] = []
    seen: dict[tuple[str, str], int] = {}
    tag = None
    with open_text(path) as handle:
        for line_no, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            cols = raw.split()
            if len(cols) != 6:
                raise InputError(path, f"expected 6 columns (qid Q0 docid rank score tag), got {len(cols)}", line_no)
            qid, _, did, rank_text, score_text, tag = cols
            try:
                int(rank_text)
            except ValueError:
                raise InputError(path, f"rank {rank_text!r} is not an integer", line_no) from None
            score = _parse_score(score_text, path, line_no)
            key = (qid, did)
            if key in seen:
                raise InputError(path, f"document {did!r} appears twice for query {qid!r} (first on line {seen[key]})", line_no)
            seen[key] = line_no
            qs.append(qid)
            ds.append(did)
            ss.append(score)
    if not qs:
        raise InputError(path, "run file contains no results")
    return Run.from_arrays(qs, ds, ss, name=name or tag or path.stem, source=str(path))


def write_run(run: Run, path: str | Path, tag: str | None = None) -> None:
    """Write a TREC run atomically (``.gz`` compresses); ranks follow trec_eval order."""
    tag = (tag or run.name or "run").replace(" ", "_")
    ranks = run.ranks().tolist()
    with atomic_write(path) as handle:
        for q, d, r, s in zip(run.query_ids.tolist(), run.doc_ids.tolist(), ranks, run.scores.tolist()):
            handle.write(f"{q} Q0 {d} {r} {s!r} {tag}\n")
