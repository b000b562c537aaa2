"""RetroMAE under DDP (2 CPU processes, gloo) against one process with the whole batch.

Each rank's loss is its own token means (the encoder's MLM and the decoder's reconstruction cross-entropy, each
summed over its masked / target tokens and divided by the rank's count), as the released code's
(staoxiao/RetroMAE src/pretrain/modeling.py: the decoder's CrossEntropyLoss mean over the rank's targets plus
the encoder's MaskedLM loss), and DDP averages the gradients over the ranks.  So the exact relation is

    grad_DDP = 1/W sum_r grad(E_r / n^E_r + D_r / n^D_r)

(E_r, D_r: the rank's summed cross-entropies, n_r: its token counts), which is the single-process gradient of the
whole batch, grad(sum E_r / sum n^E_r + sum D_r / sum n^D_r), only when every rank has the same counts; else the
ranks' texts are weighted by 1 / (W n_r) instead of 1 / sum n.  The masks are drawn per global row (seeded by the
text's place in the global batch), so the ranks draw the masks the single process draws and the relation can be
checked to float precision: the decoder layer's gradients (and every other parameter's) under 2 ranks equal the
mean of the per-rank gradients computed in one process, and the whole-batch gradients where the counts agree."""
from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # two spawned processes: about half a minute

# (source, row): rank 0 takes the first half, rank 1 the second (texts of 58-123 tokens, kept whole at 128).
# UNEQUAL: texts of different lengths, so the ranks' decoder target counts differ (187 vs 166 non-special tokens:
# DDP weights rank 0's tokens 1/374 and rank 1's 1/332 where the whole batch weights each 1/353); EQUAL: the same
# two texts on both ranks (other masks: other rows of the batch), so the decoder's target counts agree.
UNEQUAL = [(0, 3), (1, 7), (0, 11), (1, 2)]
EQUAL = [(0, 3), (1, 7), (0, 3), (1, 7)]


def spec_for(model_dir: str, world):
    from methods.retromae import RetroMAE

    corpora = [str(world / "eval" / n) for n in ("latin_qa", "cyrillic_news")]
    return RetroMAE.spec("tiny", model=model_dir, batch_size=4, steps=1, warmup_steps=0, doc_max_length=128,
                         method_options={"corpora": corpora})


def setup(model_dir: str, world: Path, rank: int, world_size: int):
    """The model, its RetroMAE head and a TrainContext for ``rank`` of ``world_size``."""
    import torch

    from harness.train.context import TrainContext
    from harness.train.model import build_model
    from methods.retromae import RetroMAE

    method = RetroMAE()
    spec = spec_for(model_dir, world)
    model, tok, enc = build_model(spec, head=method.representation_head(spec))
    model.train()
    ctx = TrainContext(spec=spec, data=method.prepare(spec, None, {}).data, model=model, tokenizer=tok,
                       device=torch.device("cpu"), options=method.resolve_options(dict(spec.method_options)),
                       encoding=enc, rank=rank, world_size=world_size)
    method.configure(ctx)
    return method, model, ctx


def step(method, model, ctx, examples, forward_model=None) -> dict:
    """One micro-batch's gradients (``forward_model``: the DDP wrapper, if any) and the rank's token counts."""
    from harness.train.step import run_micro_batch

    model.zero_grad(set_to_none=True)
    ctx.batch = method.make_batch(examples, ctx, 0)
    head = model.head
    counts = {k: int((head.targets[f"{k}_labels"] != -100).sum()) for k in ("encoder", "decoder")}
    run_micro_batch(forward_model or model, ctx, method, backward=lambda loss: loss.backward(),
                    sync=lambda last: contextlib.nullcontext(), step_weights=lambda: None, gradcache_chunk=None)
    return {"grads": {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
            "counts": counts}


def worker(rank: int, world_size: int, port: int, model_dir: str, world: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      HF_HUB_OFFLINE="1")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        method, model, ctx = setup(model_dir, Path(world), rank, world_size)
        ddp = DistributedDataParallel(model)            # broadcasts rank 0's weights (the decoder's init too)
        out = {"init": {k: v.detach().clone() for k, v in model.state_dict().items()}}
        for name, examples in (("unequal", UNEQUAL), ("equal", EQUAL)):
            out[name] = step(method, model, ctx, examples, forward_model=ddp)
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def close(a: dict, b: dict, names) -> bool:
    return all(bool((a[n] - b[n]).abs().max() <= 1e-6 + 1e-5 * b[n].abs().max()) for n in names)


def test_two_ranks_average_the_per_rank_token_means(tmp_path):
    import torch
    import torch.multiprocessing as mp
    from trainutil import make_tiny_bert

    from harness.ablation.resolve import synthetic_world

    world = synthetic_world("default")
    model_dir = str(make_tiny_bert(tmp_path / "mlm", dropout=0.0, mlm=True))
    mp.spawn(worker, args=(2, free_port(), model_dir, str(world), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]

    # one process, the same initial weights (rank 0's, which DDP broadcast): each rank's half alone, and the whole
    method, model, ctx = setup(model_dir, world, 0, 1)
    model.load_state_dict(ranks[0]["init"])
    for name, examples in (("unequal", UNEQUAL), ("equal", EQUAL)):
        ddp = ranks[0][name]["grads"]
        assert close(ranks[1][name]["grads"], ddp, ddp)                       # the ranks hold the same gradients
        halves = []
        for r in range(2):
            ctx.rank, ctx.world_size = r, 2
            halves.append(step(method, model, ctx, examples))
            assert halves[r]["counts"] == ranks[r][name]["counts"]           # the same masks as that rank drew
        ctx.rank, ctx.world_size = 0, 1
        whole = step(method, model, ctx, examples)
        decoder = [n for n in ddp if n.startswith("head.decoder.")]
        assert decoder and set(ddp) == set(whole["grads"])
        # the exact relation: DDP's gradient is the mean of the per-rank token-mean gradients (every parameter)
        mean = {n: (halves[0]["grads"][n] + halves[1]["grads"][n]) / 2 for n in ddp}
        assert close(ddp, mean, ddp)
        # the decoder layer sees only the decoder's term: the whole batch weights rank r's gradient by n_r / n
        n = [h["counts"]["decoder"] for h in halves]
        weighted = {k: (n[0] * halves[0]["grads"][k] + n[1] * halves[1]["grads"][k]) / sum(n) for k in decoder}
        assert close(whole["grads"], weighted, decoder)
        if name == "equal":          # the same decoder counts on both ranks: DDP is the whole batch's gradient
            assert n[0] == n[1]
            assert close(ddp, whole["grads"], decoder)
        else:                        # different counts: it is not (by the weights' difference)
            assert n[0] != n[1]
            assert not close(ddp, whole["grads"], decoder)
