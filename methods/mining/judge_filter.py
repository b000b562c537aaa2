"""The false-negative filter inside mining (``rows.mine_rows``): which candidates the judge sees,
the positive it reads as the reference, what it removes, and the report's filter section.

A query's candidates that the selection could still keep are judged: for threshold strategies
those at or below the threshold (the rest are out anyway), for rank strategies all of them (the
shift then counts ranks of the filtered list).  To bound the calls, ``only_rows`` judges a subset
of rows and ``depth`` each row's first candidates only (the rest stay unjudged: kept).  The
reference positive is a seeded choice among the query's positives (the released code draws
``random.choice``).  Candidates whose voted label the filter mode does not keep are removed before
the selection takes its ``k``, as paper 004 judges the 40 candidates before the pool of 30 is taken.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import ConfigError
from methods.mining.judge import Judge, JudgeStats, Triple, judge_triples
from methods.mining.judge_cache import VoteCache
from methods.mining.votes import FAILED, FILTER_MODES, keeps


@dataclass
class JudgeFilter:
    judge: Judge
    mode: str = "keep_zero"
    cache: VoteCache | None = None
    batch_size: int = 16
    only_rows: frozenset[int] | None = None     # judge only these rows (a subset bounding the calls)
    depth: int | None = None                    # judge only each row's first ``depth`` candidates
    # The judge reads the reference positive (paper 004 App. B.2) or, without it (Table 5's "w/o ground-truth"),
    # an empty Standard Answer: the prompt then judges against the question only.
    reference: bool = True

    def __post_init__(self) -> None:
        if self.mode not in FILTER_MODES:
            raise ConfigError(f"unknown filter mode {self.mode!r}; choose one of {', '.join(FILTER_MODES)}")

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"judge": self.judge.identity(), "prompt_version": self.judge.prompt_version,
                               "mode": self.mode}
        if self.depth is not None:
            out["depth"] = self.depth
        if not self.reference:
            out["reference"] = False
        if self.only_rows is not None:
            out["only_rows"] = {"count": len(self.only_rows), "digest": hashlib.sha256(
                json.dumps(sorted(self.only_rows)).encode()).hexdigest()[:16]}
        return out


@dataclass
class RowJudgement:
    positive: int                       # index of the reference positive
    judged: list[int]                   # candidate indices judged, rank order
    votes: list[list[int]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    dropped: set[int] = field(default_factory=set)


def reference_positive(seed: int, row: int, query: str, n_pos: int) -> int:
    digest = hashlib.sha256(f"judge|{seed}|{row}|{query}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % n_pos


def judge_rows(flt: JudgeFilter, queries: Sequence[str], positives: Sequence[Sequence[str]],
               candidates: Sequence[Sequence[str]], to_judge: Sequence[Sequence[int]], row_ids: Sequence[int],
               seed: int) -> tuple[list[RowJudgement], JudgeStats]:
    """Judge ``candidates[j][r]`` for every r in ``to_judge[j]`` of each row j (one batched pass)."""
    rows: list[RowJudgement] = []
    triples: list[Triple] = []
    for j, query in enumerate(queries):
        p = reference_positive(seed, row_ids[j], query, len(positives[j]))
        skip = flt.only_rows is not None and row_ids[j] not in flt.only_rows
        rows.append(RowJudgement(p, [] if skip else list(to_judge[j])[:flt.depth]))
        reference = positives[j][p] if flt.reference else ""
        triples.extend(Triple(query, reference, candidates[j][r]) for r in rows[-1].judged)
    verdicts, stats = judge_triples(flt.judge, triples, seed=seed, cache=flt.cache, batch_size=flt.batch_size)
    it = iter(verdicts)
    for rj in rows:
        for r in rj.judged:
            v = next(it)
            rj.votes.append(v.votes)
            rj.labels.append(v.label)
            if not keeps(v.label, flt.mode):
                rj.dropped.add(r)
    return rows, stats


def filter_stats(rj: RowJudgement) -> dict[str, int]:
    out = {"judged": len(rj.judged), "judge": len(rj.dropped)}
    for label in (0, 1, 2, FAILED):
        out[f"label_{label}"] = sum(x == label for x in rj.labels)
    out["failed_votes"] = sum(x == FAILED for v in rj.votes for x in v)
    return out


def filter_report(flt: JudgeFilter, stats: list[dict[str, Any]], judge_stats: JudgeStats) -> dict[str, Any]:
    """The filter section of the mining report (votes, labels, share removed, problems)."""
    judged = sum(s.get("judged", 0) for s in stats)
    removed = sum(s.get("judge", 0) for s in stats)
    failed = sum(s.get("failed_votes", 0) for s in stats)
    out: dict[str, Any] = {
        **flt.config(),
        "judged": judged,
        "removed": removed,
        "removed_share_of_judged": removed / judged if judged else 0.0,
        "labels": {str(k): sum(s.get(f"label_{k}", 0) for s in stats) for k in (0, 1, 2, FAILED)},
        "failed_votes": failed,
        "unlabelled_replies": judge_stats.unlabelled,
        "failed_calls": judge_stats.failed_calls,
        "problems": judge_stats.problems,
    }
    if failed:
        out["message"] = (f"{failed} judge votes are -1 (a failed call or a reply without a label 0/1/2) and were "
                          f"dropped from their votes; {sum(s.get('label_-1', 0) for s in stats)} candidates had no "
                          f"valid vote ({'removed' if flt.mode == 'keep_zero' else 'kept'} under {flt.mode})")
    return out


def judge_set(scores: np.ndarray, threshold: float | None) -> list[int]:
    """The candidates worth judging: those at or below a threshold strategy's bound, else all."""
    if threshold is None:
        return list(range(len(scores)))
    return [int(i) for i in np.flatnonzero(scores <= threshold)]
