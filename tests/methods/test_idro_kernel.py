"""iDRO weight update (METHODS.md 2.2) through the public kernel ``methods.idro.idro_step``: oracles I1-I3.

Three clusters, 2-D gradients G1 = (1, 0), G2 = (0, 1), G3 = (1, 1), losses (1, 16, 81), so l^0.25 = (1, 2, 3).
"""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from methods.idro import gram_factor, idro_step

GRADS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
PRESENT = torch.tensor([True, True, True])


def losses(values=(1.0, 16.0, 81.0)):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_i1_paper_mode():
    ell = losses()
    loss, w = idro_step(torch.full((3,), 1 / 3, dtype=torch.float64), ell, GRADS, PRESENT, mode="paper", tau=10.0)
    assert w.tolist() == pytest.approx([0.078148, 0.142394, 0.779458], abs=1e-6)
    assert float(loss.detach()) == pytest.approx(32.3405, abs=1e-4)
    # the loss weights alpha * omega, read off the gradient of the loss w.r.t. the cluster losses
    loss.backward()
    assert ell.grad.tolist() == pytest.approx([0.013025, 0.047465, 0.389729], abs=1e-6)
    _, w100 = idro_step(torch.full((3,), 1 / 3, dtype=torch.float64), losses(), GRADS, PRESENT, mode="paper", tau=100.0)
    assert w100.tolist() == pytest.approx([0.301165, 0.319788, 0.379047], abs=1e-6)
    _, w0 = idro_step(torch.full((3,), 1 / 3, dtype=torch.float64), losses(), GRADS, PRESENT, mode="paper", tau=1e-6)
    assert w0.tolist() == [0.0, 0.0, 1.0]                      # tau -> 0: one-hot on cluster 3


def test_i2_code_mode_first_and_second_step():
    ell = losses()
    loss, h1 = idro_step(torch.ones(3, dtype=torch.float64), ell, GRADS, PRESENT)   # mode="code" is the default
    assert float(loss.detach()) == pytest.approx(98.0)                  # h0 = ones: the sum of the cluster means
    assert h1.tolist() == pytest.approx([0.301618, 0.328493, 0.369889], abs=1e-6)
    loss.backward()
    assert ell.grad.tolist() == [1.0, 1.0, 1.0]                # previous weights, no alpha factor
    loss2, h2 = idro_step(h1, losses(), GRADS, PRESENT)
    assert float(loss2.detach()) == pytest.approx(35.518548, abs=1e-6)
    assert h2.tolist() == pytest.approx([0.298501, 0.327885, 0.373614], abs=1e-6)


def test_i2_intermediates_exp_of_shifted_e():
    # e = 0.05 * column means of RTG = (0.052022, 0.137377, 0.256066); exp(e - max) = (0.815426, 0.888084, 1):
    # with ema = 0 the new weights are exactly those factors, normalised.
    _, h = idro_step(torch.ones(3, dtype=torch.float64), losses(), GRADS, PRESENT, ema=0.0, eps=0.0)
    factors = torch.tensor([0.815426, 0.888084, 1.0], dtype=torch.float64)
    assert h.tolist() == pytest.approx((factors / factors.sum()).tolist(), abs=1e-6)


def test_i3_absent_cluster_is_masked_then_clamped():
    grads = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    loss, h = idro_step(torch.full((3,), 1 / 3, dtype=torch.float64), losses((1.0, 16.0, 0.0)), grads,
                        torch.tensor([True, True, False]))
    assert h.tolist() == pytest.approx([0.487503, 0.512497, 0.01], abs=1e-6)
    assert float(h.sum()) > 1.0                                 # the clamp comes after normalisation
    assert float(loss) == pytest.approx((1 + 16) / 3)


