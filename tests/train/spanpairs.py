"""A method with its own batch builder: COCO-style span pairs (METHODS.md 2.1), used by the tests.

Each sampled row contributes one document (its positive passage), cut into chunks of
``span_words`` words; two distinct chunks, drawn by a generator seeded with the run seed
and the micro-batch index, become the views ``span_a`` and ``span_b``.  The loss is the
symmetric contrastive loss over the 2n spans of the micro-batch: each span's target is its
partner, its own column is removed, every other span is a negative; dot product divided by
the spec's temperature (COCO uses none, i.e. temperature 1).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from harness.encoders.backbone import tokenize
from harness.method import Method
from harness.train.batching import ViewBatch

_SPAN_STREAM = 0x5BA


def span_pair_losses(a: torch.Tensor, b: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(2n,) losses: spans ``a[i]`` and ``b[i]`` are partners; every other span of the batch is a negative."""
    reps = torch.cat([a, b])
    n = len(a)
    logits = (reps @ reps.T) / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=reps.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(reps.device)
    return F.cross_entropy(logits, targets, reduction="none")


def two_spans(text: str, span_words: int, rng: np.random.Generator) -> tuple[str, str]:
    words = text.split()
    chunks = [" ".join(words[i:i + span_words]) for i in range(0, len(words), span_words)]
    if len(chunks) < 2:
        raise ValueError(f"document {text!r} has fewer than 2 spans of {span_words} words")
    i, j = rng.choice(len(chunks), size=2, replace=False)
    return chunks[int(i)], chunks[int(j)]


class SpanPairs(Method):
    name = "test-span-pairs"
    span_words = 4

    def make_batch(self, examples, ctx, micro_index):
        rng = np.random.default_rng([ctx.spec.seed, _SPAN_STREAM, micro_index])
        pairs = [two_spans(ctx.data.sources[s].rows[r].pos[0], self.span_words, rng) for s, r in examples]
        per_rank = len(examples) // ctx.world_size
        lo, hi = ctx.rank * per_rank, (ctx.rank + 1) * per_rank
        groups = np.array([s for s, _ in examples], dtype=np.int64)
        length = ctx.spec.doc_max_length
        views = {name: dict(tokenize(ctx.tokenizer, [p[k] for p in pairs[lo:hi]], length))
                 for k, name in enumerate(("span_a", "span_b"))}
        return ViewBatch(views, groups[lo:hi], groups, list(examples[lo:hi]))

    def losses(self, encoded, ctx):
        losses = span_pair_losses(encoded["span_a"], encoded["span_b"], ctx.spec.temperature)
        return losses, ctx.batch_group_ids().repeat(2)
