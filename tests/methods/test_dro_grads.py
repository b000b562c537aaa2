"""Per-cluster gradients from one partial backward (methods.dro_grads) equal the per-cluster backward passes
of ``ctx.group_gradients``: Linear and LayerNorm parameters, absent clusters, chunked forwards, gradient
checkpointing; cases the separation does not cover fall back (None)."""
from __future__ import annotations

import pytest
import torch
from trainutil import make_data, make_tiny_bert, step_context

from harness.train.encoding import encode_chunks
from methods.clusters import triplet_losses
from methods.dro_grads import SeparableClusterGradients
from methods.idro import gram_factor

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLES = [(0, i) for i in range(8)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_bert(tmp_path_factory.mktemp("bert"), dropout=0.0, layers=3))


def setting(model_dir, checkpointing=False):
    from harness.train.model import build_model
    from methods.idro import IDRO

    spec = IDRO.spec("tiny", model=model_dir, batch_size=8, query_max_length=16, doc_max_length=24,
                     gradient_checkpointing=checkpointing, progress=False)
    data = make_data(n_sources=1, rows=8, negs=2)
    net, tok, enc = build_model(spec)
    net.train()
    return step_context(spec, data, net, tok, enc, EXAMPLES), net


def forward_losses(ctx, net, chunk=None):
    batch = ctx.batch
    q = encode_chunks(net, batch.features["query"], chunk, torch.device("cpu"), grad=True)[0]
    p = encode_chunks(net, batch.features["passage"], chunk, torch.device("cpu"), grad=True)[0]
    return triplet_losses(q, p, "dot", 1.0)


@pytest.mark.parametrize("chunk,checkpointing", [(None, False), (3, False), (None, True)])
def test_one_backward_equals_one_backward_per_cluster(tiny, chunk, checkpointing):
    ctx, net = setting(tiny, checkpointing)
    names = [n for n, p in net.named_parameters() if ".layer.1." in n or ".layer.2." in n]
    params = [p for n, p in net.named_parameters() if n in names]
    assert any("LayerNorm" in n for n in names) and any("bias" in n for n in names)
    fast = SeparableClusterGradients(net, params)
    clusters = torch.tensor([0, 2, 2, 0, 3, 0, 2, 3])                     # cluster 1 absent
    losses = forward_losses(ctx, net, chunk)
    got = fast.gradients(losses.sum(), clusters, [1, 2], 4)
    assert got is not None and got.shape == (4, sum(p.numel() for p in params))
    expected = torch.zeros_like(got)
    for c, g in ctx.group_gradients(losses, clusters, params).items():
        expected[c] = g
    assert torch.allclose(got, expected, atol=1e-6, rtol=1e-4)
    assert not got[1].any() and got[0].abs().sum() > 0
    # the hooks keep nothing between micro-batches (with checkpointing, the recomputation during the backward
    # passes above re-ran them), and a forward of other sequences does not confuse them
    assert checkpointing or all(not rows for rows in fast.records.values())
    forward_losses(ctx, net).sum()                                         # e.g. another method's step
    losses = forward_losses(ctx, net, chunk)
    again = fast.gradients(losses.sum(), clusters, [1, 2], 4)
    assert again is not None and torch.allclose(again, got, atol=1e-6, rtol=1e-4)
    # the Gram matrix G G^T, built module by module without forming G (what iDRO uses on one process)
    losses = forward_losses(ctx, net, chunk)
    gram = fast.gram(losses.sum(), clusters, [1, 2], 4)
    reference = expected.double() @ expected.double().T
    assert gram is not None and gram.dtype == torch.float64 and gram.shape == (4, 4)
    assert torch.allclose(gram, reference, rtol=1e-4, atol=1e-8 * float(reference.abs().max()))
    assert not gram[1].any() and not gram[:, 1].any() and gram[0, 0] > 0
    factor = gram_factor(gram)
    assert torch.allclose(factor @ factor.T, gram, rtol=1e-9, atol=1e-12 * float(gram.abs().max()))


def test_what_the_separation_does_not_cover_falls_back(tiny):
    ctx, net = setting(tiny)
    embeddings = [p for n, p in net.named_parameters() if "word_embeddings" in n]
    assert SeparableClusterGradients(net, embeddings).gradients(torch.zeros(()), torch.zeros(2, dtype=torch.long),
                                                                [1], 2) is None
    assert SeparableClusterGradients(net, embeddings).gram(torch.zeros(()), torch.zeros(2, dtype=torch.long),
                                                           [1], 2) is None
    params = [p for n, p in net.named_parameters() if ".layer.2." in n]
    fast = SeparableClusterGradients(net, params)
    losses = forward_losses(ctx, net)
    # a sequence count that does not match the batch: not this micro-batch's forward
    assert fast.gradients(losses.sum(), torch.zeros(5, dtype=torch.long), [1, 2], 2) is None
    losses = forward_losses(ctx, net)
    assert fast.gram(losses.sum(), torch.zeros(5, dtype=torch.long), [1, 2], 2) is None


def test_idro_uses_it_for_the_triplet_loss_and_gets_the_same_weights(tiny, tmp_path):
    from trainutil import plain_step

    from methods.idro import IDRO

    results = {}
    for mode in ("auto", "backward"):
        from harness.train.model import build_model

        spec = IDRO.spec("tiny", model=tiny, batch_size=8, query_max_length=16, doc_max_length=24, progress=False,
                         method_options={"k": 3, "niter": 10, "nredo": 1, "blocks": 2, "cluster_grads": mode})
        data = make_data(n_sources=1, rows=8, negs=2)
        torch.manual_seed(0)
        net, tok, enc = build_model(spec)
        net.train(False)
        ctx = step_context(spec, data, net, tok, enc, EXAMPLES)
        method = IDRO()
        ctx.options, ctx.encoding = method.resolve_options(dict(spec.method_options)), enc
        method.configure(ctx)
        method.run_episode(ctx, tmp_path)
        assert (method.fast is not None) == (mode == "auto")
        res = plain_step(net, ctx, method)
        results[mode] = (res.loss, method.weights.clone(), {n: p.grad.clone() for n, p in net.named_parameters()
                                                            if p.grad is not None})
    (la, wa, ga), (lb, wb, gb) = results["auto"], results["backward"]
    assert la == pytest.approx(lb, rel=1e-6) and torch.allclose(wa, wb, atol=1e-7)
    assert ga.keys() == gb.keys() and all(torch.allclose(ga[n], gb[n], atol=1e-6) for n in ga)
