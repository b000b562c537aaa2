"""Worker for the 2-process test: runs one rank under torch.multiprocessing.spawn (gloo on CPU)."""
from __future__ import annotations

import os
from pathlib import Path

import torch

# O0.1 layout: query rows score [p1, n1, p2, n2] through the identity passage matrix.
SCORES = [[0.9, 0.5, 0.1, 0.0], [0.2, 0.3, 0.8, 0.6]]
GLOBAL_EXAMPLES = [(0, 0), (0, 3), (1, 1), (1, 4), (2, 2), (2, 5), (0, 7), (1, 8)]


def oracle_vectors(world: int, rank: int, with_grad_gather: bool):
    """O0.3: rank r owns query r and its passage group; returns loss and grads of q_r, p_r."""
    from harness.train import distributed as D
    from harness.train.losses import info_nce

    q = torch.tensor(SCORES[rank:rank + 1], dtype=torch.float64, requires_grad=True)
    p = torch.eye(4, dtype=torch.float64)[2 * rank:2 * rank + 2].clone().requires_grad_(True)
    if with_grad_gather:
        p_all = D.all_gather_with_grad(p)
    else:   # the tDRO-style alternative: other ranks' passages carry no gradient
        parts = list(D.all_gather_nograd(p).split(2))
        parts[rank] = p
        p_all = torch.cat(parts)
    loss = info_nce(q, p_all, 2, query_offset=rank, reduction="mean")
    (loss / world).backward()            # DDP averages gradients over ranks
    return float(loss), q.grad.clone(), p.grad.clone()


def micro_batch_grads(model_dir: str, rank: int, world: int, accelerator):
    """Loss and parameter gradients of one micro-batch through the trainer's step, DDP-wrapped."""
    import contextlib

    from trainutil import load_tiny, make_data, step_context

    from harness.method import Method
    from harness.train.step import run_micro_batch

    class GatherGroups(Method):
        """Gathers the per-sample losses and group ids of every rank (the method all-gather hook)."""

        def observe(self, out, ctx):
            self.gathered = (ctx.all_gather(out.losses), ctx.all_gather(out.group_ids))

    spec, model, tok, enc = load_tiny(model_dir, batch_size=len(GLOBAL_EXAMPLES))
    data = make_data()
    ctx = step_context(spec, data, model, tok, enc, GLOBAL_EXAMPLES, rank=rank, world=world)
    wrapped = accelerator.prepare(model) if world > 1 else model
    method = GatherGroups()
    res = run_micro_batch(wrapped, ctx, method, backward=lambda loss: loss.backward(),
                          sync=lambda last: contextlib.nullcontext(), step_weights=lambda: None,
                          gradcache_chunk=None)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return res.loss, grads, method.gathered


def train_spec(model_dir: str, gradcache_chunk_size: int | None = None):
    from harness.train.spec import TrainSpec

    return TrainSpec(model=model_dir, gradcache_chunk_size=gradcache_chunk_size, pooling="mean", batch_size=8, steps=3,
                     warmup_steps=0, n_hard_negatives=1,
                     temperature=0.05, query_max_length=32, doc_max_length=64, precision="fp32", lr=1e-3,
                     gradient_checkpointing=False, progress=False, save_every=2)


def worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HF_HUB_OFFLINE="1")
    torch.set_num_threads(1)
    from trainutil import make_data

    from harness.method import Method
    from harness.train.trainer import Trainer, make_accelerator

    acc = make_accelerator()
    result = {"oracle": oracle_vectors(world, rank, True), "oracle_nograd": oracle_vectors(world, rank, False)}
    result["micro"] = micro_batch_grads(model_dir, rank, world, acc)
    # The 2-process run also goes through the gradient cache (chunks of 3, DDP sync on the last chunk only).
    Trainer(train_spec(model_dir, gradcache_chunk_size=3), make_data(), Path(out_dir) / "two", method=Method(),
            accelerator=acc).run()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")