def test_code_mode_uses_cosines_so_gradient_scale_does_not_matter():
    _, h = idro_step(torch.ones(3, dtype=torch.float64), losses(), GRADS * 1e4, PRESENT)
    assert h.tolist() == pytest.approx([0.301618, 0.328493, 0.369889], abs=1e-6)
    _, w = idro_step(torch.full((3,), 1 / 3, dtype=torch.float64), losses(), GRADS * 2, PRESENT, mode="paper", tau=40.0)
    assert w.tolist() == pytest.approx([0.078148, 0.142394, 0.779458], abs=1e-6)    # raw dots: 4x r, 4x tau


@pytest.mark.parametrize("mode", ["code", "paper"])
def test_a_factor_of_the_gram_matrix_gives_the_same_step(mode):
    # idro_step sees G only through G G^T, so a K x K factor F (F F^T = G G^T) replaces the (K, P) G; the
    # absent cluster's row stays exactly zero
    torch.manual_seed(0)
    grads = torch.randn(4, 1000, dtype=torch.float64)
    grads[2] = 0.0
    present = torch.tensor([True, True, False, True])
    prev = torch.tensor([0.4, 0.2, 0.01, 0.4], dtype=torch.float64)
    ell = (1.0, 16.0, 0.0, 5.0)
    factor = gram_factor(grads @ grads.T)
    assert factor.shape == (4, 4) and not factor[2].any()
    assert torch.allclose(factor @ factor.T, grads @ grads.T, rtol=1e-10, atol=1e-9)
    full = idro_step(prev, losses(ell), grads, present, mode=mode, tau=5000.0)
    small = idro_step(prev, losses(ell), factor, present, mode=mode, tau=5000.0)
    assert torch.allclose(small[1], full[1], rtol=1e-10, atol=1e-12)
    assert float(small[0]) == pytest.approx(float(full[0]), rel=1e-12)
    assert not torch.allclose(full[1], prev / prev.sum())      # a real update, not a no-op
    nan = grads @ grads.T
    nan[0, 1] = float("nan")
    assert gram_factor(nan).isnan().all()                      # no eigensolver error: NaN, as G's would give


def test_bad_inputs():
    with pytest.raises(ConfigError, match="unknown iDRO mode 'both'"):
        idro_step(torch.ones(3), losses(), GRADS, PRESENT, mode="both")
    with pytest.raises(ConfigError, match="paper mode needs a temperature tau"):
        idro_step(torch.ones(3), losses(), GRADS, PRESENT, mode="paper")
    with pytest.raises(ConfigError, match=r"cluster_grads must be \(K=3, P\)"):
        idro_step(torch.ones(3), losses(), GRADS[:2], PRESENT)
    with pytest.raises(ConfigError, match="prev_weights must be a vector of 3 entries"):
        idro_step(torch.ones(2), losses(), GRADS, PRESENT)


def test_paper_appendix_mode_uses_normalised_alpha():
    """Paper 001 Appendix E: r_ij = alpha_i alpha_j G_i.G_j with alpha = l^beta / sum l^beta = (1/6, 1/3, 1/2).
    By hand: G Gᵀ = [[1,0,1],[0,1,1],[1,1,2]], row sums of r = (1/9, 5/18, 3/4); tau = 0.1 gives
    softmax(10 * (1/9, 5/18, 3/4)) = (0.001663, 0.008802, 0.989535) and the loss sum alpha w l = 40.1234."""
    uniform = torch.full((3,), 1 / 3, dtype=torch.float64)
    loss, w = idro_step(uniform, losses(), GRADS, PRESENT, mode="paper-appendix", tau=0.1)
    assert w.tolist() == pytest.approx([0.001663, 0.008802, 0.989535], abs=1e-6)
    assert float(loss.detach()) == pytest.approx(40.123397, abs=1e-5)
    # the same update as Eq. 10's paper mode at tau * (sum l^beta)^2 = tau * 36
    _, w_eq10 = idro_step(uniform, losses(), GRADS, PRESENT, mode="paper", tau=3.6)
    assert w.tolist() == pytest.approx(w_eq10.tolist(), abs=1e-12)
    with pytest.raises(ConfigError):
        idro_step(uniform, losses(), GRADS, PRESENT, mode="paper-appendix")
