"""PEG with global (all-gathered) batch statistics over 2 CPU processes equals one process
with the whole batch: the same losses, the same t and sigma on every rank, the same weights."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # two spawned processes: about half a minute


def spec_for(model_dir: str):
    from harness.train.spec import TrainSpec

    return TrainSpec(model=model_dir, pooling="mean", batch_size=8, steps=3, warmup_steps=0, n_hard_negatives=1,
                     temperature=0.05, query_max_length=32, doc_max_length=64, precision="fp32", lr=1e-3,
                     gradient_checkpointing=False, progress=False, use_instructions=False, save_every=0,
                     method_options={"record_query_weights": True})


def worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HF_HUB_OFFLINE="1")
    import torch

    torch.set_num_threads(1)
    from trainutil import make_data

    from harness.train.trainer import Trainer, make_accelerator
    from methods.peg import PEG

    class Recording(PEG):
        def on_step_end(self, ctx):
            self.history = [*getattr(self, "history", []), (ctx.step, self.t)]

    method = Recording()
    Trainer(spec_for(model_dir), make_data(), Path(out_dir) / "two", method=method,
            accelerator=make_accelerator()).run()
    torch.save({"history": method.history, "scalars": method.scalars()}, Path(out_dir) / f"rank{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_global_statistics_two_ranks_equal_one(tmp_path):
    import torch
    import torch.multiprocessing as mp
    from safetensors.torch import load_file
    from trainutil import make_data, make_tiny_bert

    from harness.train.logs import read_log
    from methods.peg import PEG

    model_dir = str(make_tiny_bert(tmp_path / "model", dropout=0.0))
    mp.spawn(worker, args=(2, free_port(), model_dir, str(tmp_path)), nprocs=2, join=True)
    PEG().train(spec_for(model_dir), make_data(), tmp_path / "one")
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    log1, log2 = read_log(tmp_path / "one" / "train_log.jsonl"), read_log(tmp_path / "two" / "train_log.jsonl")
    assert ranks[0]["history"] == ranks[1]["history"]                      # one t for the whole batch
    assert [t for _, t in ranks[0]["history"]] == pytest.approx([r["method"]["t"] for r in log1], abs=1e-6)
    assert [r["loss"] for r in log2] == pytest.approx([r["loss"] for r in log1], abs=1e-5)
    for a, b in zip(log1, log2):                                            # shares pooled over both ranks
        assert b["method"] == pytest.approx(a["method"], abs=1e-6)
    w1 = load_file(str(tmp_path / "one" / "final" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "final" / "model.safetensors"))
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-5
    # rank 0 gathered every rank's query weights: the same rows as the single process
    rows1 = (tmp_path / "one" / "method" / "query_weights.tsv").read_text().splitlines()
    rows2 = (tmp_path / "two" / "method" / "query_weights.tsv").read_text().splitlines()
    assert len(rows1) == len(rows2) == 1 + 3 * 8
    for a, b in zip(rows1[1:], rows2[1:]):
        fa, fb = a.split("\t"), b.split("\t")
        assert fa[:3] == fb[:3] and [float(x) for x in fa[3:]] == pytest.approx([float(x) for x in fb[3:]], abs=1e-5)
