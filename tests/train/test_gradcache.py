"""Gradient cache: same loss and gradients as the uncached step (1e-5), and flat peak memory."""
from __future__ import annotations

import torch
from trainutil import grads, load_tiny, make_data, plain_step, step_context

from harness.method import Method

EXAMPLES = [(0, i) for i in range(4)] + [(1, i) for i in range(4)]   # 8 queries, 16 passages


class Weighted(Method):
    """A non-trivial reduction (per-group weights) so the test covers method losses, not just the mean."""

    name = "test-weighted"

    def reduce(self, out, ctx):
        w = torch.where(out.group_ids == 0, 0.75, 1.5)
        return (w * out.losses).sum() / w.sum()


def run(model_dir, *, gradcache_chunk=None, forward_chunk=None, seed=123):
    spec, model, tok, enc = load_tiny(model_dir, batch_size=8)
    data = make_data(n_sources=2, rows=6)
    model.train()
    ctx = step_context(spec, data, model, tok, enc, EXAMPLES)
    torch.manual_seed(seed)
    res = plain_step(model, ctx, Weighted(), gradcache_chunk=gradcache_chunk, forward_chunk=forward_chunk)
    return res.loss, grads(model)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_gradcache_equals_full_batch_without_dropout(tiny_model_nodrop):
    loss_ref, g_ref = run(tiny_model_nodrop)                     # one forward of the whole batch
    loss_gc, g_gc = run(tiny_model_nodrop, gradcache_chunk=3)    # uneven chunks: 3+3+2 and 3*5+1
    assert abs(loss_ref - loss_gc) < 1e-5
    assert max_diff(g_ref, g_gc) < 1e-5
    assert max(float(g.abs().max()) for g in g_ref.values()) > 1e-3   # the gradients are not trivially zero


def test_gradcache_replays_dropout(tiny_model):
    loss_ref, g_ref = run(tiny_model, forward_chunk=3)           # uncached, same chunks, graph kept
    loss_gc, g_gc = run(tiny_model, gradcache_chunk=3)
    assert abs(loss_ref - loss_gc) < 1e-5
    assert max_diff(g_ref, g_gc) < 1e-5
    # Dropout is really on: another seed gives other masks and visibly other gradients.
    _, g_other = run(tiny_model, gradcache_chunk=3, seed=7)
    assert max_diff(g_gc, g_other) > 1e-4


def peak_cpu_bytes(fn) -> int:
    """Peak of torch's CPU allocations (bytes allocated minus freed) while ``fn`` runs.

    The profiler with ``profile_memory=True`` records every CPU tensor allocation and
    free with a timestamp; the running sum over time is the memory held by tensors
    created during ``fn`` (parameters and other pre-existing tensors are excluded).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    held = peak = 0
    for e in events:
        held += e.nbytes()
        peak = max(peak, held)
    return peak


def measure(model_dir, n_queries: int, gradcache_chunk):
    from trainutil import WORDS

    from harness.data.collections import TrainingData, TrainingSource
    from harness.data.training import TrainingRow

    words = (WORDS * 10)[:90]
    rows = [TrainingRow(f"query {i} " + " ".join(words[:8]), [" ".join(words[i % 5:])], [" ".join(words[::-1])])
            for i in range(n_queries)]
    data = TrainingData([TrainingSource("long", rows)])
    spec, model, tok, enc = load_tiny(model_dir, batch_size=n_queries, doc_max_length=128)
    ctx = step_context(spec, data, model, tok, enc, [(0, i) for i in range(n_queries)])
    model.zero_grad(set_to_none=True)
    return peak_cpu_bytes(lambda: plain_step(model, ctx, Method(), gradcache_chunk=gradcache_chunk))


def test_gradcache_peak_memory_is_flat_in_batch_size(tiny_model, capsys):
    cached_small = measure(tiny_model, 8, gradcache_chunk=8)
    cached_large = measure(tiny_model, 32, gradcache_chunk=8)
    plain_small = measure(tiny_model, 8, gradcache_chunk=None)
    plain_large = measure(tiny_model, 32, gradcache_chunk=None)
    cached_ratio, plain_ratio = cached_large / cached_small, plain_large / plain_small
    with capsys.disabled():
        print(f"\npeak CPU tensor memory, batch 8 -> 32 queries (+1 HN each), chunk 8: "
              f"gradcache {cached_small / 2**20:.1f} -> {cached_large / 2**20:.1f} MiB (x{cached_ratio:.2f}); "
              f"no cache {plain_small / 2**20:.1f} -> {plain_large / 2**20:.1f} MiB (x{plain_ratio:.2f})")
    assert cached_ratio < 1.5
    assert plain_ratio > 2.5          # the measurement does see activation memory
