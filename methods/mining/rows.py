"""Mine hard negatives for training rows: candidate pools -> a selection strategy -> mined rows.

Input rows are the harness's ``{"query", "pos", "neg"}`` lines.  The corpus searched is a given
BEIR corpus, or else every distinct passage of the rows (their positives and existing negatives,
ids from the text's hash), as sentence-transformers' miner does.  A candidate whose text equals one
of the query's positives is removed with the positives (duplicates cannot become negatives).

Rows that share their query text (SciFact train has two such pairs of claims with different qrels:
queries 89 and 90 judge two and one of the same documents) are one query: the positives of every
such row are removed from each row's candidates and all of them set its positive score (the minimum,
by default).  Otherwise a document judged relevant to the very same text could be mined as its
negative, and the threshold would depend on which copy of the query a row is.  sentence-transformers'
miner, which groups its pairs by query text, does the same.

Outputs, next to ``out`` (a ``.jsonl`` file ``harness train --data`` reads):

* ``out``: the rows with ``neg`` replaced by the mined negatives (other keys kept);
* ``<stem>.provenance.jsonl``: per row, each negative's document id, rank, fused score and per-source
  scores, the positive scores, the threshold and what each rule removed;
* ``<stem>.report.json``: the configuration and the mining report (candidates per query, share
  removed by each rule, pool fill, under-full pools; with a judge, the filter's section: labels,
  share removed, -1 votes with example messages).

With a false-negative judge (``judge_filter``), the candidates are judged before the selection
takes its pool (``judge_filter.py``); the provenance holds every vote and the vote cache makes a
rerun or a resumed run ask the judge nothing it already answered.

Work is stored per candidate chunk in ``.<name>.parts/`` (atomic files), so a killed run resumes
with the chunks it lacks; the final files are written atomically and the parts removed.  The same
inputs and settings give byte-identical outputs (the random window draws from a seed derived from
the mining seed and the row).
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.beir import Corpus, Queries
from harness.data.training import TrainingRow
from harness.errors import ConfigError
from harness.io import atomic_write, atomic_write_json
from harness.progress import bar_disabled
from harness.retrieval.pool import CandidatePool
from methods.mining.fill import GeneratedFill, Generation, fill_pools, generation_report
from methods.mining.judge import JudgeStats
from methods.mining.judge_filter import JudgeFilter, RowJudgement, filter_report, filter_stats, judge_rows, judge_set
from methods.mining.selection import (
    POSITIVE_RELATIVE,
    STRATEGIES,
    hn_top_up,
    positive_threshold,
    raw_positive_ranks,
    select,
)

RULES = ("positive", "judge", "shift", "window", "threshold", "pool_size")
PARTS_CONFIG = "config.json"


@dataclass(frozen=True)
class MiningSettings:
    """The selection step (METHODS.md 5.2) and its parameters."""

    strategy: str = "perc_pos"
    k: int = 30
    shift: int = 10
    window: int | None = None
    threshold: float = 0.6
    margin: float = 0.15
    percent: float = 0.9
    pos_agg: str = "min"
    seed: int = 0
    # A pool smaller than min(min_pool, k) is under-full: a training step draws 7 negatives (paper 004)
    # and samples such a pool with replacement; a pool of k < 7 is full when it holds k.
    min_pool: int = 7

    def check(self, pool: CandidatePool) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown selection strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.strategy in (*POSITIVE_RELATIVE, "abs") and not pool.scores_are_cosines:
            raise ConfigError(f"strategy {self.strategy!r} compares scores with a threshold, which needs cosine "
                              "scores (dense sources with fusion 'mean'); rank fusions and BM25 suit naive/shifted")
        select([1.0, 0.5], [0.9], self.strategy, self.k, shift=self.shift, threshold=self.threshold,
               margin=self.margin, percent=self.percent, pos_agg=self.pos_agg, window=self.window, seed=self.seed)


def passage_id(text: str) -> str:
    return "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def rows_corpus(rows: Sequence[TrainingRow]) -> Corpus:
    """Every distinct passage of the rows (positives, then negatives), in order of first appearance."""
    seen: dict[str, None] = {}
    for row in rows:
        for text in (*row.pos, *row.neg):
            seen.setdefault(text, None)
    texts = list(seen)
    return Corpus([passage_id(t) for t in texts], [""] * len(texts), texts, source="training rows")


def _row_seed(seed: int, i: int, query: str) -> int:
    digest = hashlib.sha256(f"{seed}|{i}|{query}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def query_positives(rows: Sequence[TrainingRow]) -> list[list[str]]:
    """Per row, the positives of every row with the same query text (stripped), in order of first
    appearance: what the row's negatives must avoid and what sets its positive score."""
    by_query: dict[str, dict[str, None]] = {}
    for row in rows:
        known = by_query.setdefault(row.query.strip(), {})
        for p in row.pos:
            known.setdefault(p, None)
    return [list(by_query[row.query.strip()]) for row in rows]


