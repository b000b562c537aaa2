"""Each method hook of METHODS.md section 7, exercised through the real trainer with small fake methods."""
from __future__ import annotations

import pytest
import torch
from trainutil import load_tiny, make_data, plain_step, step_context

from harness.errors import ConfigError
from harness.method import Method
from harness.train.logs import read_log


def spec_for(model_dir, **kw):
    from harness.train.spec import TrainSpec

    base = dict(model=model_dir, pooling="mean", batch_size=6, steps=3, warmup_steps=0, n_hard_negatives=1,
                temperature=0.05, query_max_length=32, doc_max_length=64, precision="fp32", lr=1e-3,
                gradient_checkpointing=False, progress=False)
    return TrainSpec(**{**base, **kw})


class Recorder(Method):
    """Records the group ids it receives and what the batch says about them."""

    name = "test-recorder"

    def configure(self, ctx):
        self.seen = []

    def observe(self, out, ctx):
        self.seen.append((out.group_ids.tolist(), [g for g, _ in ctx.batch.examples], out.losses.shape[0]))


def test_per_sample_losses_come_with_group_ids(tmp_path, tiny_model):
    for sampling in ("homogeneous", "mixed"):
        method = Recorder()
        method.train(spec_for(tiny_model, sampling=sampling), make_data(), tmp_path / sampling)
        assert len(method.seen) == 3
        for ids, from_batch, n in method.seen:
            assert ids == from_batch and n == 6
            if sampling == "homogeneous":
                assert len(set(ids)) == 1
        log = read_log(tmp_path / sampling / "train_log.jsonl")
        assert [sorted(r["counts"].items()) for r in log] == [
            sorted({f"src{g}": ids.count(g) for g in set(ids)}.items()) for ids, _, _ in method.seen]
    assert any(len(set(ids)) > 1 for ids, _, _ in method.seen)     # mixed batches do mix sources


class GroupGrads(Method):
    """Per-group gradients on the last encoder layer, checked against per-sample gradients averaged by hand."""

    name = "test-group-grads"
    checked = 0

    def reduce(self, out, ctx):
        named = ctx.named_parameters(r"encoder\.layer\.1\.")
        params = [p for _, p in named]
        per_group = ctx.group_gradients(out.losses, out.group_ids, params)
        assert set(per_group) == set(out.group_ids.tolist())
        for g, flat in per_group.items():
            members = (out.group_ids == g).nonzero().flatten().tolist()
            manual = torch.zeros_like(flat)
            for i in members:
                gi = torch.autograd.grad(out.losses[i], params, retain_graph=True)
                manual += torch.cat([x.reshape(-1) for x in gi]) / len(members)
            assert flat.shape[0] == sum(p.numel() for p in params)
            assert torch.allclose(flat, manual, atol=1e-6, rtol=1e-4)
            assert float(flat.abs().max()) > 0
        type(self).checked += 1
        return out.losses.mean()


def test_group_gradients_on_a_named_parameter_subset(tmp_path, tiny_model_nodrop):
    GroupGrads().train(spec_for(tiny_model_nodrop, sampling="mixed"), make_data(), tmp_path / "run")
    assert GroupGrads.checked == 3


def test_group_gradients_refused_under_gradient_cache(tiny_model_nodrop):
    spec, model, tok, enc = load_tiny(tiny_model_nodrop, batch_size=4)
    ctx = step_context(spec, make_data(), model, tok, enc, [(0, 0), (0, 1), (1, 0), (1, 1)])
    with pytest.raises(ConfigError, match="gradcache"):
        plain_step(model, ctx, GroupGrads(), gradcache_chunk=2)
    with pytest.raises(ConfigError, match="no trainable parameter"):
        ctx.named_parameters("no-such-layer")


class Frozen(Method):
    """Runs a frozen copy of the starting model on every micro-batch."""

    name = "test-frozen"

    def configure(self, ctx):
        self.frozen = ctx.load_frozen_model(ctx.spec.model)
        self.start = {n: p.detach().clone() for n, p in self.frozen.model.named_parameters()}
        self.pairs = []

    def observe(self, out, ctx):
        self.pairs.append((ctx.frozen_losses(self.frozen), out.losses.detach().clone()))


