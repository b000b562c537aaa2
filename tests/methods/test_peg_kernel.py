"""PEG's loss kernel against the hand-checkable oracles P1-P5 of METHODS.md 3.4, plus its
gradients (w_q and a_n are constants), the a_mode variants, masks and bad input.

Oracle batch (tau = 1, alpha = 0.5, beta = 0.1, t0 = 0): q1 has positive 0.8 and negatives
[0.9, 0.3]; q2 has positive 0.4 and negatives [0.5, 0.1].
"""
from __future__ import annotations

import math

import pytest
import torch

from harness.train.losses import candidate_mask, info_nce_from_scores
from methods.peg import peg_from_scores, peg_loss

F64 = torch.float64


def batch(dtype=F64):
    return torch.tensor([0.8, 0.4], dtype=dtype), torch.tensor([[0.9, 0.3], [0.5, 0.1]], dtype=dtype)


def lse(*xs: float) -> float:
    top = max(xs)
    return top + math.log(sum(math.exp(x - top) for x in xs))


def terms(tau=1.0, **kw):
    pos, neg = batch()
    sim = torch.cat([pos[:, None], neg], 1)
    return peg_from_scores(sim, torch.zeros(2, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool), 0.0,
                           tau=tau, **kw)


# ------------------------------------------------------------------ P1
def test_p1_statistics_and_scaling_factors():
    out = terms()
    assert float(out.sigma) == pytest.approx(0.5, abs=1e-12)
    assert out.weights.tolist() == pytest.approx([1.0, 0.8], abs=1e-12)
    assert float(out.new_t) == pytest.approx(0.3, abs=1e-12)
    assert out.above.tolist() == [True, False]
    # columns [p, n1, n2]: q1's 0.9 >= 0.8 is modulated to t + 0.8 = 1.1; q2 (0.4 < sigma) keeps 1
    assert out.modulated.tolist() == [[False, True, False], [False, False, False]]
    assert out.factor.flatten().tolist() == pytest.approx([1.0, 1.1, 1.0, 1.0, 1.0, 1.0], abs=1e-12)
    assert out.modulation_counts() == (1, 1, 0)                 # a = 1.1 > 1: emphasised
    assert out.n_negatives == 4


def test_p1_losses_mean_and_sum():
    pos, neg = batch()
    per, t1 = peg_loss(pos, neg, 0.0, tau=1.0, reduction="none")
    assert per.tolist() == pytest.approx([1.035239, 0.836729], abs=1e-6)
    assert per[0].item() == pytest.approx(lse(0.8, 1.1 * 0.9, 0.3) - 0.8, abs=1e-12)          # by hand
    assert per[1].item() == pytest.approx(0.8 * (lse(0.4, 0.5, 0.1) - 0.4), abs=1e-12)
    assert float(peg_loss(pos, neg, 0.0, tau=1.0)[0]) == pytest.approx(0.935984, abs=1e-6)
    assert float(peg_loss(pos, neg, 0.0, tau=1.0, reduction="sum")[0]) == pytest.approx(1.871968, abs=1e-6)
    assert float(t1) == pytest.approx(0.3, abs=1e-12)


# ------------------------------------------------------------------ P2: update order
def test_p2_t_is_updated_before_it_is_used():
    pos, neg = batch()
    # Using t before its update means a = t0 + s(q,p) = 0.8 for q1's hard negative: the P2 numbers.
    stale = peg_loss(pos, neg, 0.0, tau=1.0, momentum=False, reduction="none")[0]
    assert stale[0].item() == pytest.approx(0.928080, abs=1e-6)
    assert float(stale.mean()) == pytest.approx(0.882404, abs=1e-6)
    # The kernel's default uses the updated t (P1), which differs.
    fresh = peg_loss(pos, neg, 0.0, tau=1.0)[0]
    assert float(fresh) == pytest.approx(0.935984, abs=1e-6) and abs(float(fresh) - 0.882404) > 0.05


# ------------------------------------------------------------------ P3: vanilla InfoNCE
def test_p3_both_ingredients_off_is_vanilla_infonce():
    pos, neg = batch()
    per, _ = peg_loss(pos, neg, 0.0, tau=1.0, weight_queries=False, scale_negatives=False, reduction="none")
    assert per.tolist() == pytest.approx([0.997576, 1.045911], abs=1e-6)
    assert float(per.mean()) == pytest.approx(1.021744, abs=1e-6)
    # ... and equals the trainer's InfoNCE (HN only: each query sees its own group) to rounding.
    scores = torch.tensor([[0.8, 0.9, 0.3, 0, 0, 0], [0, 0, 0, 0.4, 0.5, 0.1]], dtype=F64)
    ref = info_nce_from_scores(scores, 3, in_batch=False, reduction="none")
    assert torch.allclose(per, ref, atol=1e-12)


def test_each_ingredient_alone():
    pos, neg = batch()
    no_w = peg_loss(pos, neg, 0.0, tau=1.0, weight_queries=False, reduction="none")[0]
    assert no_w.tolist() == pytest.approx([1.035239, lse(0.4, 0.5, 0.1) - 0.4], abs=1e-6)
    no_a = peg_loss(pos, neg, 0.0, tau=1.0, scale_negatives=False, reduction="none")[0]
    assert no_a.tolist() == pytest.approx([0.997576, 0.8 * 1.045911], abs=1e-6)


