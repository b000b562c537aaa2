"""GroupDRO kernels (METHODS.md 2.3): Sagawa's exponentiated-gradient step (G1) and COCO-DR's greedy CVaR
rule (G2), through ``methods.groupdro``."""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from methods.groupdro import greedy_cvar_weights, greedy_ema_update, greedy_robust_loss, sagawa_step


def test_g1_sagawa_two_steps():
    group_losses = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    loss, q1 = sagawa_step(torch.full((3,), 1 / 3, dtype=torch.float64), group_losses)   # eta = 0.01
    assert q1.tolist() == pytest.approx([0.330006, 0.333322, 0.336672], abs=1e-6)
    assert float(loss.detach()) == pytest.approx(2.006667, abs=1e-6)
    loss.backward()
    assert group_losses.grad.tolist() == pytest.approx(q1.tolist())          # the *updated* q weighs the loss
    _, q2 = sagawa_step(q1, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert q2.tolist() == pytest.approx([0.326689, 0.333289, 0.340022], abs=1e-6)


def test_sagawa_absent_groups_and_adjustment():
    q = torch.full((3,), 1 / 3, dtype=torch.float64)
    losses = torch.tensor([1.0, 2.0, 7.0], dtype=torch.float64)
    _, q_absent = sagawa_step(q, losses, present=torch.tensor([True, True, False]))
    _, q_zero = sagawa_step(q, torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64))
    assert q_absent.tolist() == q_zero.tolist()                               # absent: loss 0
    # C / sqrt(n_g) with C = 1, n = (1, 4, 100): applied to the update and to the loss
    adj = torch.tensor([1.0, 0.5, 0.1], dtype=torch.float64)
    loss, q_adj = sagawa_step(q, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), adjustment=adj)
    _, expected = sagawa_step(q, torch.tensor([2.0, 2.5, 3.1], dtype=torch.float64))
    assert q_adj.tolist() == pytest.approx(expected.tolist())
    assert float(loss) == pytest.approx(float((expected * torch.tensor([2.0, 2.5, 3.1])).sum()))
    # an adjustment with a zero entry is not applied (group_DRO: only if every adjustment is > 0)
    _, q_off = sagawa_step(q, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64),
                           adjustment=torch.tensor([1.0, 0.0, 1.0]))
    assert q_off.tolist() == pytest.approx([0.330006, 0.333322, 0.336672], abs=1e-6)


def test_g2_greedy_cvar_weights():
    ema = torch.tensor([1.0, 2.0, 3.0])
    assert greedy_cvar_weights(ema, torch.tensor([0.5, 0.3, 0.2]), alpha=0.5).tolist() == pytest.approx([0.01, 2, 2])
    assert greedy_cvar_weights(ema, torch.full((3,), 1 / 3), alpha=0.5).tolist() == pytest.approx([0.01, 1, 2])
    # alpha = 1: every group but the last in loss order gets 1/alpha = 1, and the last the leftover mass
    assert greedy_cvar_weights(ema, torch.tensor([0.5, 0.3, 0.2]), alpha=1.0).tolist() == pytest.approx([1, 1, 1])


def test_g2_greedy_robust_loss_and_emas():
    h = torch.tensor([0.01, 2.0, 2.0])
    loss = greedy_robust_loss(h, torch.tensor([1.0, 1.0, 2.0, 3.0]), torch.tensor([0, 0, 1, 2]))
    assert float(loss) == pytest.approx(2.505)
    ema_l, ema_c = greedy_ema_update(torch.zeros(3), torch.ones(3), torch.tensor([1.0, 2.0, 3.0]),
                                     torch.tensor([2.0, 1.0, 1.0]))
    assert ema_l.tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert ema_c.tolist() == pytest.approx([1.1, 1.0, 1.0])                  # 0.9 * 1 + 0.1 * count
    ema_l2, _ = greedy_ema_update(ema_l, ema_c, torch.tensor([5.0, 0.0, 0.0]), torch.tensor([4.0, 0.0, 0.0]))
    assert ema_l2.tolist() == pytest.approx([0.59, 0.2, 0.3])                # absent groups keep their EMA


def test_greedy_bad_inputs():
    with pytest.raises(ConfigError, match="alpha must lie in"):
        greedy_cvar_weights(torch.ones(3), torch.full((3,), 1 / 3), alpha=0.0)
    with pytest.raises(ConfigError, match="fractions must be positive"):
        greedy_cvar_weights(torch.ones(3), torch.tensor([0.5, 0.5, 0.0]))
    with pytest.raises(ConfigError, match="fractions must be a vector of 3 entries"):
        greedy_cvar_weights(torch.ones(3), torch.ones(2))
