"""iDRO in code mode over 2 CPU processes (gloo), as the released code: each rank's cluster losses and presence
are local, only the per-cluster gradients are all-reduced (summed), so the cluster weights may differ across
ranks while the model (DDP) stays the same.  Each rank's update is checked against ``idro_step`` with its own
losses and the summed gradients."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # two spawned processes: about half a minute

OPTIONS = {"k": 3, "niter": 10, "nredo": 1, "blocks": 1}


def spec_for(model_dir: str):
    from methods.idro import IDRO

    return IDRO.spec("tiny", model=model_dir, batch_size=8, steps=4, warmup_steps=0, lr=1e-3, query_max_length=16,
                     doc_max_length=32, save_every=0, progress=False, method_options=OPTIONS)


def recording_idro():
    from methods.idro import IDRO

    class Recording(IDRO):
        """Records, per micro-batch, the weights before/after, local means and presence, local and summed grads."""

        name = "idro"

        def robust_loss(self, out, means, counts, present, ctx):
            reduce, seen = ctx.all_reduce_sum, {}

            def spy(tensor):
                seen["local"], seen["sum"] = tensor.detach().clone(), reduce(tensor).detach().clone()
                return seen["sum"].clone()

            prev = self.weights.detach().clone()
            ctx.all_reduce_sum = spy
            try:
                loss = super().robust_loss(out, means, counts, present, ctx)
            finally:
                ctx.all_reduce_sum = reduce
            self.records.append({"prev": prev, "means": means.detach().clone(), "present": present.clone(),
                                 "new": self.weights.detach().clone(), "loss": loss.detach().clone(), **seen})
            return loss

    method = Recording()
    method.records = []
    return method


def worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HF_HUB_OFFLINE="1")
    import torch
    from trainutil import make_data

    torch.set_num_threads(1)
    from harness.train.trainer import Trainer, make_accelerator

    method = recording_idro()
    trainer = Trainer(spec_for(model_dir), make_data(), Path(out_dir) / "two", method=method,
                      accelerator=make_accelerator())
    trainer.run()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    torch.save({"records": method.records, "params": params}, Path(out_dir) / f"rank{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_code_mode_all_reduces_only_the_gradients(tmp_path):
    import torch
    import torch.multiprocessing as mp
    from trainutil import make_tiny_bert

    from methods.idro import idro_step

    model_dir = str(make_tiny_bert(tmp_path / "bert", dropout=0.0))
    mp.spawn(worker, args=(2, free_port(), model_dir, str(tmp_path)), nprocs=2, join=True)
    saved = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    ranks = [s["records"] for s in saved]
    assert saved[0]["params"].keys() == saved[1]["params"].keys()
    assert all(torch.equal(saved[0]["params"][n], saved[1]["params"][n]) for n in saved[0]["params"])  # DDP
    assert len(ranks[0]) == len(ranks[1]) == 4                                   # one micro-batch per step
    differ = 0
    for step, (a, b) in enumerate(zip(*ranks)):
        assert torch.equal(a["sum"], b["sum"])                                   # the all-reduced gradients
        assert torch.allclose(a["sum"], a["local"] + b["local"], atol=1e-6)      # = the sum of the local ones
        assert not torch.equal(a["local"], b["local"])
        for rec in (a, b):                                                       # local losses, summed grads
            loss, new = idro_step(rec["prev"], rec["means"], rec["sum"], rec["present"])
            assert torch.allclose(rec["new"], new) and torch.allclose(rec["loss"], loss.to(rec["loss"].dtype))
        differ += not torch.allclose(a["new"], b["new"])
        print(f"step {step}: rank 0 present {a['present'].tolist()} weights {a['new'].numpy().round(4)}; "
              f"rank 1 present {b['present'].tolist()} weights {b['new'].numpy().round(4)}")
    assert torch.equal(ranks[0][0]["prev"], ranks[1][0]["prev"])                 # both start from ones
    assert differ >= 1                                                           # then the weights part
