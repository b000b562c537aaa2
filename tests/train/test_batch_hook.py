"""Method.make_batch: a method with its own batch builder (COCO span pairs) trains through the trainer,
with the gradient cache, the training log's source counts and rank slicing working on its views."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from spanpairs import SpanPairs, span_pair_losses
from trainutil import grads, load_tiny, make_data, plain_step

from harness.errors import ConfigError
from harness.method import Method
from harness.train.context import TrainContext
from harness.train.logs import read_log

# Tiny models train fastest on one thread (the shared fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def test_span_pair_loss_oracle_c1_and_no_self_pairs():
    # C1: spans (1,0), (1,0) and (0,1), (0,1): each loss log(1 + 2/e) = 0.551445.
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    losses = span_pair_losses(a, a.clone())
    assert torch.allclose(losses, torch.full((4,), math.log(1 + 2 / math.e)), atol=1e-6)
    assert float(losses.mean()) == pytest.approx(0.551445, abs=1e-6)
    # 3 documents with long vectors: a self-pair would dominate every row; the loss equals the manual
    # softmax over the 5 other spans.
    g = torch.Generator().manual_seed(1)
    a, b = 3 * torch.randn(3, 4, generator=g, dtype=torch.float64), 3 * torch.randn(3, 4, generator=g,
                                                                                     dtype=torch.float64)
    reps = torch.cat([a, b])
    for i, loss in enumerate(span_pair_losses(a, b).tolist()):
        partner = (i + 3) % 6
        others = [k for k in range(6) if k != i]
        expected = -float(reps[i] @ reps[partner]) + math.log(sum(math.exp(float(reps[i] @ reps[k])) for k in others))
        assert loss == pytest.approx(expected, rel=1e-9)


def span_context(model_dir, examples, rank=0, world=1, micro_index=0):
    spec, model, tok, enc = load_tiny(model_dir, batch_size=len(examples), temperature=0.1)
    ctx = TrainContext(spec=spec, data=make_data(), model=model, tokenizer=tok, device=torch.device("cpu"),
                       rank=rank, world_size=world, encoding=enc)
    ctx.batch = SpanPairs().make_batch(examples, ctx, micro_index)
    return ctx, model


EXAMPLES = [(0, 1), (0, 4), (1, 2), (2, 0), (2, 5), (1, 7)]


def decode(ctx, view):
    return ctx.tokenizer.batch_decode(ctx.batch.views[view]["input_ids"], skip_special_tokens=True)


def test_span_batches_are_two_distinct_spans_of_each_document_and_split_over_ranks(tiny_model_nodrop):
    ctx, _ = span_context(tiny_model_nodrop, EXAMPLES)
    a, b = decode(ctx, "span_a"), decode(ctx, "span_b")
    for (s, r), x, y in zip(EXAMPLES, a, b):
        doc = ctx.data.sources[s].rows[r].pos[0]
        assert x != y and x in doc and y in doc and len(x.split()) == len(y.split()) == 4
    assert ctx.batch.group_ids.tolist() == [0, 0, 1, 2, 2, 1] and len(ctx.batch) == 6
    again, _ = span_context(tiny_model_nodrop, EXAMPLES)
    assert decode(again, "span_a") == a                                   # seeded by (seed, micro-batch)
    other, _ = span_context(tiny_model_nodrop, EXAMPLES, micro_index=1)
    assert decode(other, "span_a") != a
    halves = [span_context(tiny_model_nodrop, EXAMPLES, rank=r, world=2)[0] for r in (0, 1)]
    assert decode(halves[0], "span_a") + decode(halves[1], "span_a") == a
    assert halves[1].batch.group_ids.tolist() == [2, 2, 1]


def test_span_pairs_under_the_gradient_cache(tiny_model_nodrop):
    results = []
    for chunk in (None, 4):
        ctx, model = span_context(tiny_model_nodrop, EXAMPLES)
        res = plain_step(model, ctx, SpanPairs(), gradcache_chunk=chunk)
        results.append((res, grads(model)))
    (full, g_full), (cached, g_cached) = results
    assert full.output.losses.shape == (12,) and full.output.group_ids.tolist() == [0, 0, 1, 2, 2, 1] * 2
    assert abs(full.loss - cached.loss) < 1e-5
    assert max(float((g_full[k] - g_cached[k]).abs().max()) for k in g_full) < 1e-5
    assert max(float(g.abs().max()) for g in g_full.values()) > 1e-3


def test_span_pairs_train_at_tiny_scale(tmp_path, tiny_model):
    from harness.train.spec import TrainSpec

    spec = TrainSpec(model=tiny_model, pooling="mean", similarity="dot", temperature=0.1, batch_size=8, steps=30,
                     warmup_steps=2, lr=2e-3, doc_max_length=16, sampling="mixed", n_hard_negatives=0,
                     precision="fp32", gradient_checkpointing=False, progress=False)
    ckpt = SpanPairs().train(spec, make_data(), tmp_path / "run")
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    losses = [r["loss"] for r in log]
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    print(f"span pairs, 30 steps of 8 documents: mean loss {first:.3f} (steps 1-5) -> {last:.3f} (steps 26-30)")
    assert last < 0.6 * first
    assert all(sum(r["counts"].values()) == 8 for r in log)            # counts of the global span batch
    assert (ckpt.path / "config.json").exists()


def test_default_loss_refuses_a_method_built_batch(tiny_model_nodrop):
    class SpansWithInfoNCE(SpanPairs):
        losses = Method.losses

    ctx, model = span_context(tiny_model_nodrop, EXAMPLES)
    with pytest.raises(ConfigError, match="views span_a, span_b, not query/passage rows"):
        plain_step(model, ctx, SpansWithInfoNCE())