def test_frozen_second_model(tmp_path, tiny_model_nodrop):
    method = Frozen()
    method.train(spec_for(tiny_model_nodrop, lr=1e-2), make_data(), tmp_path / "run")
    ref0, live0 = method.pairs[0]
    assert not ref0.requires_grad
    assert torch.allclose(ref0, live0, atol=1e-5)               # same weights before the first update
    ref2, live2 = method.pairs[2]
    assert float((ref2 - live2).abs().max()) > 1e-4             # the trained model moved, the frozen one did not
    for n, p in method.frozen.model.named_parameters():
        assert not p.requires_grad and torch.equal(p, method.start[n])


class AlphaAscent(Method):
    """A tDRO-like weight vector: SGD ascent on log-alpha, clipped, stepped on the accumulation boundary."""

    name = "test-alpha"
    eta = 0.5

    def configure(self, ctx):
        self.log_alpha = torch.zeros(len(ctx.data), requires_grad=True)
        ctx.add_weight_optimizer("alpha", [self.log_alpha], torch.optim.SGD([self.log_alpha], lr=self.eta,
                                 maximize=True), max_norm=1.0)
        self.events, self.micro_m, self.steps = [], [], []

    def observe(self, out, ctx):
        k = len(ctx.data)
        sums = torch.zeros(k).index_add_(0, out.group_ids, out.losses.detach())
        counts = torch.zeros(k).index_add_(0, out.group_ids, torch.ones_like(out.losses))
        m = sums / counts.clamp(min=1)
        self.micro_m.append(m)
        self.log_alpha.grad = m.clone() if self.log_alpha.grad is None else self.log_alpha.grad + m
        self.events.append("observe")

    def on_weight_step(self, name, ctx):
        self.events.append("weight_step")
        self.steps.append(self.log_alpha.detach().clone())

    def reduce(self, out, ctx):
        self.events.append("reduce")
        alpha = torch.softmax(self.log_alpha.detach(), 0)[out.group_ids]
        return (alpha * out.losses).sum() / alpha.sum()


def test_weight_optimizer_steps_on_the_accumulation_boundary(tmp_path, tiny_model_nodrop):
    method = AlphaAscent()
    method.train(spec_for(tiny_model_nodrop, sampling="mixed", batch_size=6, grad_accum=2), make_data(),
                 tmp_path / "run")
    assert method.events == ["observe", "reduce", "observe", "weight_step", "reduce"] * 3
    log_alpha = torch.zeros(3)
    for step, after in enumerate(method.steps):
        g = (method.micro_m[2 * step] + method.micro_m[2 * step + 1]) / 2     # averaged over the 2 micro-batches
        g = g * min(1.0, 1.0 / (float(g.norm()) + 1e-6))                     # clip_grad_norm_(1.0)
        log_alpha = log_alpha + AlphaAscent.eta * g
        assert torch.allclose(after, log_alpha, atol=1e-6)


class Schedule(Method):
    """Changes the sampling weights during training."""

    name = "test-schedule"

    def configure(self, ctx):
        ctx.set_sampler_weights([0, 1, 0])

    def on_step_end(self, ctx):
        if ctx.step == 2:
            ctx.set_sampler_weights([0, 0, 5])


def test_method_sets_sampler_weights(tmp_path, tiny_model_nodrop):
    Schedule().train(spec_for(tiny_model_nodrop, steps=4), make_data(), tmp_path / "run")
    counts = [r["counts"] for r in read_log(tmp_path / "run" / "train_log.jsonl")]
    assert counts == [{"src1": 6}, {"src1": 6}, {"src2": 6}, {"src2": 6}]


def test_all_gather_single_process_is_identity(tiny_model_nodrop):
    spec, model, tok, enc = load_tiny(tiny_model_nodrop, batch_size=2)
    ctx = step_context(spec, make_data(), model, tok, enc, [(0, 0), (1, 0)])
    t = torch.arange(4.0, requires_grad=True)
    gathered = ctx.all_gather(t)
    assert torch.equal(gathered, t.detach()) and not gathered.requires_grad
