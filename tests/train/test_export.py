"""Saved models: LoRA adapter and merged exports, frozen models from saved folders, logs, precision switches."""
from __future__ import annotations

import numpy as np
import torch
from optional_extras import require_extra
from trainutil import grads, load_tiny, make_data, plain_step, step_context

from harness.encoders.hf import HFEncoder
from harness.method import Method

TEXTS = ["alpha beta river", "the glacier meets the ocean near a desert island"]


def lora_spec(model_dir, merge: bool, **kw):
    from harness.train.spec import TrainSpec

    return TrainSpec(model=model_dir, pooling="mean", batch_size=4, steps=2, warmup_steps=0, n_hard_negatives=1,
                     temperature=0.05, query_max_length=32, doc_max_length=64, precision="fp32", lr=1e-2,
                     gradient_checkpointing=False, progress=False,
                     lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["query", "value"],
                           "merge_on_save": merge}, **kw)


def test_lora_adapter_and_merged_exports_encode_alike(tmp_path, tiny_model_nodrop):
    data = make_data()
    adapter = Method().train(lora_spec(tiny_model_nodrop, merge=False), data, tmp_path / "adapter")
    merged = Method().train(lora_spec(tiny_model_nodrop, merge=True), data, tmp_path / "merged")
    assert (adapter.path / "adapter_config.json").exists() and not (merged.path / "adapter_config.json").exists()
    a = HFEncoder(str(adapter.path)).encode_queries(TEXTS, progress=False)
    m = HFEncoder(str(merged.path)).encode_queries(TEXTS, progress=False)
    base = HFEncoder(tiny_model_nodrop, pooling="mean", normalize=True).encode_queries(TEXTS, progress=False)
    assert np.allclose(a, m, atol=1e-5)
    assert not np.allclose(a, base, atol=1e-3)              # the adapter did change the model

    # A frozen (reference) model can be loaded from either folder and encodes the same way.
    from harness.encoders.backbone import tokenize
    from harness.train.model import load_frozen_model

    spec = lora_spec(tiny_model_nodrop, merge=False)
    for folder in (adapter.path, merged.path):
        model, tok, enc = load_frozen_model(str(folder), spec)
        assert enc["pooling"] == "mean" and not any(p.requires_grad for p in model.parameters())
        batch = tokenize(tok, TEXTS, 32)
        with torch.no_grad():
            emb = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        assert np.allclose(torch.nn.functional.normalize(emb, dim=-1).numpy(), a, atol=1e-5)


def test_gradient_checkpointing_keeps_gradients(tiny_model_nodrop):
    data = make_data(n_sources=2, rows=6)
    examples = [(0, 0), (0, 1), (1, 2), (1, 3)]
    results = []
    for checkpointing in (False, True):
        spec, model, tok, enc = load_tiny(tiny_model_nodrop, batch_size=4, gradient_checkpointing=checkpointing)
        model.train()
        ctx = step_context(spec, data, model, tok, enc, examples)
        results.append((plain_step(model, ctx, Method()).loss, grads(model)))
    (l0, g0), (l1, g1) = results
    assert abs(l0 - l1) < 1e-6 and g0.keys() == g1.keys()
    assert max(float((g0[k] - g1[k]).abs().max()) for k in g0) < 1e-6


def test_tensorboard_log(tmp_path, tiny_model_nodrop):
    require_extra("tensorboard")
    spec = lora_spec(tiny_model_nodrop, merge=False).replace(lora=None, tensorboard=True, steps=1)
    Method().train(spec, make_data(), tmp_path / "run")
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_accelerator_can_change_precision_between_runs():
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from harness.train.trainer import make_accelerator

    AcceleratorState._reset_state()
    Accelerator(cpu=True, mixed_precision="bf16")   # a previous run in this process used bf16
    assert make_accelerator("fp32").mixed_precision == "no"
