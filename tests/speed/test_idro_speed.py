"""Cost of one iDRO step (code mode) vs one uniform step on the same micro-batch (MiniLM), for K present clusters.

Both steps run in this process on the same tokenized batch of 16 queries with 1 positive and 1 hard negative (max
lengths 32/128; the synthetic texts are 9 and 20 tokens), forward + loss + backward + AdamW. The uniform step is
the base method (the mean of the same per-sample loss: softmax over [positive, negative], dot, no in-batch
negatives); the iDRO step adds the gradients of every present cluster's mean loss on the last 3 of MiniLM's 6
blocks (5.3M parameters), their K x K Gram matrix and the weight update. That loss separates per sample, so one
partial backward serves all clusters (methods.dro_grads: forward hooks, ``autograd.grad`` w.r.t. the blocks' Linear
and LayerNorm outputs) and the Gram matrix is built module by module in one reused (K, largest module) buffer,
never as the (K, P) gradient matrix. The batch's queries are spread over exactly K clusters (the assignment is set
directly).

Timing: one torch thread, rounds interleaved by ``benchutil.paired_rounds`` (the uniform step in the untimed
pedantic ``setup``, the cyclic GC off for both), the median of the per-round ratios asserted, their spread and
the load average reported in extra_info and in the failure message. The ratios are of **process CPU time**: on
2 cores shared with other jobs the wall time of a step varies 20-40x with the load (a uniform step took 6-18 s
instead of 0.4 s at a load average of 10-13, and the wall ratio of one run swung from 1.5 to 2.2 for the same
code), while the CPU time a step uses is the work it does. The wall ratio (median) is reported beside.

Measured (CPU time, one thread, load average 10-12 from other jobs), K = 2, 4, 8:
before (one (K, P) matrix: per-cluster boolean-mask copies and products per forward call, K x P fills, adds,
concatenation and a float64 copy in idro_step): 1.46, 1.60, 2.46;
after: 1.34, 1.30, 1.40 (uniform 0.77-0.90 s, iDRO 1.15-1.19 s); this test at a load average of 7-8: 1.35, 1.31,
1.43 (wall 1.55, 1.37, 1.74; uniform 0.83 s, iDRO 1.09-1.19 s CPU).  The rest is K-independent: the partial
backward through the 3 blocks and one weight-gradient-sized product over the batch's non-padding tokens.
On paired_rounds (load average 10.6-13.1, other jobs plus this machine's other benchmarks): medians 1.32, 1.40,
1.45 (rounds 1.13-1.61, 1.16-1.54, 1.29-1.56; uniform 1.47-1.59 s CPU at best): the slowest round of any K is
20% under the bound.
Acceptance (issue 13): at most 2x a uniform step (the median round), asserted for every K.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from benchutil import paired_rounds

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = [pytest.mark.benchmark, pytest.mark.slow]
ROUNDS = 5
BATCH = 16
RATIOS: dict[int, float] = {}


@pytest.fixture(scope="module")
def setting():
    from trainutil import make_data

    from harness.train.model import build_model
    from methods.idro import IDRO

    spec = IDRO.spec("tiny", model="minilm", pooling="mean", batch_size=BATCH, query_max_length=32,
                     doc_max_length=128, precision="fp32", gradient_checkpointing=False, steps=1, warmup_steps=0,
                     progress=False, method_options={"k": 8, "blocks": 3})
    data = make_data(n_sources=1, rows=BATCH, negs=1)
    model, tokenizer, enc = build_model(spec)
    model.train(spec.dropout)
    return spec, data, model, tokenizer, enc


@pytest.mark.parametrize("k", [2, 4, 8])
def test_idro_step_cost_against_a_uniform_step(benchmark, setting, k):
    import torch
    from trainutil import step_context

    from harness.method import Method
    from harness.train.step import run_micro_batch
    from methods.idro import IDRO

    spec, data, model, tokenizer, enc = setting
    spec = spec.replace(method_options={"k": k})
    examples = [(0, i) for i in range(BATCH)]
    ctx = step_context(spec, data, model, tokenizer, enc, examples)
    idro = IDRO()
    ctx.options, ctx.encoding = idro.resolve_options(dict(spec.method_options)), enc
    idro.configure(ctx)
    idro.assignment = np.arange(BATCH) % k                     # every one of the K clusters present
    uniform = Method()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def step(method) -> float:
        res = run_micro_batch(model, ctx, method, backward=lambda loss: loss.backward(),
                              sync=lambda last: contextlib.nullcontext(), step_weights=lambda: None,
                              gradcache_chunk=None)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return res.loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:                                      # warm-up (allocator, kernels) inside paired_rounds
        times = paired_rounds(benchmark, lambda: step(uniform), lambda: step(idro), rounds=ROUNDS)
    finally:
        torch.set_num_threads(threads)
    loss = times.result
    assert np.isfinite(loss) and idro.scalars()["present_clusters"] == k
    assert idro.fast is not None and idro.fast.supported          # one partial backward for all clusters
    n_params = sum(p.numel() for p in idro.params)
    ratio = times.median
    RATIOS[k] = ratio
    benchmark.extra_info.update({"k": k, "cluster_params": n_params, "torch_threads": 1})
    times.report(benchmark, f"K={k}: iDRO step / uniform step (per-cluster gradients on {n_params} parameters, "
                            f"last 3 blocks; medians so far "
                            f"{', '.join(f'K={kk}: {r:.2f}' for kk, r in sorted(RATIOS.items()))})")
    assert ratio > 1.0, times.summary()        # the per-cluster gradients are extra work, not free
    times.assert_at_most(2.0, f"K={k}: iDRO / uniform step")     # acceptance bound (issue 13), for every K
    if len(RATIOS) == 3:                       # no longer linear in K: 8 clusters cost about what 2 do
        assert RATIOS[8] <= 1.3 * RATIOS[2], RATIOS