# ------------------------------------------------------------------ P4: overflow safety at tau = 0.01
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-6), (torch.float32, 2e-5), (torch.bfloat16, 2e-5)])
def test_p4_tau_001_in_log_space(dtype, tol):
    pos, neg = (x.to(dtype) for x in batch())
    per, _ = peg_loss(pos, neg, 0.0, tau=0.01, reduction="none")
    assert per.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    if dtype == torch.bfloat16:     # bf16 cannot hold 0.9 exactly: compare with the bf16-rounded inputs
        p, n = (x.double().tolist() for x in (pos, neg))
        t1 = 0.5 * (p[0] + p[1]) / 2
        expect = lse(p[0] / 0.01, (t1 + p[0]) * n[0][0] / 0.01, n[0][1] / 0.01) - p[0] / 0.01
        assert per[0].item() == pytest.approx(expect, rel=1e-5)
        return
    assert per.tolist() == pytest.approx([19.000000, 8.000036], abs=tol)
    # The naive formula overflows in fp32 here (e^99 > 3.4e38), which is why log space is needed.
    naive = torch.exp(torch.tensor([99.0], dtype=torch.float32))
    assert math.isinf(naive.item())


def test_p4_gradients_finite_at_tau_001():
    pos, neg = batch(torch.float32)
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    peg_loss(pos, neg, 0.0, tau=0.01)[0].backward()
    assert torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()


# ------------------------------------------------------------------ P5: momentum
def test_p5_momentum_sequence():
    pos, neg = batch()
    _, t1 = peg_loss(pos, neg, 0.0, tau=1.0)
    _, t2 = peg_loss(pos, neg, t1, tau=1.0)
    assert (float(t1), float(t2)) == pytest.approx((0.3, 0.45), abs=1e-12)
    _, const = peg_loss(pos, neg, 0.25, tau=1.0, momentum=False)
    assert float(const) == 0.25


# ------------------------------------------------------------------ gradients: w_q and a_n are constants
def test_gradients_treat_weights_and_scales_as_constants():
    pos, neg = batch()
    pos.requires_grad_(True)
    neg.requires_grad_(True)
    peg_loss(pos, neg, 0.0, tau=1.0, reduction="sum")[0].backward()
    # q1: loss = lse(p, 1.1 n1, n2) - p with a = 1.1 constant
    z1 = [0.8, 1.1 * 0.9, 0.3]
    soft1 = [math.exp(z - lse(*z1)) for z in z1]
    # q2: loss = 0.8 (lse(p, n1, n2) - p) with w = 0.8 constant (a gradient through w = s/sigma
    # would add lse(...)/sigma > 0 and push the positive *down*)
    z2 = [0.4, 0.5, 0.1]
    soft2 = [math.exp(z - lse(*z2)) for z in z2]
    assert pos.grad.tolist() == pytest.approx([soft1[0] - 1, 0.8 * (soft2[0] - 1)], abs=1e-12)
    assert neg.grad.flatten().tolist() == pytest.approx([1.1 * soft1[1], soft1[2], 0.8 * soft2[1], 0.8 * soft2[2]],
                                                        abs=1e-12)
    assert (pos.grad < 0).all()


# ------------------------------------------------------------------ a_mode, ties, masks, guards
def test_a_mode_neg_scales_by_the_negatives_own_similarity():
    pos, neg = batch()
    per, _ = peg_loss(pos, neg, 0.0, tau=1.0, a_mode="neg", reduction="none")
    assert per[0].item() == pytest.approx(lse(0.8, (0.3 + 0.9) * 0.9, 0.3) - 0.8, abs=1e-12)
    assert per[1].item() == pytest.approx(0.836729, abs=1e-6)       # q2 is below sigma: unchanged


def test_ties_are_modulated():
    pos = torch.tensor([0.8, 0.4], dtype=F64)
    neg = torch.tensor([[0.8, 0.3], [0.5, 0.1]], dtype=F64)
    per, _ = peg_loss(pos, neg, 0.0, tau=1.0, reduction="none")
    assert per[0].item() == pytest.approx(lse(0.8, 1.1 * 0.8, 0.3) - 0.8, abs=1e-12)


def test_neg_mask_removes_entries():
    pos, neg = batch()
    padded = torch.cat([neg, torch.tensor([[5.0], [5.0]], dtype=F64)], 1)   # a huge score that must not count
    mask = torch.tensor([[True, True, False], [True, True, False]])
    masked, t_m = peg_loss(pos, padded, 0.0, tau=1.0, neg_mask=mask, reduction="none")
    plain, t_p = peg_loss(pos, neg, 0.0, tau=1.0, reduction="none")
    assert torch.allclose(masked, plain, atol=1e-15) and float(t_m) == float(t_p)
    as_float = peg_loss(pos, padded, 0.0, tau=1.0, neg_mask=mask.double(), reduction="none")[0]
    assert torch.allclose(as_float, plain, atol=1e-15)
    with pytest.raises(ValueError, match="boolean"):
        peg_loss(pos, padded, 0.0, neg_mask=mask.double() * 0.5)
    with pytest.raises(ValueError, match="shape"):
        peg_loss(pos, padded, 0.0, neg_mask=mask[:, :2])


