"""Method.losses: a method that changes only the per-sample loss (``methods.debiased``, the debiased contrastive
loss) gets observe/reduce, the gradient cache and the training log for free, and tDRO reweights it through
composition (option ``base``, harness.method.compose) without a new class."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from trainutil import grads, load_tiny, make_data, plain_step, step_context

from harness.train.logs import read_log
from harness.train.losses import candidate_info_nce
from methods.debiased import Debiased, debiased_losses
from methods.tdro import Tdro

# Tiny models train fastest on one thread (the shared fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def test_debiased_loss_oracles():
    # One query: positive 0.8, negatives 0.5 and -0.2, a masked column that must not count; t = 1.
    sim = torch.tensor([[0.8, 0.5, -0.2, 9.0]], dtype=torch.float64)
    allowed = torch.tensor([[True, True, True, False]])
    targets = torch.tensor([0])
    # Ng = (e^0.5 + e^-0.2 - 2 * 0.1 * e^0.8) / 0.9 = 2.247049 (above the bound 2/e); l = log(e^0.8 + Ng) - 0.8
    assert float(debiased_losses(sim, allowed, targets, 1.0, 0.1)[0]) == pytest.approx(0.697968, abs=1e-6)
    # The bound N * e^(-1/t) takes over when the debiased negative mass would be negative.
    sim = torch.tensor([[-0.9, 0.9, -0.95]], dtype=torch.float64)
    expected = math.log(1 + 2 * math.exp(-2.0) / math.exp(1.8))           # 0.043770
    loss = debiased_losses(sim, torch.ones(1, 3, dtype=torch.bool), torch.tensor([1]), 0.5, 0.5)
    assert float(loss[0]) == pytest.approx(expected, abs=1e-9) and expected == pytest.approx(0.043770, abs=1e-6)
    # tau_plus = 0 on cosine scores is InfoNCE, also at a temperature where exp() of the raw logits overflows.
    g = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(12, 8, generator=g), dim=-1)
    sim = q @ p.T
    allowed = torch.rand(4, 12, generator=g) > 0.3
    targets = torch.tensor([0, 3, 6, 9])
    allowed[torch.arange(4), targets] = True
    for t in (0.05, 0.002):
        ours = debiased_losses(sim, allowed, targets, t, 0.0)
        assert torch.isfinite(ours).all()
        assert torch.allclose(ours, candidate_info_nce(sim, allowed, targets, t), atol=1e-4, rtol=1e-5)


def micro_batch(model_dir, gradcache_chunk):
    spec, model, tok, enc = load_tiny(model_dir, batch_size=8, similarity="cos")
    ctx = step_context(spec, make_data(n_sources=2, rows=6), model, tok, enc,
                       [(0, i) for i in range(4)] + [(1, i) for i in range(4)])
    ctx.options = {"tau_plus": 0.2}
    method = Debiased()
    method.configure(ctx)
    res = plain_step(model, ctx, method, gradcache_chunk=gradcache_chunk)
    return res, grads(model)


def test_gradient_cache_differentiates_the_method_loss(tiny_model_nodrop):
    full, g_full = micro_batch(tiny_model_nodrop, None)
    cached, g_cached = micro_batch(tiny_model_nodrop, 3)
    cand = full.output.candidates
    infonce = candidate_info_nce(cand.sim, cand.allowed, cand.targets, 0.05)
    assert float((full.output.losses - infonce).detach().abs().max()) > 1e-3        # the method's loss, not InfoNCE
    assert abs(full.loss - cached.loss) < 1e-5 and abs(full.mean_sample_loss - full.loss) < 1e-6
    assert max(float((g_full[k] - g_cached[k]).abs().max()) for k in g_full) < 1e-5
    assert max(float(g.abs().max()) for g in g_full.values()) > 1e-3


class Recording(Tdro):
    """tDRO stage 2, recording what its reduce receives (the base's per-sample losses)."""

    def configure(self, ctx):
        super().configure(ctx)
        self.records = []

    def reduce(self, out, ctx):
        loss = super().reduce(out, ctx)
        cand = out.candidates
        self.records.append((out.losses.detach().clone(), out.group_ids.clone(), float(loss.detach()),
                             debiased_losses(cand.sim, cand.allowed, cand.targets, 0.05, 0.1).detach()))
        return loss


def test_debiased_loss_composes_with_tdro_loss_reweighting(tmp_path, tiny_model_nodrop):
    from harness.train.spec import TrainSpec

    alpha = {"src0": 0.5, "src1": 0.3, "src2": 0.2}
    spec = TrainSpec(model=tiny_model_nodrop, pooling="mean", similarity="cos", temperature=0.05, batch_size=6,
                     sampling="mixed",
                     steps=4, warmup_steps=0, n_hard_negatives=1, query_max_length=32, doc_max_length=64, lr=1e-3,
                     precision="fp32", gradient_checkpointing=False, progress=False,
                     method_options={"weights": alpha, "transfer": "loss", "base": "debiased",
                                     "base_options": {"tau_plus": 0.1}})
    method = Recording()
    method.train(spec, make_data(), tmp_path / "run")
    multipliers = torch.tensor([3 * alpha[f"src{g}"] for g in range(3)])      # k * alpha_g
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    assert len(method.records) == len(log) == 4
    for (losses, groups, loss, recomputed), record in zip(method.records, log):
        assert torch.equal(losses, recomputed)                                     # the hook's per-sample loss
        assert loss == pytest.approx(float((multipliers[groups] * losses).mean()), rel=1e-6)   # tDRO's reduce
        assert record["loss"] == pytest.approx(loss, rel=1e-6)
        assert record["infonce"] == pytest.approx(float(losses.mean()), rel=1e-6)  # logged per-sample mean
    assert any(len(set(groups.tolist())) > 1 for _, groups, _, _ in method.records)   # per-sample multipliers
    assert not np.allclose([r[2] for r in method.records], [float(r[0].mean()) for r in method.records])