def _positives(known: Sequence[Sequence[str]], corpus: Corpus) -> dict[str, list[str]]:
    by_text: dict[str, list[str]] = {}
    for doc_id, text in zip(corpus.ids, corpus.passages()):
        by_text.setdefault(text, []).append(doc_id)
    return {f"row{i}": sorted({d for p in pos for d in by_text.get(p.strip(), [])}) for i, pos in enumerate(known)}


def _row_json(row: TrainingRow, negatives: list[str]) -> str:
    # The row's other keys are kept, except the line number and the ids of the negatives it replaces
    # (a BEIR training source's ``neg_ids``): the provenance names the new negatives.
    extra = {k: v for k, v in row.meta.items() if k not in ("line", "neg_ids")}
    return json.dumps({"query": row.query, "pos": row.pos, "neg": negatives, **extra}, ensure_ascii=False)


def _float(x: float) -> float | None:
    return None if np.isnan(x) else round(float(x), 7)


def _bound(settings: MiningSettings, pos_scores: np.ndarray) -> float | None:
    if settings.strategy == "abs":
        return settings.threshold
    if settings.strategy in POSITIVE_RELATIVE:
        return positive_threshold(pos_scores, settings.strategy, margin=settings.margin, percent=settings.percent,
                                  pos_agg=settings.pos_agg)
    return None


