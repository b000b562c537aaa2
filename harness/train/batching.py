"""From sampled rows to model inputs: passages, prompts, tokenisation.

Per example (METHODS.md 0.3): one positive drawn uniformly; ``m`` hard negatives
drawn without replacement, or with replacement when the row has fewer than ``m``.
A row with no negatives at all is filled according to ``fill_negatives``: positives
of other rows of the same source ("random"), or placeholder slots masked out of the
softmax ("mask").  The draws use a generator seeded by ``(seed, micro-batch index)``
and walk the *global* batch in order, so they do not depend on the number of ranks
and need no checkpoint state.

A method may build its own micro-batches (``Method.make_batch``: span pairs,
triplets by cluster, language/topic batches): anything with the :class:`Batch`
fields, e.g. a :class:`ViewBatch`.  The trainer encodes each tokenized *view* of the
batch (``views``, in order) and hands the representations to the method's loss.

Queries get ``instruction_template`` with the source's prompt (one drawn per example
when the source lists several); with ``symmetric_doc_prompt`` the passages of
symmetric sources get the same prefix (tDRO code, METHODS.md 0.2).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from harness.data.collections import TrainingData
from harness.encoders.backbone import tokenize
from harness.train.spec import TrainSpec

if TYPE_CHECKING:
    from harness.train.context import TrainContext
    from harness.train.tokens import TokenCache

_PICK_STREAM = 0x9E1
Features = dict[str, torch.Tensor]


class Batch(Protocol):
    """What the trainer needs of a micro-batch on one rank."""

    group_ids: np.ndarray                     # source (or other group) index per local sample
    global_group_ids: np.ndarray | None       # per sample of the global batch: logged counts per source

    @property
    def views(self) -> dict[str, Features]:
        """Tokenized inputs per view name, encoded in this order."""
        ...

    def __len__(self) -> int: ...


@dataclass
class ViewBatch:
    """A method-built micro-batch: named tokenized views and a group per sample."""

    views: dict[str, Features]
    group_ids: np.ndarray
    global_group_ids: np.ndarray | None = None
    examples: list[tuple[int, int]] = field(default_factory=list)   # (source, row) per sample

    def __len__(self) -> int:
        return len(self.group_ids)


@dataclass
class TrainBatch:
    """One micro-batch on one rank (texts are already prompted)."""

    queries: list[str]
    passages: list[str]                  # len(queries) * passages_per_query, grouped per query
    group_ids: np.ndarray                # source index per query
    only_hn: np.ndarray                  # bool per query
    passage_valid: np.ndarray            # bool per passage
    passages_per_query: int
    examples: list[tuple[int, int]] = field(default_factory=list)   # (source, row) per query
    global_group_ids: np.ndarray | None = None                      # source per query of the global batch
    features: dict[str, Features] = field(default_factory=dict)  # "query"/"passage" tokenized

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def views(self) -> dict[str, Features]:
        return self.features


def apply_template(template: str, prompt: str, text: str) -> str:
    """``template`` with ``{prompt}`` and ``{text}`` filled, safe for braces inside the texts."""
    head, _, tail = template.partition("{text}")
    return head.replace("{prompt}", prompt) + text + tail.replace("{prompt}", prompt)


def build_batch(global_examples: list[tuple[int, int]], data: TrainingData, spec: TrainSpec, micro_index: int,
                rank: int = 0, world_size: int = 1) -> TrainBatch:
    """Draw passages and prompts for the whole global batch, return this rank's slice."""
    rng = np.random.default_rng([spec.seed, _PICK_STREAM, micro_index])
    m = spec.n_hard_negatives
    queries, passages, valid, only_hn = [], [], [], []
    for source_idx, row_idx in global_examples:
        src = data.sources[source_idx]
        row = src.rows[row_idx]
        prompts = src.prompts if spec.use_instructions else []
        prompt = prompts[int(rng.integers(len(prompts)))] if len(prompts) > 1 else (prompts[0] if prompts else "")
        pos = row.pos[int(rng.integers(len(row.pos)))]
        negs, neg_valid = _pick_negatives(row.neg, m, rng, data, source_idx, row_idx, spec.fill_negatives)
        if prompt:
            query = apply_template(spec.instruction_template, prompt, row.query)
        else:
            query = row.query
        group = [pos, *negs]
        if prompt and src.symmetric and spec.symmetric_doc_prompt:
            group = [apply_template(spec.instruction_template, prompt, p) for p in group]
        queries.append(query)
        passages.extend(group)
        valid.extend([True, *neg_valid])
        only_hn.append(src.only_hn)
    n = 1 + m
    per_rank = len(global_examples) // world_size
    lo, hi = rank * per_rank, (rank + 1) * per_rank
    global_groups = np.array([g for g, _ in global_examples], dtype=np.int64)
    return TrainBatch(queries=queries[lo:hi], passages=passages[lo * n:hi * n], group_ids=global_groups[lo:hi],
                      only_hn=np.array(only_hn[lo:hi], dtype=bool), passage_valid=np.array(valid[lo * n:hi * n]),
                      passages_per_query=n, examples=list(global_examples[lo:hi]), global_group_ids=global_groups)


