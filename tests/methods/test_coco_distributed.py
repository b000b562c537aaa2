"""COCO over 2 CPU processes (gloo) equals one process with the global batch: the spans of every rank are
all-gathered with gradient, so the logged losses and the trained weights match step for step.  With the
optional MLM term (``mlm_weight`` > 0) too: the masks are drawn per document of the global batch (not per
rank) and the MLM mean is over the masked tokens of the global batch."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # two spawned processes: 1 to 1.5 minutes per case on 2 busy cores


def spec_for(world_dir: str, model_dir: str, mlm_weight: float = 0.0):
    from methods.coco import Coco

    corpora = [str(Path(world_dir) / "eval" / n) for n in ("latin_qa", "cyrillic_news")]
    options = {"corpora": corpora, "span_tokens": 12}
    if mlm_weight:
        options.update(mlm_weight=mlm_weight, span_max_length=32)
    return Coco.spec("tiny", model=model_dir, batch_size=8, steps=4, warmup_steps=0, lr=3e-3, save_every=0,
                     progress=False, method_options=options)


def worker(rank: int, world: int, port: int, world_dir: str, model_dir: str, out_dir: str,
           mlm_weight: float) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HF_HUB_OFFLINE="1")
    import torch

    torch.set_num_threads(1)
    from harness.train.trainer import Trainer, make_accelerator
    from methods.coco import Coco

    method = Coco()
    spec = spec_for(world_dir, model_dir, mlm_weight)
    Trainer(spec, method.span_data(spec), Path(out_dir) / "two", method=method, accelerator=make_accelerator()).run()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mlm_weight", [0.0, 0.5], ids=["contrastive", "with-mlm"])
def test_two_ranks_equal_one_process_with_the_global_batch(tmp_path, mlm_weight):
    import torch.multiprocessing as mp
    from safetensors.torch import load_file
    from trainutil import make_tiny_bert

    from harness.ablation.resolve import resolve_model, synthetic_world
    from harness.train.logs import read_log
    from methods.coco import Coco

    world_dir = str(synthetic_world("default"))
    if mlm_weight:     # a backbone saved with its MLM head, dropout off (COCO's presets turn it off anyway)
        model_dir = str(make_tiny_bert(tmp_path / "mlm-model", dropout=0.0, mlm=True))
    else:
        model_dir = resolve_model("synthetic:default/tiny-bert")
    mp.spawn(worker, args=(2, free_port(), world_dir, model_dir, str(tmp_path), mlm_weight), nprocs=2, join=True)
    Coco().train(spec_for(world_dir, model_dir, mlm_weight), None, tmp_path / "one")
    log1, log2 = read_log(tmp_path / "one" / "train_log.jsonl"), read_log(tmp_path / "two" / "train_log.jsonl")
    print("\nlosses, 1 process:", [round(r["loss"], 6) for r in log1],
          "2 processes:", [round(r["loss"], 6) for r in log2])
    assert [r["loss"] for r in log2] == pytest.approx([r["loss"] for r in log1], abs=1e-5)
    assert [r["counts"] for r in log2] == [r["counts"] for r in log1]
    assert log1[-1]["loss"] != pytest.approx(log1[0]["loss"], abs=1e-3)        # the weights did move
    if mlm_weight:
        mlm1, mlm2 = ([r["method"]["mlm_loss"] for r in log] for log in (log1, log2))
        con1, con2 = ([r["method"]["contrastive_loss"] for r in log] for log in (log1, log2))
        print("MLM losses, 1 process:", [round(x, 6) for x in mlm1], "2 processes:", [round(x, 6) for x in mlm2])
        assert all(x > 1.0 for x in mlm1)                                       # the term is there and large
        assert mlm2 == pytest.approx(mlm1, abs=1e-5)
        assert con2 == pytest.approx(con1, abs=1e-5)
        assert [r["loss"] for r in log1] == pytest.approx([c + mlm_weight * m for c, m in zip(con1, mlm1)],
                                                          abs=1e-5)
    w1 = load_file(str(tmp_path / "one" / "final" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "final" / "model.safetensors"))
    w0 = load_file(str(Path(model_dir) / "model.safetensors"))
    assert set(w1) == set(w2)
    if mlm_weight:
        assert any("cls.predictions" in k for k in w0)
        # the saved encoder is the plain backbone ("bert." prefix dropped) or the whole MLM model
        w0 = {k.removeprefix("bert."): v for k, v in w0.items()} if not any(k.startswith("bert.") for k in w1) else w0
    moved = sum(float(((w1[k] - w0[k]) ** 2).sum()) for k in w1) ** 0.5
    apart = sum(float(((w1[k] - w2[k]) ** 2).sum()) for k in w1) ** 0.5
    print("grad norms, 1 process:", [r["grad_norm"] for r in log1], "2 processes:", [r["grad_norm"] for r in log2])
    print(f"weights: moved {moved:.4g} from the initial model, 1 vs 2 processes {apart:.4g} apart")
    # The gradients are the same (norms to float32 reduction order).  Adam's first steps move every weight by
    # about lr whatever the size of its gradient, so near-zero gradients that differ in the last bits can flip
    # a few updates; the runs stay together relative to how far training moved them.
    assert [r["grad_norm"] for r in log2] == pytest.approx([r["grad_norm"] for r in log1], rel=1e-3)
    assert apart < 0.02 * moved