def _mine_chunk(chunk, rows, known, positives, corpus_text, pool, settings, source_names,
                flt: JudgeFilter | None = None,
                generation: Generation | None = None,
                corpus_order: Sequence[str] = ()) -> tuple[list[str], list[str], list[dict], dict]:
    idx = [int(q[3:]) for q in chunk.query_ids]
    hn_mine = settings.strategy == "shifted_random"      # FlagEmbedding's rule: raw ranks count the positives
    need_pos = settings.strategy in POSITIVE_RELATIVE or pool.scores_are_cosines or hn_mine
    pos_scores = pool.pair_scores(Queries([f"row{i}" for i in idx], [rows[i].query for i in idx]),
                                  [known[i] for i in idx]) if need_pos else [np.zeros(0)] * len(idx)
    pools = [chunk.pool(j) for j in range(len(idx))]
    judged: list[RowJudgement | None] = [None] * len(idx)
    jstats = JudgeStats()
    if flt is not None:     # the false-negative filter: one batched judging pass over the chunk
        texts = [[corpus_text[str(d)] for d in docs] for docs, _, _ in pools]
        to_judge = [judge_set(np.asarray(sc, np.float64), _bound(settings, pos_scores[j]))
                    for j, (_, sc, _) in enumerate(pools)]
        judged[:], jstats = judge_rows(flt, [rows[i].query for i in idx], [rows[i].pos for i in idx], texts,
                                       to_judge, idx, settings.seed)
    picks, sels, topped = [], [], []
    for j, i in enumerate(idx):
        docs, scores, src = pools[j]
        rj = judged[j]
        if hn_mine:
            # the window on raw ranks (the removed positives hold theirs), then the query's own text and the
            # judged false negatives dropped inside it; a short pool is topped up from the corpus below
            rng = random.Random(_row_seed(settings.seed, i, rows[i].query))
            query_text = [r for r in range(len(docs)) if corpus_text[str(docs[r])] == rows[i].query]
            dropped = sorted(set(query_text) | (rj.dropped if rj is not None else set()))
            sel = select(np.asarray(scores), pos_scores[j], settings.strategy, settings.k, shift=settings.shift,
                         window=settings.window, seed=rng, exclude=dropped,
                         positive_ranks=raw_positive_ranks(scores, pos_scores[j], int(chunk.positives_removed[j])))
            if query_text:
                sel.removed["positive"] = sel.removed.get("positive", 0) + len(query_text)
            picks.append(list(sel.indices))
            sels.append(sel)
            topped.append(rng)
            continue
        keep = [r for r in range(len(docs)) if rj is None or r not in rj.dropped]
        sel = select(np.asarray(scores)[keep], pos_scores[j], settings.strategy, settings.k, shift=settings.shift,
                     threshold=settings.threshold, margin=settings.margin, percent=settings.percent,
                     pos_agg=settings.pos_agg, window=settings.window, seed=_row_seed(settings.seed, i, rows[i].query))
        picks.append([keep[t] for t in sel.indices])
        sels.append(sel)
    generated: list[GeneratedFill | None] = [None] * len(idx)
    if generation is not None:
        generated = fill_pools(generation, pool, rows, idx, pools, picks, judged, corpus_text, settings, flt, jstats,
                               known_positives=known, positive_ids=positives)
    out_rows, prov_rows, stats = [], [], []
    for j, i in enumerate(idx):
        docs, scores, src = pools[j]
        rj, sel, picked, gen = judged[j], sels[j], picks[j], generated[j]
        negatives = [corpus_text[str(docs[r])] for r in picked] + (gen.texts if gen is not None else [])
        top_up: list[str] = []
        if hn_mine and len(negatives) < settings.k:
            # FlagEmbedding's top-up: random corpus passages that are not the row's positives
            top_up = hn_top_up(negatives, settings.k, corpus_order, known[i], topped[j])[len(negatives):]
            negatives += top_up
        out_rows.append(_row_json(rows[i], negatives))
        votes: dict[int, tuple[list[int], int]] = {}
        if rj is not None:
            votes = {r: (v, lab) for r, v, lab in zip(rj.judged, rj.votes, rj.labels)}
        removed = {**sel.removed, **({"judge": len(rj.dropped)} if rj is not None else {})}
        origin = {"origin": "retrieved"} if generation is not None else {}
        prov = {"row": i, "line": rows[i].meta.get("line"), "candidates": len(docs),
                "positives_removed": int(chunk.positives_removed[j]),
                "positive_scores": [_float(s) for s in pos_scores[j]],
                "threshold": None if sel.threshold is None else _float(sel.threshold), "removed": removed,
                "negatives": [{"doc_id": str(docs[r]), "rank": int(r) + 1, "score": _float(scores[r]),
                               "scores": dict(zip(source_names, (_float(v) for v in src[r]))), **origin,
                               **({"votes": votes[r][0], "label": votes[r][1]} if r in votes else {})}
                              for r in picked] + (gen.provenance if gen is not None else [])
                             + [{"doc_id": passage_id(t), "origin": "random"} for t in top_up]}
        if rj is not None:   # every vote, kept or not
            prov["judge"] = {"positive": rj.positive,
                             "judged": [{"doc_id": str(docs[r]), "rank": int(r) + 1, "votes": v, "label": lab,
                                         "kept": r not in rj.dropped}
                                        for r, v, lab in zip(rj.judged, rj.votes, rj.labels)]}
        if gen is not None:
            prov["generation"] = gen.summary()
        prov_rows.append(json.dumps(prov, ensure_ascii=False))
        row_stats = {"candidates": len(docs), "positive": int(chunk.positives_removed[j]),
                     "pool": len(negatives), **removed, **(filter_stats(rj) if rj is not None else {})}
        if gen is not None:
            row_stats.update(gen.stats())
        stats.append(row_stats)
    run = {"unlabelled": jstats.unlabelled, "failed_calls": jstats.failed_calls, "problems": jstats.problems}
    return out_rows, prov_rows, stats, run


def _report(stats: list[dict], settings: MiningSettings) -> dict[str, Any]:
    n = len(stats)
    cands = np.array([s["candidates"] for s in stats], dtype=np.float64)
    pools = np.array([s["pool"] for s in stats], dtype=np.float64)
    retrieved = cands.sum() + sum(s["positive"] for s in stats)
    removed = {r: sum(s.get(r, 0) for s in stats) for r in RULES}
    return {
        "rows": n,
        "retrieved": int(retrieved),
        "negatives": int(pools.sum()),
        "candidates_per_query": {"mean": float(cands.mean()) if n else 0.0, "min": int(cands.min()) if n else 0,
                                 "max": int(cands.max()) if n else 0},
        # share of all retrieved documents each rule removed (pool_size: beyond k)
        "removed_share": {r: (v / retrieved if retrieved else 0.0) for r, v in removed.items()},
        "removed": removed,
        "pool_fill": float(pools.mean() / settings.k) if n else 0.0,
        "full_pools": int((pools >= settings.k).sum()),
        "under_full_pools": int((pools < min(settings.min_pool, settings.k)).sum()),
        "empty_pools": int((pools == 0).sum()),
    }


