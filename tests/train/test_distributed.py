"""Cross-batch negatives over 2 CPU processes (gloo) equal one process with the global batch (O0.3)."""
from __future__ import annotations

import socket

import distworker
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file
from trainutil import make_data

from harness.method import Method
from harness.train.logs import read_log
from harness.train.trainer import Trainer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_model_nodrop):
    out = tmp_path_factory.mktemp("two-ranks")
    mp.spawn(distworker.worker, args=(2, free_port(), tiny_model_nodrop, str(out)), nprocs=2, join=True)
    return out, [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_o03_vectors_two_ranks(two_ranks):
    _, ranks = two_ranks
    losses = [r["oracle"][0] for r in ranks]
    assert sum(losses) / 2 == pytest.approx(1.008328, abs=1e-6)           # equals O0.1
    q = torch.tensor(distworker.SCORES, dtype=torch.float64, requires_grad=True)
    p = torch.eye(4, dtype=torch.float64, requires_grad=True)
    from harness.train.losses import info_nce

    info_nce(q, p, 2).backward()
    for r, res in enumerate(ranks):
        assert torch.allclose(res["oracle"][1], q.grad[r:r + 1], atol=1e-12)
        assert torch.allclose(res["oracle"][2], p.grad[2 * r:2 * r + 2], atol=1e-12)
    # Without gradient through the gathered passages the loss still matches, the passage gradients do not.
    assert sum(r["oracle_nograd"][0] for r in ranks) / 2 == pytest.approx(1.008328, abs=1e-6)
    assert not torch.allclose(ranks[0]["oracle_nograd"][2], p.grad[0:2], atol=1e-3)


def test_micro_batch_gradients_two_ranks_equal_one(two_ranks, tiny_model_nodrop):
    _, ranks = two_ranks
    loss, grads, (losses, groups) = distworker.micro_batch_grads(tiny_model_nodrop, 0, 1, None)
    assert sum(r["micro"][0] for r in ranks) / 2 == pytest.approx(loss, abs=1e-5)
    for res in ranks:                         # every rank gathers the global per-sample losses and group ids
        g_losses, g_groups = res["micro"][2]
        assert g_groups.tolist() == groups.tolist() == [g for g, _ in distworker.GLOBAL_EXAMPLES]
        assert torch.allclose(g_losses, losses, atol=1e-5)
    for res in ranks:                                                      # DDP leaves identical averaged grads
        g2 = res["micro"][1]
        assert g2.keys() == grads.keys()
        assert max(float((g2[k] - grads[k]).abs().max()) for k in grads) < 1e-5


def test_trainer_two_ranks_equal_one(two_ranks, tiny_model_nodrop, tmp_path):
    """3 training steps: 2 processes with the gradient cache vs 1 process without it."""
    out, _ = two_ranks
    Trainer(distworker.train_spec(tiny_model_nodrop), make_data(), tmp_path / "one", method=Method()).run()
    log1, log2 = read_log(tmp_path / "one" / "train_log.jsonl"), read_log(out / "two" / "train_log.jsonl")
    assert [r["counts"] for r in log1] == [r["counts"] for r in log2]
    assert [r["loss"] for r in log2] == pytest.approx([r["loss"] for r in log1], abs=1e-5)
    w1 = load_file(str(tmp_path / "one" / "final" / "model.safetensors"))
    w2 = load_file(str(out / "two" / "final" / "model.safetensors"))
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-5
