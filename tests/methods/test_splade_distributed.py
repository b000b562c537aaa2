"""SPLADE's regularisers on the all-gathered global batch: 2 CPU processes (gloo) give the losses, the logged
FLOPS / lambdas / non-zeros and the weights of 1 process with the whole batch.  A per-rank FLOPS (the
Tevatron bug) would differ: the square of a mean over half the batch is not the global one."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # two spawned processes: about half a minute


def spec_for(model_dir: str):
    from methods.splade import Splade

    return Splade.spec("tiny", model=model_dir, batch_size=8, steps=3, warmup_steps=0, lr=1e-3, save_every=0,
                       query_max_length=16, doc_max_length=24,
                       method_options={"lambda_q": 0.05, "lambda_d": 0.02, "lambda_warmup_steps": 2})


def worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HF_HUB_OFFLINE="1")
    import torch

    torch.set_num_threads(1)
    from trainutil import make_data

    from harness.train.trainer import Trainer, make_accelerator
    from methods.splade import Splade

    method = Splade()
    Trainer(spec_for(model_dir), make_data(), Path(out_dir) / "two", method=method,
            accelerator=make_accelerator()).run()
    torch.save({"scalars": method.scalars(), "calls": method.calls}, Path(out_dir) / f"rank{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_equal_one_with_the_global_batch(tmp_path):
    import torch
    import torch.multiprocessing as mp
    from safetensors.torch import load_file
    from trainutil import make_data, make_tiny_bert

    from harness.train.logs import read_log
    from methods.splade import Splade

    model_dir = str(make_tiny_bert(tmp_path / "model", dropout=0.0, mlm=True))
    mp.spawn(worker, args=(2, free_port(), model_dir, str(tmp_path)), nprocs=2, join=True)
    Splade().train(spec_for(model_dir), make_data(), tmp_path / "one")
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert ranks[0] == ranks[1] and ranks[0]["calls"] == 3                # one global FLOPS on every rank
    log1, log2 = read_log(tmp_path / "one" / "train_log.jsonl"), read_log(tmp_path / "two" / "train_log.jsonl")
    assert [r["loss"] for r in log2] == pytest.approx([r["loss"] for r in log1], rel=1e-5)
    for a, b in zip(log1, log2):
        assert b["method"] == pytest.approx(a["method"], rel=1e-5)
    assert log1[-1]["method"]["reg_q"] > 0 and log1[0]["method"]["lambda_q"] == pytest.approx(0.05 / 4)
    w1 = load_file(str(tmp_path / "one" / "final" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "final" / "model.safetensors"))
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-5
