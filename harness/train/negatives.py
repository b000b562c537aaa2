"""ANCE-style hard negatives refreshed between training stretches (paper 001, METHODS.md 2.2 and 5).

The released COCO-DR fine-tuning (``ANCE/drivers/run_ann_data_gen.py``) alternates training
stretches with *episodes*: the current checkpoint re-encodes the training corpus, each
training query retrieves its top 200 passages, its positives are removed and 30 of the rest,
drawn at random, become its negatives until the next episode.  The first (warm-up) stretch
uses BM25 negatives.  :class:`AnceNegatives` does this for any method that trains on the
default query/positive/negative rows:

* the **training corpus** is every distinct passage (positive or negative) of the training
  data, in order of first appearance;
* ``refresh(ctx, directory)`` (dense, from the current model): passages encoded with
  ``doc_max_length``, queries with ``query_max_length`` (with the source's first prompt when
  the spec uses instructions), scored with the spec's similarity (dot or cosine); the
  encoding is split over the ranks and gathered, and the choice of rank 0 is broadcast, so
  every rank trains on the same negatives;
* ``warmup(ctx, directory)``: ``"data"`` keeps the collection's own negatives (BM25 ones
  for the MS MARCO triples), ``"bm25"`` mines the top ``depth`` with Lucene BM25 over the
  training corpus (:func:`harness.retrieval.bm25.bm25_search`) and keeps ``keep`` as above;
* the ``keep`` negatives are drawn without replacement from a generator seeded by (run seed,
  step of the episode), so a redone episode draws the same ones; a query left with no
  candidate keeps its collection negatives;
* ``make_batch(examples, ctx, micro_index)`` builds the trainer's default batch from the
  rows with their current negatives (the training data itself is never modified, so its
  fingerprint, and the run's key, do not change).

The mined negatives are pool indices, checkpointed through ``state_dict``: the trainer
writes a checkpoint before each episode, so a run killed during an episode's re-encoding
resumes from it, redoes the episode and trains on the same negatives as an uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from harness.data.beir import Corpus, Queries
from harness.data.collections import TrainingData
from harness.data.training import TrainingRow
from harness.errors import ConfigError
from harness.retrieval.bm25 import bm25_search
from harness.train import distributed as D
from harness.train.batching import apply_template, build_batch, tokenize_batch
from harness.train.episodes import encode_texts

if TYPE_CHECKING:
    from harness.train.batching import TrainBatch
    from harness.train.context import TrainContext

WARMUPS = ("data", "bm25")
_NEG_STREAM = 0xA2CE
NEGATIVES_FILE = "negatives.npy"


def training_corpus(data: TrainingData) -> tuple[list[str], list[np.ndarray]]:
    """``(passages, positives)``: the distinct passages of ``data`` in order of first appearance, and
    each row's positive pool indices (rows flattened over sources, in order)."""
    index: dict[str, int] = {}
    positives = []
    for src in data.sources:
        for row in src.rows:
            for text in (*row.pos, *row.neg):
                index.setdefault(text, len(index))
            positives.append(np.array(sorted({index[t] for t in row.pos}), dtype=np.int64))
    return list(index), positives


def pick_negatives(ranked: np.ndarray, positives: list[np.ndarray], keep: int, seed: int, step: int) -> np.ndarray:
    """``(n_rows, keep)`` pool indices (``-1`` pads): ``keep`` of each row's ranked candidates
    (``ranked``: ``(n_rows, depth)``, ``-1`` for none) without its positives, drawn at random without
    replacement (seeded by ``seed`` and ``step``) and kept in rank order."""
    rng = np.random.default_rng([seed, _NEG_STREAM, step])
    out = np.full((len(ranked), keep), -1, dtype=np.int64)
    for i, (cands, pos) in enumerate(zip(ranked, positives)):
        cands = cands[(cands >= 0) & ~np.isin(cands, pos)]
        if len(cands) == 0:
            continue
        chosen = np.sort(rng.choice(len(cands), size=min(keep, len(cands)), replace=False))
        out[i, :len(chosen)] = cands[chosen]
    return out


def dense_top(queries: torch.Tensor, passages: torch.Tensor, depth: int, similarity: str = "dot",
              chunk: int = 1024) -> np.ndarray:
    """Top-``depth`` passage indices per query by dot product (``cos``: of the normalised vectors)."""
    if similarity == "cos":
        queries, passages = F.normalize(queries, dim=-1), F.normalize(passages, dim=-1)
    depth = min(depth, len(passages))
    out = []
    for i in range(0, len(queries), chunk):
        scores = queries[i:i + chunk] @ passages.T
        out.append(torch.topk(scores, depth, dim=1).indices.numpy())
    return np.concatenate(out) if out else np.zeros((0, depth), dtype=np.int64)