def _pick_negatives(negs: list[str], m: int, rng: np.random.Generator, data: TrainingData, source_idx: int,
                    row_idx: int, fill: str) -> tuple[list[str], list[bool]]:
    if m == 0:
        return [], []
    if len(negs) >= m:
        return [negs[int(i)] for i in rng.choice(len(negs), size=m, replace=False)], [True] * m
    if negs:
        return [negs[int(i)] for i in rng.integers(len(negs), size=m)], [True] * m
    if fill == "mask":
        return [""] * m, [False] * m
    rows = data.sources[source_idx].rows
    out = []
    for _ in range(m):
        other = int(rng.integers(len(rows)))
        if other == row_idx and len(rows) > 1:
            other = (other + 1 + int(rng.integers(len(rows) - 1))) % len(rows)
        out.append(rows[other].pos[int(rng.integers(len(rows[other].pos)))])
    return out, [True] * m


def tokenize_batch(batch: TrainBatch, tokenizer, spec: TrainSpec, append_eos: bool,
                   cache: TokenCache | None = None) -> TrainBatch:
    """Attach tokenized ``query`` and ``passage`` features (padded per side).

    With ``cache`` (a :class:`~harness.train.tokens.TokenCache` of ``tokenizer``, e.g.
    ``ctx.token_cache(tokenizer)``) texts seen before are not tokenized again; the features are the same."""
    if cache is not None and cache.tokenizer is tokenizer:
        batch.features["query"] = cache.encode(batch.queries, spec.query_max_length, append_eos)
        batch.features["passage"] = cache.encode(batch.passages, spec.doc_max_length, append_eos)
        return batch
    batch.features["query"] = dict(tokenize(tokenizer, batch.queries, spec.query_max_length, append_eos=append_eos))
    batch.features["passage"] = dict(tokenize(tokenizer, batch.passages, spec.doc_max_length, append_eos=append_eos))
    return batch


def default_batch(examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> TrainBatch:
    """The trainer's default micro-batch: query/positive/negatives rows, prompted and tokenized."""
    batch = build_batch(examples, ctx.data, ctx.spec, micro_index, ctx.rank, ctx.world_size)
    return tokenize_batch(batch, ctx.tokenizer, ctx.spec, bool(ctx.encoding.get("append_eos", False)),
                          ctx.token_cache(ctx.tokenizer))


def source_counts(group_ids: np.ndarray, names: list[str]) -> dict[str, int]:
    """Examples per source name (sources with zero examples are left out)."""
    counts = np.bincount(group_ids, minlength=len(names))
    return {names[i]: int(c) for i, c in enumerate(counts) if c}
