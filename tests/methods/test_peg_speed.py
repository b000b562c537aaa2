"""Cost of PEG against vanilla InfoNCE on the same batch (pytest-benchmark, ratio reported).

Two measurements, both interleaved round by round (the reference timed in the untimed
``setup`` of ``benchmark.pedantic``) so that load from other processes hits both alike:

* the loss step at the paper's per-GPU shape (432 queries x 6 passages, 1024-dim, cos,
  tau 0.01): the trainer's candidate scores and InfoNCE, then backward of the mean InfoNCE
  (vanilla) or of PEG's loss through the method's ``reduce`` (statistics included);
* a whole training micro-batch (forward, loss, backward) of all-MiniLM-L6-v2 on real rows
  at the small suite's shape (16 queries, 1 hard negative, lengths 64/128).

Both run on one torch thread (restored afterwards) and are timed in process CPU seconds
(``time.process_time``): other processes' load adds wall time (at load 4-9 on 2 cores the wall-clock
best-vs-best ratio read 1.14x against 1.07x at load 1) but not this process's CPU time.  The bound is
checked on the median of the per-round CPU ratios, each round's pair run back to back under the same
load; best-vs-best and the wall-clock ratios are reported beside it, with the load average.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from benchutil import interleaved_rounds

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.benchmark, pytest.mark.slow]
MAX_RATIO = 1.1


def interleaved(benchmark, reference, candidate, rounds: int) -> dict:
    reference(), candidate()                                            # warm-up
    walls: dict[str, list[float]] = {"vanilla": [], "peg": []}

    def walled(fn, key: str):
        def run() -> None:
            started = time.perf_counter()
            fn()
            walls[key].append(time.perf_counter() - started)
        return run

    _, ref_times, cand_times = interleaved_rounds(benchmark, walled(reference, "vanilla"), walled(candidate, "peg"),
                                                  rounds, clock=time.process_time)
    ratios = [c / r for c, r in zip(cand_times, ref_times)]
    wall_ratios = [c / r for c, r in zip(walls["peg"], walls["vanilla"])]
    info = {"vanilla_cpu_s": ref_times, "peg_cpu_s": cand_times, "ratio_median": round(float(np.median(ratios)), 4),
            "ratio_best": round(min(cand_times) / min(ref_times), 4),
            "ratio_spread": round(max(ratios) - min(ratios), 4),
            "wall_ratio_median": round(float(np.median(wall_ratios)), 4),
            "wall_ratio_best": round(min(walls["peg"]) / min(walls["vanilla"]), 4),
            "load_average": os.getloadavg()[0]}
    benchmark.extra_info.update(info)
    print(f"\nPEG / vanilla CPU time: median of per-round ratios {info['ratio_median']} (range "
          f"{min(ratios):.3f}-{max(ratios):.3f}), best-vs-best {info['ratio_best']}; wall: median "
          f"{info['wall_ratio_median']}, best-vs-best {info['wall_ratio_best']}; load average "
          f"{info['load_average']:.1f} (vanilla best {min(ref_times) * 1e3:.1f} ms CPU, PEG best "
          f"{min(cand_times) * 1e3:.1f} ms CPU)")
    return info


def test_loss_step_cost_at_the_paper_batch_shape(benchmark):
    import torch

    from harness.train.batching import TrainBatch
    from harness.train.context import EncodedBatch, LossOutput, TrainContext
    from harness.train.losses import candidate_info_nce
    from harness.train.spec import TrainSpec
    from methods.peg import PEG

    queries, group, dim = 432, 6, 1024
    spec = TrainSpec(temperature=0.01, n_hard_negatives=group - 1, batch_size=queries, progress=False)
    batch = TrainBatch(queries=[""] * queries, passages=[""] * (queries * group),
                       group_ids=np.zeros(queries, dtype=np.int64), only_hn=np.zeros(queries, dtype=bool),
                       passage_valid=np.ones(queries * group, dtype=bool), passages_per_query=group)
    ctx = TrainContext(spec=spec, data=None, model=None, tokenizer=None, device=torch.device("cpu"),
                       options=PEG().resolve_options({}))
    ctx.batch = batch
    method = PEG()
    method.configure(ctx)
    g = torch.Generator().manual_seed(0)
    q0, p0 = torch.randn(queries, dim, generator=g), torch.randn(queries * group, dim, generator=g)

    def trainer_losses():
        q, p = q0.clone().requires_grad_(True), p0.clone().requires_grad_(True)
        cand = ctx.candidates(q, p)
        losses = candidate_info_nce(cand.sim, cand.allowed, cand.targets, spec.temperature)
        encoded = EncodedBatch({"query": q, "passage": p}, cand)
        return LossOutput(losses, torch.zeros(queries, dtype=torch.long), encoded, batch)

    def vanilla():
        trainer_losses().losses.mean().backward()

    def peg():
        method.reduce(trainer_losses(), ctx).backward()

    info = interleaved(benchmark, vanilla, peg, rounds=41)
    assert info["ratio_median"] <= MAX_RATIO


def test_training_micro_batch_cost_minilm(benchmark, shared_data):
    from trainutil import load_tiny, plain_step, step_context

    from harness.data.collections import load_training_data
    from methods.peg import PEG

    data = load_training_data([shared_data / "train-multidomain"])
    squad = data.index("squad")
    examples = [(squad, i) for i in range(16)]
    spec, model, tok, enc = load_tiny("minilm", batch_size=16, n_hard_negatives=1, temperature=0.01,
                                      query_max_length=64, doc_max_length=128, use_instructions=False)
    from harness.method import Method

    vanilla_method, peg_method = Method(), PEG()
    ctx = step_context(spec, data, model, tok, enc, examples)
    ctx.options = peg_method.resolve_options({})
    peg_method.configure(ctx)

    def step(method):
        model.zero_grad(set_to_none=True)
        plain_step(model, ctx, method)

    info = interleaved(benchmark, lambda: step(vanilla_method), lambda: step(peg_method), rounds=5)
    assert info["ratio_median"] <= MAX_RATIO
