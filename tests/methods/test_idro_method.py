"""The iDRO and GroupDRO methods on a tiny model: clusters from the episode hook, the trainer's per-cluster
gradients wired into ``idro_step`` / the GroupDRO kernels, exact kill-and-resume (during training and during
an episode), bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from trainutil import make_data, make_tiny_bert, plain_step, step_context

from harness.errors import ConfigError
from harness.train.logs import read_log
from methods.clusters import triplet_losses
from methods.groupdro import GroupDRO, greedy_cvar_weights, sagawa_step
from methods.idro import IDRO, idro_step

pytestmark = pytest.mark.usefixtures("one_thread")
OPTIONS = {"k": 3, "niter": 10, "nredo": 1, "blocks": 1}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_bert(tmp_path_factory.mktemp("bert"), dropout=0.0))


def spec_for(cls, model, **options):
    return cls.spec("tiny", model=model, batch_size=8, steps=6, warmup_steps=1, lr=1e-3, query_max_length=16,
                    doc_max_length=32, save_every=2, keep_checkpoints=5, method_options={**OPTIONS, **options})


def configured(cls, model, tmp_path, **options):
    from harness.train.model import build_model

    spec, data = spec_for(cls, model, **options), make_data()
    net, tok, enc = build_model(spec)
    examples = [(0, 1), (1, 2), (2, 3), (0, 4), (1, 5), (2, 6), (0, 7), (1, 8)]
    ctx = step_context(spec, data, net, tok, enc, examples)
    ctx.options, ctx.encoding = cls().resolve_options(dict(spec.method_options)), enc
    method = cls()
    method.configure(ctx)
    method.run_episode(ctx, tmp_path)
    return method, ctx, net


def reference_terms(method, ctx, net):
    """Cluster means and last-block gradients of the same micro-batch, computed here without the trainer."""
    batch = ctx.query_batch()
    q = net(**batch.features["query"])
    p = net(**batch.features["passage"])
    losses = triplet_losses(q, p, "dot", 1.0)
    ids = method.clusters_of(batch.examples, losses.device)
    params = [prm for name, prm in net.named_parameters() if ".layer.1." in name]
    means, grads = torch.zeros(3, dtype=losses.dtype), torch.zeros(3, sum(x.numel() for x in params))
    for c in range(3):
        if (ids == c).any():
            means[c] = losses[ids == c].mean()
            grads[c] = torch.cat([g.reshape(-1) for g in torch.autograd.grad(means[c], params, retain_graph=True)])
    return means.detach(), grads, torch.bincount(ids, minlength=3) > 0


def test_clusters_cover_the_queries_and_k_is_checked(tiny, tmp_path):
    method, ctx, _ = configured(IDRO, tiny, tmp_path)
    assert method.assignment.shape == (36,) and set(method.assignment.tolist()) == {0, 1, 2}
    assert np.array_equal(np.load(tmp_path / "clusters.npy"), method.assignment)
    again, _, _ = configured(IDRO, tiny, tmp_path)
    assert np.array_equal(again.assignment, method.assignment)                 # seeded, one faiss thread
    with pytest.raises(ConfigError, match="k=37 clusters for 36 training queries"):
        configured(IDRO, tiny, tmp_path, k=37)
    with pytest.raises(ConfigError, match="option params: no trainable parameter name matches 'decoder'"):
        configured(IDRO, tiny, tmp_path, params="decoder")
    with pytest.raises(ConfigError, match="mode paper needs a temperature tau"):
        configured(IDRO, tiny, tmp_path, mode="paper")
    with pytest.raises(ConfigError, match="unknown variant 'cvar'"):
        configured(GroupDRO, tiny, tmp_path, variant="cvar")


@pytest.mark.parametrize("mode", ["code", "paper"])
def test_idro_step_through_the_trainer_hooks(tiny, tmp_path, mode):
    method, ctx, net = configured(IDRO, tiny, tmp_path, mode=mode, tau=0.5)
    means, grads, present = reference_terms(method, ctx, net)
    prev = method.weights.clone()
    expected_loss, expected = idro_step(prev, means, grads, present, mode=mode, tau=0.5)
    net.zero_grad()
    res = plain_step(net, ctx, method)
    assert torch.allclose(method.weights, expected.to(method.weights.dtype), atol=1e-6)
    assert res.loss == pytest.approx(float(expected_loss), rel=1e-5)
    assert method.scalars()["present_clusters"] == float(present.sum())
    if mode == "code":
        assert res.loss == pytest.approx(float(means.sum()), rel=1e-5)         # h0 = ones
        assert not torch.allclose(method.weights, prev)


@pytest.mark.parametrize("variant", ["sagawa", "greedy"])
def test_groupdro_weights_through_the_trainer_hooks(tiny, tmp_path, variant):
    method, ctx, net = configured(GroupDRO, tiny, tmp_path, variant=variant, alpha=0.5)
    means, _, present = reference_terms(method, ctx, net)
    res = plain_step(net, ctx, method)
    if variant == "sagawa":
        loss, q = sagawa_step(torch.full((3,), 1 / 3, dtype=torch.float64), means.double(), 0.01, present)
        assert torch.allclose(method.weights, q) and res.loss == pytest.approx(float(loss), rel=1e-5)
    else:
        counts = torch.bincount(method.clusters_of(ctx.query_batch().examples, torch.device("cpu")), minlength=3)
        assert res.loss == pytest.approx(float((means * counts).sum() / 8), rel=1e-5)    # h0 = ones
        ema_counts = 0.9 + 0.1 * counts.double()
        expected = greedy_cvar_weights(0.1 * means.double() * present, ema_counts / ema_counts.sum(), 0.5, 0.01)
        assert torch.allclose(method.weights, expected)
        assert torch.allclose(method.ema_losses, 0.1 * means.double() * present)


class Killed(Exception):
    pass


def killable(cls, episode_at=None, step_at=None):
    class Kill(cls):
        name = cls.name

        def run_episode(self, ctx, directory):
            super().run_episode(ctx, directory)
            if ctx.step == episode_at:
                raise Killed(f"killed during the episode before step {ctx.step}")

        def on_step_end(self, ctx):
            if ctx.step == step_at:
                raise Killed(f"killed after step {ctx.step}")

    return Kill()


@pytest.mark.parametrize("cls,options", [(IDRO, {}), (GroupDRO, {"variant": "greedy", "alpha": 0.5})])
def test_kill_and_resume_is_exact(tiny, tmp_path, cls, options):
    spec, data = spec_for(cls, tiny, episode_every=3, **options), make_data()
    straight = cls()
    straight.train(spec, data, tmp_path / "straight")
    assert straight.episodes == 2                                               # before steps 0 and 3
    for name, kill in (("episode", {"episode_at": 3}), ("step", {"step_at": 5})):
        with pytest.raises(Killed):
            killable(cls, **kill).train(spec, data, tmp_path / name)
        cls().train(spec, data, tmp_path / name)
        logs = [read_log(tmp_path / run / "train_log.jsonl") for run in ("straight", name)]
        assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]     # step for step, bit-exact
        assert [r["method"] for r in logs[0]] == [r["method"] for r in logs[1]]
        for file in ("cluster_weights.npy", "clusters.npy"):
            assert np.array_equal(np.load(tmp_path / "straight" / "method" / file),
                                  np.load(tmp_path / name / "method" / file))
        wa, wb = (load_file(str(tmp_path / run / "final" / "model.safetensors")) for run in ("straight", name))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
        clusters = [np.load(tmp_path / run / "episodes" / "step-00000003" / "clusters.npy")
                    for run in ("straight", name)]
        assert np.array_equal(*clusters)
    assert not np.allclose(np.load(tmp_path / "straight" / "method" / "cluster_weights.npy"),
                           1.0 if cls is IDRO else 1.0 / 3)
