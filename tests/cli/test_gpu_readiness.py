"""GPU paths checked without a GPU: each is reachable from the CLI or a suite file, and on a CPU machine it
either runs (bf16 autocast, bf16 encoding) or is refused/replaced with a message that says why.

On a GPU machine the same tests check that the GPU path is taken instead.  Covered elsewhere: QLoRA's plan
and refusal (tests/sparse/test_echo_splade.py), bf16/fp16 encoding on CPU (tests/encoders/test_hf_encoder.py),
a suite variant evaluated in bf16 (tests/ablation/test_evaluation_keys.py, slow)."""
from __future__ import annotations

import logging

import pytest
import torch

from harness.cli import build_parser
from harness.errors import ConfigError


def test_training_precision_bf16_on_cpu_falls_back_to_fp32_saying_so(caplog):
    from harness.train.trainer import make_accelerator

    caplog.set_level(logging.WARNING)
    acc = make_accelerator("bf16")
    if torch.cuda.is_available():
        assert acc.mixed_precision == "bf16"
    else:
        assert acc.mixed_precision == "no" and acc.device.type == "cpu"
        assert "precision bf16 needs a GPU; training in fp32 on CPU" in caplog.text


def test_bf16_autocast_of_a_training_forward_runs_on_cpu(tmp_path):
    """What the trainer's bf16 autocast does on a GPU, on CPU: the forward runs in bf16 and stays close
    to fp32 (the tiny BERT the tests train)."""
    import sys
    from pathlib import Path

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from transformers import AutoModel

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from trainutil import make_tiny_bert

    model = AutoModel.from_pretrained(make_tiny_bert(tmp_path / "bert", dropout=0.0)).eval()
    ids = torch.randint(5, 100, (4, 12))
    with torch.no_grad():
        ref = model(input_ids=ids).last_hidden_state
    seen: list[torch.dtype] = []
    linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda mod, inputs, output: seen.append(output.dtype))
    AcceleratorState._reset_state()
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    try:
        with torch.no_grad(), acc.autocast():
            out = model(input_ids=ids).last_hidden_state
    finally:
        AcceleratorState._reset_state()
    assert seen == [torch.bfloat16]          # matrix products in bf16 (LayerNorm outputs stay fp32)
    cos = torch.nn.functional.cosine_similarity(out.float().flatten(1), ref.flatten(1))
    assert cos.min().item() > 0.99 and not torch.equal(out.float(), ref)


def test_faiss_gpu_is_used_when_present_and_refused_when_asked_for_without_one():
    from harness.retrieval.dense import _want_gpu, gpu_count

    if gpu_count() == 0:
        assert _want_gpu(None) is False                     # auto: CPU search
        with pytest.raises(ConfigError, match=r"use_gpu=True but the installed faiss sees no GPU \(install "
                                              r"faiss-gpu on a GPU machine\)"):
            _want_gpu(True)
    else:
        assert _want_gpu(None) is True


def test_gpu_options_are_reachable_from_the_cli():
    parser = build_parser()
    args = parser.parse_args(["eval", "--model", "m", "--dataset-dir", "d", "--dtype", "bf16", "--backend", "int8"])
    assert (args.dtype, args.backend) == ("bf16", "int8")
    args = parser.parse_args(["run", "quickstart", "--executor", "submitit", "--gpus-per-job", "2",
                              "--slurm-partition", "gpu", "--workers", "8"])
    assert (args.executor, args.gpus_per_job, args.slurm_partition, args.workers) == ("submitit", 2, "gpu", 8)
    args = parser.parse_args(["train", "--data", "x", "--out", "y", "--set", "precision=bf16", "--dry-run"])
    assert args.set == ["precision=bf16"]


def test_bf16_encoding_without_a_gpu_runs_on_cpu_and_auto_picks_fp32():
    from harness.encoders.hf import resolve_dtype

    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32                  # auto never picks half precision on CPU
    assert resolve_dtype("bf16", cpu) == torch.bfloat16                  # an explicit bf16 is honoured
    with pytest.raises(ConfigError, match="unknown dtype 'fp8'"):
        resolve_dtype("fp8", cpu)
