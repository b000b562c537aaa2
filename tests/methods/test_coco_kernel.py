"""COCO's contrastive loss (METHODS.md 2.1) through ``methods.coco.coco_loss``: oracle C1, no self-pairs,
both directions, and the per-rank split that the all-gather makes equal to the global batch."""
from __future__ import annotations

import math

import pytest
import torch

from methods.coco import coco_loss, coco_losses


def test_c1_oracle():
    spans = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss = coco_loss(spans, spans.clone())
    assert float(loss) == pytest.approx(math.log(1 + 2 / math.e), abs=1e-7)
    assert float(loss) == pytest.approx(0.551445, abs=1e-6)
    assert coco_losses(spans, spans.clone()).tolist() == pytest.approx([0.551445] * 4, abs=1e-6)


def test_three_documents_never_score_a_span_against_itself():
    g = torch.Generator().manual_seed(3)
    a = 3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    b = 3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    spans = torch.cat([a, b])
    got = coco_losses(a, b).tolist()
    for i in range(6):
        partner = (i + 3) % 6
        others = [k for k in range(6) if k != i]          # the self column is not a candidate
        log_z = math.log(sum(math.exp(float(spans[i] @ spans[k])) for k in others))
        expected = log_z - float(spans[i] @ spans[partner])
        assert got[i] == pytest.approx(expected, rel=1e-12)
    # a self-pair would dominate: with the spans scaled up its score would be the largest of every row
    assert float(coco_loss(10 * a, 10 * b)) > 1.0


def test_no_temperature_and_dot_product():
    a = torch.tensor([[2.0, 0.0]])
    b = torch.tensor([[3.0, 0.0]])
    # one document: each span's only candidate is its partner -> loss 0 whatever the scale
    assert coco_losses(a, b).tolist() == [0.0, 0.0]
    a2 = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    b2 = torch.tensor([[3.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    # row a_0 scores [self, 0, 6, 0]: -log(e^6 / (e^0 + e^6 + e^0)); a cosine or a temperature would change it
    assert float(coco_losses(a2, b2)[0]) == pytest.approx(math.log(1 + 2 * math.exp(-6)), rel=1e-6)


def test_ranks_with_a_gather_reproduce_the_global_batch_losses_and_gradients():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    full_a, full_b = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    full = coco_losses(full_a, full_b)
    full.mean().backward()
    halves_a = [a[:2].clone().requires_grad_(True), a[2:].clone().requires_grad_(True)]
    halves_b = [b[:2].clone().requires_grad_(True), b[2:].clone().requires_grad_(True)]
    per_rank = []
    for rank in (0, 1):
        def gather(t, rank=rank):
            # an all-gather with gradient: every slice's gradient reaches its owner (the trainer's gather
            # sums them with an all-reduce in its backward)
            return torch.cat(halves_a if t is halves_a[rank] else halves_b)
        losses = coco_losses(halves_a[rank], halves_b[rank], rank=rank, gather=gather)
        per_rank.append(losses)
        # summed rank means / 2: the DDP average, each rank's slice receiving every rank's gradient
        (losses.mean() / 2).backward()
    assert torch.cat([per_rank[0][:2], per_rank[1][:2]]).tolist() == pytest.approx(full[:4].tolist(), rel=1e-12)
    assert torch.cat([per_rank[0][2:], per_rank[1][2:]]).tolist() == pytest.approx(full[4:].tolist(), rel=1e-12)
    assert float(torch.cat(per_rank).detach().mean()) == pytest.approx(float(full.detach().mean()), rel=1e-12)
    # each rank's mean loss / 2, summed over ranks (DDP's average): the global batch's gradient exactly
    assert torch.allclose(torch.cat([h.grad for h in halves_a]), full_a.grad, rtol=1e-10, atol=1e-14)
    assert torch.allclose(torch.cat([h.grad for h in halves_b]), full_b.grad, rtol=1e-10, atol=1e-14)
    assert float(full_a.grad.abs().max()) > 1e-3