def test_query_with_every_negative_masked_has_zero_loss_and_finite_gradient():
    pos, neg = batch()
    pos.requires_grad_(True)
    mask = torch.tensor([[True, True], [False, False]])
    per, _ = peg_loss(pos, neg, 0.0, tau=0.01, neg_mask=mask, reduction="none")
    assert per[1].item() == 0.0
    per.sum().backward()
    assert torch.isfinite(pos.grad).all()


def test_batch_mean_overrides_the_local_statistics():
    pos, neg = batch()
    out_loss, t = peg_loss(pos, neg, 0.0, tau=1.0, batch_mean=0.45, reduction="none")
    # sigma = 0.35: both queries are above it, so neither is down-weighted; t = 0.225
    assert float(t) == pytest.approx(0.225, abs=1e-12)
    assert out_loss[1].item() == pytest.approx(lse(0.4, (0.225 + 0.4) * 0.5, 0.1) - 0.4, abs=1e-12)


def test_weight_is_clipped_to_unit_interval():
    pos = torch.tensor([0.8, -0.2], dtype=F64)
    neg = torch.tensor([[0.1], [0.1]], dtype=F64)
    out = peg_from_scores(torch.cat([pos[:, None], neg], 1), torch.zeros(2, dtype=torch.long),
                          torch.ones(2, 2, dtype=torch.bool), 0.0, tau=1.0)
    assert float(out.sigma) == pytest.approx(0.2) and out.weights.tolist() == [1.0, 0.0]   # s/sigma = -1 -> 0
    low = peg_from_scores(torch.cat([-pos[:, None].abs(), neg], 1), torch.zeros(2, dtype=torch.long),
                          torch.ones(2, 2, dtype=torch.bool), 0.0, tau=1.0)
    assert float(low.sigma) < 0 and low.weights.tolist() == [1.0, 1.0]     # s/sigma > 1 -> 1


def test_candidate_matrix_form_equals_the_pair_form():
    """The trainer layout: queries score all passages [p1, n1, n2, p2, n3, n4]; negatives are every
    column but the own positive (here with in-batch negatives)."""
    g = torch.Generator().manual_seed(0)
    sim = torch.rand(2, 6, generator=g, dtype=F64) * 0.6 + 0.2
    allowed, targets = candidate_mask(2, 6, 3)
    full = peg_from_scores(sim, targets, allowed, 0.1, tau=0.05, reduction="none")
    pos = sim[torch.arange(2), targets]
    neg = torch.stack([torch.cat([sim[i, :targets[i]], sim[i, targets[i] + 1:]]) for i in range(2)])
    pair, t = peg_loss(pos, neg, 0.1, tau=0.05, reduction="none")
    assert torch.allclose(full.losses, pair, atol=1e-12) and float(full.new_t) == float(t)


def test_bad_input_is_refused():
    pos, neg = batch()
    with pytest.raises(ValueError, match="a_mode"):
        peg_loss(pos, neg, 0.0, a_mode="both")
    with pytest.raises(ValueError, match="reduction"):
        peg_loss(pos, neg, 0.0, reduction="max")
    with pytest.raises(ValueError, match="tau"):
        peg_loss(pos, neg, 0.0, tau=0.0)
    with pytest.raises(ValueError, match="alpha"):
        peg_loss(pos, neg, 0.0, alpha=1.5)
    with pytest.raises(ValueError, match=r"pos_sim \(B,\)"):
        peg_loss(pos[:1], neg, 0.0)
    with pytest.raises(ValueError, match=r"pos_sim \(B,\)"):
        peg_loss(pos[:0], neg[:0], 0.0)


def test_emphasised_share_of_modulated_negatives_grows_with_t():
    """Fixed similarities, growing t: a_n = t + s(q,p) crosses 1, so modulated negatives go
    from damped (a_n < 1, early training) to emphasised (a_n > 1), never back."""
    g = torch.Generator().manual_seed(3)
    sim = torch.rand(32, 64, generator=g, dtype=F64) * 0.8
    targets = torch.arange(32) * 2
    sim[torch.arange(32), targets] = torch.rand(32, generator=g, dtype=F64) * 0.3 + 0.5
    allowed = torch.ones_like(sim, dtype=torch.bool)
    shares = []
    for t in torch.linspace(0, 0.6, 13).tolist():
        out = peg_from_scores(sim, targets, allowed, t, momentum=False, tau=0.01)
        modulated, emphasised, damped = out.modulation_counts()
        assert modulated > 0 and emphasised + damped <= modulated
        shares.append(emphasised / modulated)
    assert shares[0] == 0.0 and shares[-1] == 1.0
    assert all(b >= a for a, b in zip(shares, shares[1:]))
