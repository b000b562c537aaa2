"""Filling under-full pools with negatives retrieved for generated queries (METHODS.md 5.4), inside
``rows.mine_rows``: which rows are filled, what is eligible, the judge on the additions, provenance.

A row is filled when its pool (after selection and the false-negative filter) holds fewer than
``k``.  Its reference positive (the judge's seeded choice) is summarised and a query is written from
the summary (:mod:`methods.mining.generate`); the candidate pool's sources retrieve for that query
(cached like any candidate list); eligible are candidates that are not a positive (by id, which the
pool already removed, or by text), not already among the row's negatives (by id or text) and not
voted out by the judge for the original query.  With a judge, the first eligible candidates (at most
twice the shortfall) are judged (same filter mode) and only those it keeps are appended, in rank
order, until the pool holds ``k``.  Failed generation calls leave the row as it was (counted in the
report's ``rows_without_query``; the messages go to the log).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.data.beir import Queries
from harness.errors import ConfigError
from methods.mining.generate import (
    GENERATION_SAMPLING,
    GENERATION_VERSION,
    GenerationStats,
    TextCache,
    TextGenerator,
    generate_texts,
)
from methods.mining.judge import JudgeStats
from methods.mining.judge_filter import JudgeFilter, RowJudgement, judge_rows, reference_positive

if TYPE_CHECKING:
    from harness.retrieval.pool import CandidatePool

log = logging.getLogger(__name__)


GENERATION_MODES = ("pdbg", "direct")


@dataclass
class Generation:
    """The generator, its text cache and batch size (``harness mine --generate``)."""

    generator: TextGenerator
    cache: TextCache | None = None
    batch_size: int = 8
    stats: GenerationStats = field(default_factory=GenerationStats)
    # "pdbg": positive-driven back-forward generation (summary of the positive, then a query from the summary;
    # paper 004 §3.4); "direct": the query written from the positive itself, no summary (Table 6's "w/o PDBG")
    mode: str = "pdbg"

    def __post_init__(self) -> None:
        if self.mode not in GENERATION_MODES:
            raise ConfigError(f"unknown generation mode {self.mode!r}; choose one of {', '.join(GENERATION_MODES)}")

    def config(self) -> dict[str, Any]:
        out = {"generator": self.generator.identity(), "prompt_version": GENERATION_VERSION,
               "sampling": [GENERATION_SAMPLING.top_p, GENERATION_SAMPLING.temperature]}
        if self.mode != "pdbg":
            out["mode"] = self.mode
        return out


@dataclass
class GeneratedFill:
    """What generation did for one row."""

    summary_text: str | None
    query: str | None
    needed: int
    texts: list[str] = field(default_factory=list)
    provenance: list[dict[str, Any]] = field(default_factory=list)
    eligible: int = 0
    judged_out: int = 0

    def summary(self) -> dict[str, Any]:
        return {"summary": self.summary_text, "query": self.query, "needed": self.needed, "eligible": self.eligible,
                "judged_out": self.judged_out, "added": len(self.texts)}

    def stats(self) -> dict[str, int]:
        return {"generation_rows": 1, "generated": len(self.texts), "generation_failed": int(self.query is None),
                "generation_judged_out": self.judged_out}


def _round(x: float) -> float | None:
    return None if np.isnan(x) else round(float(x), 7)


def fill_pools(gen: Generation, pool: CandidatePool, rows, idx: Sequence[int], pools, picks: Sequence[list[int]],
               judged: Sequence[RowJudgement | None], corpus_text: dict[str, str], settings,
               flt: JudgeFilter | None, jstats: JudgeStats, *, known_positives: Sequence[Sequence[str]],
               positive_ids: Mapping[str, Sequence[str]]) -> list[GeneratedFill | None]:
    """Fill the rows of one chunk whose pools hold fewer than ``settings.k`` (see the module docstring).
    ``known_positives`` (by row index) are the passages no addition may be: the positives of every row
    with the row's query text (``rows.query_positives``); ``positive_ids`` their corpus ids by row
    (``row<i>``), as the miner already found them."""
    out: list[GeneratedFill | None] = [None] * len(idx)
    todo = [j for j in range(len(idx)) if len(picks[j]) < settings.k]
    if not todo:
        return out
    refs = [rows[idx[j]].pos[reference_positive(settings.seed, idx[j], rows[idx[j]].query, len(rows[idx[j]].pos))]
            for j in todo]
    if gen.mode == "direct":
        summaries: list[str | None] = list(refs)         # the query is written from the positive itself
    else:
        summaries = generate_texts(gen.generator, "summary", refs, seed=settings.seed, cache=gen.cache,
                                   batch_size=gen.batch_size, stats=gen.stats)
    asked = [s for s in summaries if s]
    written = iter(generate_texts(gen.generator, "query", asked, seed=settings.seed, cache=gen.cache,
                                  batch_size=gen.batch_size, stats=gen.stats))
    queries = [next(written) if s else None for s in summaries]
    for problem in gen.stats.problems:
        log.warning("%s", problem)
    gen.stats.problems.clear()
    for j, s, q in zip(todo, summaries, queries):
        out[j] = GeneratedFill(s, q, settings.k - len(picks[j]))
    live = [(j, q) for j, q in zip(todo, queries) if q]
    if not live:
        return out
    positives = {f"row{idx[j]}": list(positive_ids[f"row{idx[j]}"]) for j, _ in live}
    gq = Queries([f"row{idx[j]}" for j, _ in live], [q for _, q in live])
    retrieved = {}
    for chunk in pool.chunks(gq, positives):
        for n, qid in enumerate(chunk.query_ids):
            retrieved[str(qid)] = chunk.pool(n)
    eligible: list[list[int]] = []
    for j, _ in live:
        docs, _, _ = retrieved[f"row{idx[j]}"]
        own_docs, _, _ = pools[j]
        taken = {str(own_docs[r]) for r in picks[j]}
        rj0 = judged[j]
        dropped = {str(own_docs[r]) for r in (rj0.dropped if rj0 is not None else ())}
        seen_text = {corpus_text[d] for d in taken} | {p.strip() for p in known_positives[idx[j]]}
        ok = []
        for r, d in enumerate(docs):
            d, text = str(d), corpus_text[str(d)]
            if d in taken or d in dropped or text.strip() in seen_text:
                continue
            seen_text.add(text.strip())
            ok.append(r)
        eligible.append(ok)
    verdicts: list[RowJudgement | None] = [None] * len(live)
    if flt is not None:     # judge at most twice the shortfall (in rank order): what can still be appended
        eligible = [ok[:2 * (settings.k - len(picks[j]))] for (j, _), ok in zip(live, eligible)]
        texts = [[corpus_text[str(d)] for d in retrieved[f"row{idx[j]}"][0]] for j, _ in live]
        verdicts[:], extra = judge_rows(flt, [rows[idx[j]].query for j, _ in live],
                                        [rows[idx[j]].pos for j, _ in live], texts, eligible,
                                        [idx[j] for j, _ in live], settings.seed)
        jstats.merge(extra)
    for (j, _), ok, rj in zip(live, eligible, verdicts):
        fill = out[j]
        assert fill is not None
        docs, scores, src = retrieved[f"row{idx[j]}"]
        fill.eligible = len(ok)
        votes = {r: (v, lab) for r, v, lab in zip(rj.judged, rj.votes, rj.labels)} if rj is not None else {}
        fill.judged_out = len(rj.dropped) if rj is not None else 0
        names = [s.name for s in pool.sources]
        for r in ok:
            if len(fill.texts) >= fill.needed:
                break
            if rj is not None and r in rj.dropped:
                continue
            fill.texts.append(corpus_text[str(docs[r])])
            fill.provenance.append({"doc_id": str(docs[r]), "rank": r + 1, "score": _round(scores[r]),
                                    "scores": dict(zip(names, (_round(v) for v in src[r]))), "origin": "generated",
                                    **({"votes": votes[r][0], "label": votes[r][1]} if r in votes else {})})
    return out


def generation_report(gen: Generation, stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The generation section of the mining report (paper 004: ~9% of final negatives generated)."""
    added = sum(s.get("generated", 0) for s in stats)
    total = sum(s.get("pool", 0) for s in stats)
    return {**gen.config(), "rows_filled": sum(s.get("generation_rows", 0) for s in stats),
            "rows_without_query": sum(s.get("generation_failed", 0) for s in stats),
            "added": added, "share_of_negatives": added / total if total else 0.0,
            "judged_out": sum(s.get("generation_judged_out", 0) for s in stats)}
