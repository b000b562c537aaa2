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

from harness.data.ids import as_id_array, factorize_grouped, group_bounds, hash_ids
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
    def from_arrays(cls, query_ids, doc_ids, scores, name: str = "run", source: str | None = None,
                    check_duplicates: bool = True) -> "Run":
        """Build a run; rows are sorted into trec_eval order (score desc, doc id desc).

        ``check_duplicates=False`` skips the (query, doc) uniqueness check for callers
        that guarantee it (retrievers, or a reader that already checked).
        """
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
        _, qcode = factorize_grouped(q)
        if check_duplicates:
            _check_unique_pairs(q, d, qcode, source)
        order = _trec_order(qcode, s, d)
        return cls(q[order], d[order], s[order], name, source)

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


def _trec_order(qcode: np.ndarray, scores: np.ndarray, doc_ids: np.ndarray) -> np.ndarray:
    """Row order: query, then score descending, then doc id descending (trec_eval).

    Sorting strings is the expensive part, so it is done only for rows whose
    (query, score) ties with a neighbour; untied rows are ordered by numbers alone.
    """
    order = np.lexsort((-scores, qcode))
    qs, ss = qcode[order], scores[order]
    tied_next = (qs[1:] == qs[:-1]) & (ss[1:] == ss[:-1])
    if not tied_next.any():
        return order
    in_tie = np.zeros(len(order), dtype=bool)
    in_tie[1:] |= tied_next
    in_tie[:-1] |= tied_next
    idx = np.flatnonzero(in_tie)
    starts_group = np.ones(len(idx), dtype=bool)
    starts_group[1:] = ~tied_next[idx[1:] - 1]
    group = np.cumsum(starts_group)
    tied_rows = order[idx]
    # ascending by (-group, doc id), reversed: group ascending, doc id descending
    order[idx] = tied_rows[np.lexsort((doc_ids[tied_rows], -group))[::-1]]
    return order


def _check_unique_pairs(q: np.ndarray, d: np.ndarray, qcode: np.ndarray, source: str | None) -> None:
    """Raise InputError if a (query, doc) pair occurs twice (hash, then confirm exactly)."""
    with np.errstate(over="ignore"):
        key = hash_ids(d) ^ (qcode.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    order = np.argsort(key, kind="stable")
    ks = key[order]
    same = np.flatnonzero(ks[1:] == ks[:-1])
    if not len(same):
        return
    candidates = np.unique(np.concatenate((order[same], order[same + 1])))
    seen: set[tuple[str, str]] = set()
    for i in candidates.tolist():
        pair = (str(q[i]), str(d[i]))
        if pair in seen:
            raise InputError(source, f"document {pair[1]!r} appears twice for query {pair[0]!r}")
        seen.add(pair)


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
    return Run.from_arrays(qs, ds, ss, name=name or tag or path.stem, source=str(path), check_duplicates=False)


def write_run(run: Run, path: str | Path, tag: str | None = None) -> None:
    """Write a TREC run atomically (``.gz`` compresses); ranks follow trec_eval order."""
    tag = (tag or run.name or "run").replace(" ", "_")
    ranks = run.ranks().tolist()
    with atomic_write(path) as handle:
        for q, d, r, s in zip(run.query_ids.tolist(), run.doc_ids.tolist(), ranks, run.scores.tolist()):
            handle.write(f"{q} Q0 {d} {r} {s!r} {tag}\n")
