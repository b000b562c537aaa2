"""SPLADE's ranking-loss candidates (methods.splade.SpladeRankingLoss): ``paper`` (every in-batch positive),
``official`` (every in-batch positive + the row's own negatives: naver/splade's InBatchPairwiseNLL) and ``all``
(every passage of the batch), against hand-computed values and against naver's formula written out from its
definition (log-softmax over ``[Q D+^T | rowwise(Q * D-)]``, target the diagonal; with ``nb_gpus`` DataParallel
blocks the columns are each block's own positives).  Also the warm-up at T = 0 and the max-pool tie gradient."""
from __future__ import annotations

import math

import pytest
import torch

from harness.encoders.heads import splade_pool
from harness.errors import ConfigError
from methods.splade import CANDIDATES, SpladeRankingLoss, flops_lambda

# Two queries, one negative each: columns [p0, n0, p1, n1]; q_i . column, written out.
SIM = torch.tensor([[2.0, 1.0, 0.0, 3.0],
                    [1.0, 0.0, 2.0, 1.0]])
TARGETS = torch.tensor([0, 2])
ALL_ALLOWED = torch.ones(2, 4, dtype=torch.bool)


def lse(*xs: float) -> float:
    return math.log(sum(math.exp(x) for x in xs))


def test_hand_values_of_the_three_modes():
    paper = SpladeRankingLoss("paper")(SIM, ALL_ALLOWED, TARGETS, 2)
    official = SpladeRankingLoss("official")(SIM, ALL_ALLOWED, TARGETS, 2)
    every = SpladeRankingLoss("all")(SIM, ALL_ALLOWED, TARGETS, 2)
    # paper: q0 over {p0, p1} = log(1 + e^-2); q1 over {p0, p1}, target p1 = log(1 + e^-1)
    assert paper.tolist() == pytest.approx([0.12692801104297263, 0.31326168751822286], abs=1e-6)
    # official: q0 over {p0, n0, p1}; q1 over {p0, p1, n1} (n0, q0's negative, is not q1's candidate)
    assert official.tolist() == pytest.approx([lse(2, 1, 0) - 2, lse(1, 2, 1) - 2], abs=1e-6)
    assert official.tolist() == pytest.approx([0.40760596444438013, 0.5514447139320511], abs=1e-6)
    # all: every column; q0 also sees n1 (3.0, the largest score: another query's negative)
    assert every.tolist() == pytest.approx([lse(2, 1, 0, 3) - 2, lse(1, 0, 2, 1) - 2], abs=1e-6)
    assert every.tolist() == pytest.approx([1.4401896985611953, 0.6265233750364456], abs=1e-6)


def naver_in_batch_pairwise_nll(q: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                                nb_gpus: int = 1) -> torch.Tensor:
    """naver/splade's InBatchPairwiseNLL, from its definition: each DataParallel block's queries are scored against
    that block's positives (the (B, B / nb_gpus) matrix) and their own negative (one more column), log-softmax,
    the mean of minus the diagonal entries (column i mod B / nb_gpus)."""
    b = len(q)
    cols = b // nb_gpus
    in_batch = torch.cat([q[g * cols:(g + 1) * cols] @ pos[g * cols:(g + 1) * cols].T for g in range(nb_gpus)])
    neg_scores = (q * neg).sum(dim=-1, keepdim=True)
    scores = torch.log_softmax(torch.cat([in_batch, neg_scores], dim=1), dim=1)
    return -scores[torch.arange(b), torch.arange(cols).repeat(nb_gpus)].mean()


