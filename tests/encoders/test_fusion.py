"""oneDNN-fused linear layers: same vectors as the stock forward, same module structure."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from harness.encoders.fusion import FusedLinear, fuse_linear_layers, fusion_available
from harness.encoders.hf import HFEncoder

pytestmark = pytest.mark.skipif(not fusion_available(), reason="this torch build has no oneDNN fused linear")


def test_fused_linear_equals_linear_with_and_without_gelu():
    torch.manual_seed(0)
    lin = nn.Linear(48, 96)
    x = torch.randn(3, 11, 48)
    with torch.inference_mode():
        expected = lin(x)
        lin.__class__ = FusedLinear
        torch.testing.assert_close(lin(x), expected, rtol=1e-5, atol=1e-5)
        lin.fused_activation = "gelu"
        torch.testing.assert_close(lin(x), nn.functional.gelu(expected), rtol=1e-5, atol=1e-5)


def test_autograd_falls_back_to_the_stock_path():
    torch.manual_seed(0)
    lin = nn.Linear(8, 4)
    lin.__class__ = FusedLinear
    lin(torch.randn(2, 8)).sum().backward()  # the oneDNN op has no autograd; the fallback does
    assert lin.weight.grad is not None and lin.weight.grad.shape == (4, 8)


def test_tiny_bert_fused_equals_unfused(tiny_bert_dir):
    texts = ["the red fish", "a long river with fish and a small house in the old city near the road", "cat"]
    fused = HFEncoder(str(tiny_bert_dir), pooling="mean")
    plain = HFEncoder(str(tiny_bert_dir), pooling="mean", cpu_fusion=False)
    got = fused.encode_docs(texts, progress=False)
    assert fused.fused == {"linear": 2 * 6 + 1, "gelu": 2}  # 6 linears per layer + pooler; GELU per layer
    assert plain.fused == {}
    np.testing.assert_allclose(got, plain.encode_docs(texts, progress=False), rtol=1e-5, atol=1e-5)
    model = fused._model
    assert all(isinstance(m, nn.Linear) for m in model.modules() if isinstance(m, FusedLinear))
    assert set(model.state_dict()) == set(plain._model.state_dict())


def test_fusion_leaves_approximate_gelu_alone():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(4, 4)
            self.intermediate_act_fn = nn.GELU(approximate="tanh")

    block = Block()
    counts = fuse_linear_layers(block)
    assert counts == {"linear": 1, "gelu": 0}
    assert isinstance(block.intermediate_act_fn, nn.GELU)