def _sharded_encode(ctx: TrainContext, texts: list[str], max_length: int) -> torch.Tensor:
    """All representations of ``texts``: each rank encodes a contiguous share, gathered in order."""
    world, rank = D.world_size(), D.rank()
    if world == 1:
        return encode_texts(ctx, texts, max_length)
    per = -(-len(texts) // world)
    mine = encode_texts(ctx, texts[rank * per:(rank + 1) * per], max_length)
    hidden = mine.shape[1] if len(mine) else int(encode_texts(ctx, texts[:1], max_length).shape[1])
    padded = torch.zeros(per, hidden)
    padded[:len(mine)] = mine
    return D.all_gather_nograd(padded.to(ctx.device)).cpu()[:len(texts)]


class AnceNegatives:
    """Hard negatives from the current checkpoint's top ``depth``, ``keep`` kept per query (module docstring)."""

    def __init__(self, data: TrainingData, *, depth: int = 200, keep: int = 30, warmup: str = "data",
                 seed: int = 0) -> None:
        if warmup not in WARMUPS:
            raise ConfigError(f"unknown ANCE warm-up negatives {warmup!r}; choose one of {', '.join(WARMUPS)}")
        if depth < 1 or keep < 1:
            raise ConfigError(f"ANCE negatives need depth >= 1 and keep >= 1; got depth={depth}, keep={keep}")
        self.data, self.depth, self.keep, self.warmup_kind, self.seed = data, depth, keep, warmup, seed
        self.passages, self.positives = training_corpus(data)
        self.mined: np.ndarray | None = None          # (rows, keep) pool indices; None: the data's negatives
        self.refreshes = 0
        self.view = data

    # ------------------------------------------------------------------ episodes
    def warmup(self, ctx: TrainContext, directory: Path) -> None:
        """Warm-up negatives: the collection's own (``data``) or BM25's top ``depth`` (``bm25``)."""
        if self.warmup_kind == "data":
            self._set(None)
        else:
            self._set(self._broadcast(pick_negatives(self._bm25_top(), self.positives, self.keep, self.seed,
                                                     ctx.step)))
        self._write(directory, "bm25" if self.warmup_kind == "bm25" else "data")

    def refresh(self, ctx: TrainContext, directory: Path) -> None:
        """Negatives mined with the current model (dense top ``depth``, positives removed, ``keep`` drawn)."""
        spec = ctx.spec
        passages = _sharded_encode(ctx, self.passages, spec.doc_max_length)
        queries = _sharded_encode(ctx, self._queries(ctx), spec.query_max_length)
        ranked = dense_top(queries, passages, self.depth, spec.similarity)
        self._set(self._broadcast(pick_negatives(ranked, self.positives, self.keep, self.seed, ctx.step)))
        self._write(directory, "dense")

    def _queries(self, ctx: TrainContext) -> list[str]:
        spec, out = ctx.spec, list[str]()
        for src in self.data.sources:
            prompt = src.prompts[0] if spec.use_instructions and src.prompts else ""
            out.extend(apply_template(spec.instruction_template, prompt, r.query) if prompt else r.query
                       for r in src.rows)
        return out

    def _bm25_top(self) -> np.ndarray:
        rows = [(s, r) for s in self.data.sources for r in s.rows]
        languages = {s.language for s in self.data.sources if isinstance(s.language, str)}
        language = languages.pop() if len(languages) == 1 and "und" not in languages else "en"
        corpus = Corpus([str(i) for i in range(len(self.passages))], [""] * len(self.passages), list(self.passages))
        queries = Queries([str(i) for i in range(len(rows))], [r.query for _, r in rows])
        run = bm25_search(corpus, queries, k=self.depth, language=language, threads=1)
        ranked = np.full((len(rows), self.depth), -1, dtype=np.int64)
        for qid, docs, _ in run.groups():
            hits = docs.astype(np.int64)[:self.depth]
            ranked[int(qid), :len(hits)] = hits
        return ranked

    @staticmethod
    def _broadcast(mined: np.ndarray) -> np.ndarray:
        """Rank 0's choice on every rank (sum of rank 0's array and zeros elsewhere)."""
        if not D.is_distributed():
            return mined
        mine = torch.from_numpy(mined) if D.rank() == 0 else torch.zeros_like(torch.from_numpy(mined))
        return D.all_reduce_sum(mine).numpy()

    def _write(self, directory: Path, kind: str) -> None:
        if D.rank() != 0:
            return
        if self.mined is not None:
            np.save(directory / NEGATIVES_FILE, self.mined)
        per_row = [] if self.mined is None else (self.mined >= 0).sum(axis=1).tolist()
        summary = {"kind": kind, "passages": len(self.passages), "rows": len(self.positives), "depth": self.depth,
                   "keep": self.keep, "rows_without_mined": int(sum(1 for n in per_row if n == 0)) if per_row
                   else len(self.positives), "mean_kept": float(np.mean(per_row)) if per_row else 0.0}
        (directory / "negatives.json").write_text(json.dumps(summary, indent=1) + "\n")

    def _set(self, mined: np.ndarray | None) -> None:
        self.mined = mined
        self.refreshes += 1
        if mined is None:
            self.view = self.data
            return
        sources, k = [], 0
        for src in self.data.sources:
            rows = []
            for row in src.rows:
                idx = mined[k][mined[k] >= 0]
                negs = [self.passages[int(i)] for i in idx] if len(idx) else row.neg
                rows.append(TrainingRow(row.query, row.pos, negs, row.meta))
                k += 1
            sources.append(dataclasses.replace(src, rows=rows))
        self.view = TrainingData(sources)

    # ------------------------------------------------------------------ batches
    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> TrainBatch:
        """The trainer's default batch, with the rows' current negatives."""
        batch = build_batch(examples, self.view, ctx.spec, micro_index, ctx.rank, ctx.world_size)
        return tokenize_batch(batch, ctx.tokenizer, ctx.spec, bool(ctx.encoding.get("append_eos", False)),
                              ctx.token_cache(ctx.tokenizer))

    def negatives_of(self, source: int, row: int) -> list[str]:
        """The current negatives of one training row."""
        return self.view.sources[source].rows[row].neg

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"mined": None if self.mined is None else torch.from_numpy(self.mined.copy()),
                "refreshes": self.refreshes, "passages": len(self.passages)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["passages"]) != len(self.passages):
            raise ConfigError(f"the checkpoint's ANCE negatives index {state['passages']} passages, the training "
                              f"corpus has {len(self.passages)}: not the same training data")
        mined = state["mined"]
        self._set(None if mined is None else mined.numpy().astype(np.int64))
        self.refreshes = int(state["refreshes"])
