"""Oracles S1-S3 (METHODS.md 4.3) through the public SPLADE kernels of ``methods.splade``."""
from __future__ import annotations

import math

import pytest
import torch

from harness.encoders.heads import SparseHead
from harness.errors import ConfigError
from methods.splade import flops_lambda, flops_regularizer, l1_regularizer, splade_pool

# S1: three tokens, vocabulary 4, the third is padding.
S1_LOGITS = torch.tensor([[[1.0, -2.0, 0.5, 0.0],
                           [math.e - 1, 0.2, -1.0, 3.0],
                           [10.0, 10.0, 10.0, 10.0]]], dtype=torch.float64)
S1_MASK = torch.tensor([[1, 1, 0]])
DOC = torch.tensor([0.5, 0.0, 1.0, 2.0], dtype=torch.float64)


def test_s1_max_pooling_and_score():
    w = splade_pool(S1_LOGITS, S1_MASK)
    assert w.shape == (1, 4)
    assert torch.allclose(w[0], torch.tensor([1.0, 0.182322, 0.405465, 1.386294], dtype=torch.float64), atol=1e-6)
    assert float(w[0] @ DOC) == pytest.approx(3.678054, abs=1e-6)


def test_s1_sum_pooling():
    w = splade_pool(S1_LOGITS, S1_MASK, agg="sum")
    assert torch.allclose(w[0], torch.tensor([1.693147, 0.182322, 0.405465, 1.386294], dtype=torch.float64), atol=1e-6)


def test_s1_padding_is_masked_and_special_tokens_kept():
    # Skipping the mask would give log(11) = 2.397895 in every column.
    unmasked = splade_pool(S1_LOGITS, torch.ones(1, 3, dtype=torch.long))
    assert torch.allclose(unmasked, torch.full((1, 4), math.log(11), dtype=torch.float64))
    assert not torch.allclose(splade_pool(S1_LOGITS, S1_MASK), unmasked)
    # Position 0 (a [CLS]-like token) contributes: its 1.0 on column 2 survives in the max.
    only_first = splade_pool(S1_LOGITS, torch.tensor([[1, 0, 0]]))
    assert float(only_first[0, 2]) == pytest.approx(math.log(1.5))


def test_one_pooling_implementation_with_the_engine_head():
    from types import SimpleNamespace

    head = SparseHead("max")
    out = head(SimpleNamespace(logits=S1_LOGITS), S1_MASK)
    assert torch.equal(out, splade_pool(S1_LOGITS, S1_MASK))


def test_s2_flops_and_l1():
    d = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert float(flops_regularizer(d)) == pytest.approx(5.0)
    assert float(l1_regularizer(d)) == pytest.approx(3.0)
    # Absolute values: a sign flip changes nothing.
    assert float(flops_regularizer(-d)) == pytest.approx(5.0)


def test_flops_gradient_flows():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]], requires_grad=True)
    flops_regularizer(w).backward()
    # d/dw_ij of sum_j (mean_i |w_ij|)^2 = 2 * mean_i(|w_ij|) * sign(w_ij) / N (|.|' = 0 at 0)
    assert torch.allclose(w.grad, torch.tensor([[2.0, 0.0, 1.0], [2.0, 0.0, 0.0]]))


def test_s3_splade_schedule():
    lam, t = 1e-4, 50_000
    assert flops_lambda(1, lam, t) == pytest.approx(4.0e-14, rel=1e-9)
    assert flops_lambda(25_000, lam, t) == pytest.approx(2.5e-5, rel=1e-12)
    assert flops_lambda(50_000, lam, t) == lam
    assert flops_lambda(123_456, lam, t) == lam
    assert flops_lambda(49_999, lam, t) < lam


def test_s3_hf_schedule():
    lam, t = 1e-4, 50_000
    assert flops_lambda(50_000, lam, t, schedule="hf") == pytest.approx(9.9996e-5, rel=1e-5)
    assert flops_lambda(50_001, lam, t, schedule="hf") == lam
    assert flops_lambda(10**6, lam, t, schedule="hf") == lam
    assert flops_lambda(1, lam, t, schedule="hf") == pytest.approx(lam / 50_001 ** 2)


@pytest.mark.parametrize("call", [
    lambda: flops_lambda(0, 1e-4, 10),
    lambda: flops_lambda(1, 1e-4, 10, schedule="cosine"),
    lambda: flops_lambda(1, -1.0, 10),
    lambda: splade_pool(S1_LOGITS, S1_MASK, agg="mean"),
    lambda: splade_pool(S1_LOGITS[0], S1_MASK),
    lambda: flops_regularizer(torch.zeros(3)),
])
def test_bad_input_is_refused(call):
    with pytest.raises(ConfigError):
        call()