def mine_rows(rows: Sequence[TrainingRow], pool_factory: Callable[[Corpus], CandidatePool], out: str | Path,
              settings: MiningSettings, *, corpus: Corpus | None = None, progress: bool = False,
              overwrite: bool = False, judge_filter: JudgeFilter | None = None,
              generation: Generation | None = None) -> dict[str, Any]:
    """Mine negatives for ``rows`` and write ``out`` with its provenance and report (see the module doc).
    ``pool_factory`` builds the candidate pool for the corpus searched; ``judge_filter`` removes the
    candidates an LLM judge votes false negatives (METHODS.md 5.3); ``generation`` fills pools that hold
    fewer than ``k`` with negatives retrieved for LLM-generated queries (5.4).  Returns the report."""
    out = Path(out)
    prov_path, report_path = out.with_name(out.stem + ".provenance.jsonl"), out.with_name(out.stem + ".report.json")
    if not overwrite:
        for path in (out, prov_path, report_path):
            if path.exists():
                raise ConfigError(f"{path} exists; pass --overwrite to replace it")
    if not rows:
        raise ConfigError("no training rows to mine")
    corpus = corpus if corpus is not None else rows_corpus(rows)
    pool = pool_factory(corpus)
    settings.check(pool)
    queries = Queries([f"row{i}" for i in range(len(rows))], [r.query for r in rows])
    known = query_positives(rows)
    positives = _positives(known, corpus)
    config = {"format": 1, "pool": pool.config(), "corpus": corpus.content_hash(), "queries": queries.content_hash(),
              "positives": pool.key(queries, positives), "selection": asdict(settings),
              **({"filter": judge_filter.config()} if judge_filter is not None else {}),
              **({"generation": generation.config()} if generation is not None else {})}
    parts = out.with_name(f".{out.name}.parts")
    if (parts / PARTS_CONFIG).is_file():
        if json.loads((parts / PARTS_CONFIG).read_text(encoding="utf-8")) != config:
            shutil.rmtree(parts)                    # parts of other settings: ours, stale
    atomic_write_json(parts / PARTS_CONFIG, config)
    corpus_text = dict(zip(corpus.ids, corpus.passages()))
    # shifted_random's top-up draws from the corpus in its order (FlagEmbedding: its list of distinct texts)
    corpus_order = list(corpus_text.values()) if settings.strategy == "shifted_random" else []
    names = [s.name for s in pool.sources]
    from tqdm import tqdm

    bar = tqdm(total=len(rows), unit="query", desc="mining", disable=bar_disabled(progress))
    all_stats: list[dict] = []
    judge_stats = JudgeStats()
    chunk_no = 0
    for chunk in pool.chunks(queries, positives):
        done = parts / f"part-{chunk_no:05d}.json"
        if done.is_file():
            part = json.loads(done.read_text(encoding="utf-8"))
        else:
            mined, prov, stats, judging = _mine_chunk(chunk, rows, known, positives, corpus_text, pool, settings,
                                                      names, judge_filter, generation, corpus_order)
            part = {"rows": mined, "provenance": prov, "stats": stats, "judge": judging}
            atomic_write_json(done, part, indent=None)
        all_stats.extend(part["stats"])
        if "judge" in part:
            judge_stats.merge(JudgeStats(unlabelled=part["judge"]["unlabelled"],
                                         failed_calls=part["judge"]["failed_calls"],
                                         problems=part["judge"]["problems"]))
        bar.update(len(chunk.query_ids))
        chunk_no += 1
    bar.close()
    report = {"config": {**config, "pool": pool.config()}, "report": _report(all_stats, settings)}
    if judge_filter is not None:
        report["report"]["filter"] = filter_report(judge_filter, all_stats, judge_stats)
    if generation is not None:
        report["report"]["generation"] = generation_report(generation, all_stats)
    files = sorted(parts.glob("part-*.json"))[:chunk_no]
    for path, key in ((out, "rows"), (prov_path, "provenance")):
        with atomic_write(path) as fh:
            for f in files:
                for line in json.loads(f.read_text(encoding="utf-8"))[key]:
                    fh.write(line + "\n")
    atomic_write_json(report_path, report)
    shutil.rmtree(parts)
    return report