def sparse_batch(b: int, v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def rows() -> torch.Tensor:
        w = torch.relu(torch.randn(b, v, generator=g)) * (torch.rand(b, v, generator=g) < 0.3)
        return torch.log1p(w * 2.0)
    return rows(), rows(), rows()


def interleave(pos: torch.Tensor, *negs: torch.Tensor) -> torch.Tensor:
    """The engine's layout: each query's positive, then its negatives."""
    return torch.stack([pos, *negs], dim=1).reshape(-1, pos.shape[1])


@pytest.mark.parametrize("seed", range(5))
def test_official_equals_naver_formula(seed):
    q, pos, neg = sparse_batch(8, 40, seed)
    ours = SpladeRankingLoss("official").from_vectors(q, interleave(pos, neg), 2)
    assert float(ours.mean()) == pytest.approx(float(naver_in_batch_pairwise_nll(q, pos, neg)), rel=1e-6)
    # paper: the in-batch cross-entropy over the positives alone
    paper = SpladeRankingLoss("paper").mask(torch.ones(8, 16, dtype=torch.bool), torch.arange(8) * 2, 2)
    assert paper.sum(dim=1).tolist() == [8] * 8
    sim = q @ pos.T
    assert float(SpladeRankingLoss("paper").from_vectors(q, pos, 1).mean()) == pytest.approx(
        float(torch.nn.functional.cross_entropy(sim, torch.arange(8))), rel=1e-6)
    # all: one softmax over all 2B passages; it differs from official (other queries' negatives added)
    every = SpladeRankingLoss("all").from_vectors(q, interleave(pos, neg), 2)
    full = q @ interleave(pos, neg).T
    assert float(every.mean()) == pytest.approx(float(torch.nn.functional.cross_entropy(full, torch.arange(8) * 2)),
                                                rel=1e-6)
    assert (every >= ours - 1e-6).all() and float((every - ours).max()) > 1e-3


def test_official_per_rank_equals_naver_data_parallel_blocks():
    """Two ranks without cross-batch columns: each rank's queries against its own positives and their own
    negatives is naver's DataParallel matrix with nb_gpus = 2."""
    q, pos, neg = sparse_batch(8, 30, 11)
    loss = SpladeRankingLoss("official")
    per_rank = torch.cat([loss.from_vectors(q[r * 4:(r + 1) * 4], interleave(pos[r * 4:(r + 1) * 4],
                                                                              neg[r * 4:(r + 1) * 4]), 2)
                          for r in range(2)])
    assert float(per_rank.mean()) == pytest.approx(float(naver_in_batch_pairwise_nll(q, pos, neg, nb_gpus=2)),
                                                   rel=1e-6)


def test_gathered_columns_with_query_offset():
    """Rank 1 of 2 with cross-batch columns: its targets are offset by the first rank's groups; official keeps
    every rank's positives and its own negatives only."""
    q, pos, neg = sparse_batch(6, 25, 3)
    p = interleave(pos, neg)
    sim = q[3:] @ p.T                                         # rank 1's queries against the gathered passages
    targets = (torch.arange(3) + 3) * 2
    ours = SpladeRankingLoss("official")(sim, torch.ones_like(sim, dtype=torch.bool), targets, 2)
    whole = SpladeRankingLoss("official").from_vectors(q, p, 2)
    assert ours.tolist() == pytest.approx(whole[3:].tolist(), rel=1e-6)
    mask = SpladeRankingLoss("official").mask(torch.ones_like(sim, dtype=torch.bool), targets, 2)
    assert mask[0].nonzero().flatten().tolist() == [0, 2, 4, 6, 7, 8, 10]


def test_candidate_counts_with_several_negatives_invalid_passages_and_only_hn():
    b, n = 3, 3                                               # 2 negatives a query
    allowed = torch.ones(b, b * n, dtype=torch.bool)
    allowed[:, 5] = False                                     # query 1's second negative is padding (invalid)
    allowed[2] = False
    allowed[2, 6:9] = True                                    # query 2 is an only_hn row: its own group
    targets = torch.arange(b) * n
    counts = {mode: SpladeRankingLoss(mode).mask(allowed, targets, n).sum(dim=1).tolist() for mode in CANDIDATES}
    assert counts["paper"] == [3, 3, 1]                       # B positives; the only_hn row keeps its own
    assert counts["official"] == [5, 4, 3]                    # B + k (minus the invalid one) ; own group
    assert counts["all"] == [8, 8, 3]                         # every valid passage ; own group
    # without hard negatives the three are one loss
    q, pos, _ = sparse_batch(5, 20, 7)
    values = [SpladeRankingLoss(mode).from_vectors(q, pos, 1).tolist() for mode in CANDIDATES]
    assert values[0] == pytest.approx(values[1]) and values[1] == pytest.approx(values[2])


def test_unknown_mode_refused():
    with pytest.raises(ConfigError, match="unknown SPLADE candidates 'hard'"):
        SpladeRankingLoss("hard")


def test_warmup_zero_follows_naver_and_constant_applies_lambda_from_step_one():
    # naver's RegWeightScheduler with T = 0 never steps: lambda stays 0, no regulariser
    assert [flops_lambda(t, 1e-3, 0) for t in (1, 2, 1000)] == [0.0, 0.0, 0.0]
    assert flops_lambda(1, 1e-3, 0, schedule="hf") == 1e-3       # min(lam, lam t^2)
    assert [flops_lambda(t, 1e-3, 10, schedule="constant") for t in (1, 5, 50)] == [1e-3] * 3
    assert flops_lambda(1, 1e-3, 10) == pytest.approx(1e-5)


def test_max_pool_gradient_is_split_evenly_at_exact_ties():
    """The docstring's claim: values as naver's, gradients as naver's off ties; at an exact tie amax gives each
    tied position half (naver's torch.max gives one position all), the same sum."""
    logits = torch.tensor([[[1.0, 0.5], [1.0, 0.2], [0.3, 0.1]]], requires_grad=True)
    w = splade_pool(logits, torch.ones(1, 3), "max")
    w.sum().backward()
    d = 1.0 / (1.0 + 1.0)                                     # d/dx log(1 + x) at x = 1
    assert logits.grad[0, :, 0].tolist() == pytest.approx([d / 2, d / 2, 0.0])
    assert logits.grad[0, :, 1].tolist() == pytest.approx([1.0 / 1.5, 0.0, 0.0])
