"""InfoNCE oracles O0.1-O0.3 (METHODS.md 0.1) and the masking options."""
from __future__ import annotations

import math

import pytest
import torch

from harness.train.losses import info_nce, info_nce_from_scores, similarity_scores

# Two queries, one hard negative each; columns [p1, n1, p2, n2]; targets are columns 0 and 2.
SCORES = torch.tensor([[0.9, 0.5, 0.1, 0.0], [0.2, 0.3, 0.8, 0.6]], dtype=torch.float64)


def manual(row, target, cols):
    return -row[target] + math.log(sum(math.exp(row[c]) for c in cols))


def test_o01_in_batch_negatives():
    losses = info_nce_from_scores(SCORES, 2, reduction="none")
    assert losses.tolist() == pytest.approx([0.926724, 1.089932], abs=1e-6)
    assert float(info_nce_from_scores(SCORES, 2)) == pytest.approx(1.008328, abs=1e-6)


def test_o02_hard_negatives_only():
    losses = info_nce_from_scores(SCORES, 2, in_batch=False, reduction="none")
    assert losses.tolist() == pytest.approx([0.513015, 0.598139], abs=1e-6)
    assert float(losses.mean()) == pytest.approx(0.555577, abs=1e-6)


def test_o03_two_simulated_ranks_equal_o01():
    # Each "rank" scores its own query against all (gathered) passages, with its query offset.
    rank0 = info_nce_from_scores(SCORES[:1], 2, query_offset=0, reduction="none")
    rank1 = info_nce_from_scores(SCORES[1:], 2, query_offset=1, reduction="none")
    assert float(torch.cat([rank0, rank1]).mean()) == pytest.approx(1.008328, abs=1e-6)


def test_only_hn_masks_one_query():
    losses = info_nce_from_scores(SCORES, 2, only_hn=torch.tensor([True, False]), reduction="none")
    assert losses.tolist() == pytest.approx([0.513015, 1.089932], abs=1e-6)


def test_passage_valid_removes_a_column_everywhere():
    valid = torch.tensor([True, False, True, True])
    losses = info_nce_from_scores(SCORES, 2, passage_valid=valid, reduction="none")
    expect = [manual(SCORES[0].tolist(), 0, [0, 2, 3]), manual(SCORES[1].tolist(), 2, [0, 2, 3])]
    assert losses.tolist() == pytest.approx(expect, abs=1e-12)


def test_vectors_cos_and_temperature_match_hand_computation():
    torch.manual_seed(0)
    q = torch.randn(3, 5, dtype=torch.float64)
    p = torch.randn(6, 5, dtype=torch.float64)
    tau = 0.05
    losses = info_nce(q, p, 2, temperature=tau, similarity="cos", reduction="none")
    qn = q / q.norm(dim=1, keepdim=True)
    pn = p / p.norm(dim=1, keepdim=True)
    s = (qn @ pn.T / tau).tolist()
    expect = [manual(s[i], 2 * i, range(6)) for i in range(3)]
    assert losses.tolist() == pytest.approx(expect, rel=1e-5)
    dot = info_nce(q, p, 2, similarity="dot", reduction="none")
    expect_dot = [manual((q @ p.T).tolist()[i], 2 * i, range(6)) for i in range(3)]
    assert dot.tolist() == pytest.approx(expect_dot, rel=1e-5)


def test_reductions_and_errors():
    per = info_nce_from_scores(SCORES, 2, reduction="none")
    assert float(info_nce_from_scores(SCORES, 2, reduction="sum")) == pytest.approx(float(per.sum()))
    with pytest.raises(ValueError, match="passage columns"):
        info_nce_from_scores(SCORES, 3)
    with pytest.raises(ValueError, match="similarity"):
        similarity_scores(torch.ones(1, 2), torch.ones(1, 2), "l2")
