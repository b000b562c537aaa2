"""LAMB as released (OpenMatch/COCO-DR ANCE/utils/lamb.py): hand-computed steps, and the ClusterDRO option that
makes the trainer use it (the released warm-up and ANCE commands pass --optimizer lamb; paper 001 says AdamW)."""
from __future__ import annotations

import pytest
import torch

from harness.method import get_method
from methods.lamb import Lamb


def one_step(weights, grad, lr=0.1, weight_decay=0.0):
    p = torch.nn.Parameter(torch.tensor(weights, dtype=torch.float64))
    opt = Lamb([p], lr=lr, eps=1e-8, weight_decay=weight_decay)
    p.grad = torch.tensor(grad, dtype=torch.float64)
    opt.step()
    return p.detach().tolist(), opt


def test_first_step_moves_each_tensor_by_lr_times_its_norm():
    """p = (3, 4), g = (1, 0): m = (0.1, 0), v = (0.001, 0) (no bias correction), u = m / (sqrt(v) + eps)
    = (3.16228, 0), trust = ||p|| / ||u|| = 5 / 3.16228, so p -= 0.1 * 5 * (1, 0) = (2.5, 4)."""
    p, opt = one_step([3.0, 4.0], [1.0, 0.0])
    assert p == pytest.approx([2.5, 4.0], abs=1e-6)
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert state["exp_avg"].tolist() == pytest.approx([0.1, 0.0]) and state["exp_avg_sq"].tolist() == pytest.approx(
        [0.001, 0.0])


def test_weight_norm_cap_zero_weights_and_weight_decay():
    # ||p|| = 50 is capped at 10: the step is 0.1 * 10 along u
    assert one_step([30.0, 40.0], [1.0, 0.0])[0] == pytest.approx([29.0, 40.0], abs=1e-6)
    # zero weights: trust ratio 1, the step is lr * u = 0.1 * (3.16228, 0)
    assert one_step([0.0, 0.0], [1.0, 0.0])[0] == pytest.approx([-0.316228, 0.0], abs=1e-6)
    # weight decay 0.5 adds 0.5 p to u: u = (3.16228 + 1.5, 2), ||u|| = 5.07, the step is 0.5 * u / ||u||
    u = torch.tensor([0.1 / (0.001 ** 0.5 + 1e-8) + 1.5, 2.0], dtype=torch.float64)
    expected = (torch.tensor([3.0, 4.0], dtype=torch.float64) - 0.1 * 5 * u / u.norm()).tolist()
    assert one_step([3.0, 4.0], [1.0, 0.0], weight_decay=0.5)[0] == pytest.approx(expected, abs=1e-9)


def test_cluster_methods_train_with_lamb_when_asked():
    p = torch.nn.Parameter(torch.ones(2))
    groups = [{"params": [p], "weight_decay": 0.0}]
    for name in ("idro", "groupdro", "dro-erm"):
        method = get_method(name)
        spec = method.spec("tiny", model="m", method_options={"optimizer": "lamb"})
        opt = method.make_optimizer(spec, groups)
        assert isinstance(opt, Lamb) and opt.param_groups[0]["lr"] == spec.lr
        assert method.make_optimizer(method.spec("tiny", model="m"), groups) is None      # AdamW by default
    warm = get_method("idro").warmup_spec(get_method("idro").spec(
        "tiny", model="m", method_options={"optimizer": "lamb", "warmup": {"preset": "tiny"}}))
    assert dict(warm.method_options)["optimizer"] == "lamb"                              # the warm-up inherits it
