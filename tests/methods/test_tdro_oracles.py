"""tDRO oracles T1-T9 (METHODS.md 1.7) through the public functions of ``methods.tdro``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.errors import ConfigError
from methods.tdro import (
    group_measurements,
    select_bottom,
    select_top,
    selection_size,
    transfer_plan,
    update_weights,
    weighted_proxy_loss,
)

# Common data: proxy losses A = (2, 4), B = (1, 1); reference losses A = (0.5, 2.0), B = (1, 1).
PROXY = torch.tensor([2.0, 4.0, 1.0, 1.0])
REF = torch.tensor([0.5, 2.0, 1.0, 1.0])
GROUPS = torch.tensor([0, 0, 1, 1])
HALF = torch.log(torch.tensor([0.5, 0.5]))


def alpha_after(m: torch.Tensor, log_w: torch.Tensor = HALF, **kw) -> torch.Tensor:
    out = update_weights(log_w, m, **kw)
    assert torch.allclose(out.exp().sum(), torch.tensor(1.0), atol=1e-6)      # softmax-normalised log-weights
    return out.exp()


def close(t: torch.Tensor, values, atol: float = 1e-6) -> bool:
    return torch.allclose(t.double(), torch.tensor(values, dtype=torch.float64), atol=atol)


def test_t1_paper_mode_ratio_of_group_means():
    m = group_measurements(PROXY, REF, GROUPS, 2, measure="relative", mode="paper")
    assert close(m, [2.4, 1.0])
    assert close(alpha_after(m), [0.502692, 0.497308])


def test_t2_code_mode_per_sample_normalised_ratio():
    m = group_measurements(PROXY, REF, GROUPS, 2)                   # defaults: relative, code mode
    assert close(m, [13.5, 4.5], atol=1e-5)
    assert close(alpha_after(m), [0.503162, 0.496838])
    twice = update_weights(update_weights(HALF, m), m).exp()
    assert close(twice, [0.506324, 0.493676])


def test_t3_reference_clamp():
    ref = torch.tensor([0.0001, 2.0, 1.0, 1.0])
    m = group_measurements(PROXY, ref, GROUPS, 2, mode="code")     # r0 = 2.5e-5 < 1e-4 -> 1
    assert close(m, [5.0001, 4.0001], atol=1e-4)
    assert close(alpha_after(m), [0.500781, 0.499219])
    paper = group_measurements(PROXY, ref, GROUPS, 2, mode="paper")
    assert close(alpha_after(paper), [0.503162, 0.496838])


def test_t4_excess_loss():
    m = group_measurements(PROXY, REF, GROUPS, 2, measure="excess")
    assert close(m, [1.75, 0.0])
    assert close(alpha_after(m), [0.504999, 0.495001])


def test_t5_no_clipping_below_norm_one():
    assert close(alpha_after(torch.tensor([0.6, 0.2])), [0.502, 0.498])


def test_t6_gradient_accumulation_averages_micro_batches():
    stacked = torch.tensor([[12.0, 4.0], [0.0, 8.0]])              # average (6, 6): no relative change
    assert close(alpha_after(stacked), [0.5, 0.5])


def test_t7_alpha_weighted_proxy_loss():
    losses = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = weighted_proxy_loss(losses, torch.tensor([0, 0, 1]), torch.tensor([0.6, 0.4]))
    assert loss.item() == pytest.approx(1.875)
    loss.backward()
    assert close(losses.grad, [0.375, 0.375, 0.25])                # the weights w_i


def test_t8_three_domains():
    log_w = torch.log(torch.tensor([0.2, 0.3, 0.5]))
    assert close(alpha_after(torch.tensor([1.0, 2.0, 2.0]), log_w), [0.198935, 0.300399, 0.500665])


# Paper 000 Table 8, tDRO column, in the table's order.
TABLE8 = {"miracl": 0.1314, "medmcqa": 0.0940, "t2ranking": 0.0885, "nq": 0.0875, "eli5": 0.0847,
          "yahoo_answers": 0.0838, "msmarco": 0.0713, "trivia": 0.0623, "gooaq_pairs": 0.0600, "agnews": 0.0563,
          "stackexchange_dups": 0.0472, "amazon_review_2018": 0.0425, "mr_tydi_combined": 0.0252,
          "codesearchnet": 0.0154, "hotpotqa": 0.0131, "dureader": 0.0110, "squad_pairs": 0.0072,
          "searchQA_top5_snippets": 0.0066, "xsum": 0.0063, "quora_duplicates": 0.0019,
          "sentence-compression": 0.0011, "cnn_dailymail": 0.0009, "SimpleWiki": 0.0007, "altlex": 0.0006,
          "AllNLI": 0.0005}


def test_t9_top70_of_table8():
    names = list(TABLE8)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(names))                             # selection must not depend on input order
    weights = np.array([TABLE8[names[i]] for i in order])
    top = select_top(weights, 70)
    kept = {names[i] for i, w in zip(order, top) if w > 0}
    assert kept == set(names[:17])                                  # through squad_pairs (0.0072)
    assert "searchQA_top5_snippets" not in kept
    assert np.allclose(top[top > 0], 1 / 17) and round(1 / 17, 7) == 0.0588235
    assert top.sum() == pytest.approx(1.0)


def test_selection_sizes_and_bottom():
    assert [selection_size(25, p) for p in (20, 50, 60, 70, 80, 90)] == [5, 12, 15, 17, 20, 22]
    assert selection_size(10, 70) == 7 and selection_size(8, 70) == 5
    with pytest.raises(ConfigError, match="selects none"):
        selection_size(3, 20)
    bottom = select_bottom(np.array(list(TABLE8.values())), 50)
    assert {n for n, w in zip(TABLE8, bottom) if w > 0} == set(list(TABLE8)[-12:])


def test_transfer_plans():
    alpha = np.array([0.5, 0.3, 0.15, 0.05])
    sampling, mult = transfer_plan(alpha, "ratio")
    assert np.allclose(sampling, alpha) and np.allclose(mult, 1)
    sampling, mult = transfer_plan(alpha, "loss")
    assert np.allclose(sampling, 0.25) and np.allclose(mult, [2.0, 1.2, 0.6, 0.2]) and mult.mean() == pytest.approx(1)
    sampling, _ = transfer_plan(alpha, "top", 50)
    assert np.allclose(sampling, [0.5, 0.5, 0, 0])
    sampling, _ = transfer_plan(alpha, "bottom", 50)
    assert np.allclose(sampling, [0, 0, 0.5, 0.5])
    with pytest.raises(ConfigError, match="unknown tDRO transfer"):
        transfer_plan(alpha, "sideways")


def test_absent_group_gets_zero_and_proxy_needs_no_reference():
    m = group_measurements(torch.tensor([2.0, 4.0]), None, torch.tensor([0, 0]), 3, measure="proxy")
    assert close(m, [3.0, 0.0, 0.0])
    m = group_measurements(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 1.0]), torch.tensor([2, 2]), 3, mode="paper")
    assert close(m, [0.0, 0.0, 3.0])
    neg = group_measurements(torch.tensor([1.0, 1.0]), torch.tensor([3.0, 3.0]), torch.tensor([0, 1]), 2,
                             measure="excess")
    assert close(neg, [0.0, 0.0])                                   # code mode clamps at 0


def test_bad_inputs_are_named():
    with pytest.raises(ConfigError, match="needs the reference"):
        group_measurements(PROXY, None, GROUPS, 2)
    with pytest.raises(ConfigError, match="unknown tDRO measure"):
        group_measurements(PROXY, REF, GROUPS, 2, measure="ratio")
    with pytest.raises(ConfigError, match="group ids must lie"):
        group_measurements(PROXY, REF, GROUPS, 1)
    with pytest.raises(ConfigError, match="do not match"):
        update_weights(HALF, torch.ones(3))
