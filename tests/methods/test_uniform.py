"""The uniform baseline: its recipe presets, uniform weights, and a tiny end-to-end run whose
checkpoint loads in HFEncoder and encodes exactly as the trained model."""
from __future__ import annotations

import numpy as np
import pytest
from trainutil import make_data, make_tiny_bert

from harness.errors import ConfigError
from harness.method import get_method, list_methods
from harness.train.logs import read_log
from harness.train.result import Checkpoint


def test_registered_with_three_scales():
    assert "uniform" in list_methods()
    method = get_method("uniform")
    assert set(method.presets) == {"tiny", "small", "paper"}
    with pytest.raises(ConfigError, match="no 'huge' preset"):
        method.spec("huge")
    with pytest.raises(ConfigError, match="unknown method"):
        get_method("no-such-method")


def test_paper_preset_is_the_tdro_baseline_recipe():
    spec = get_method("uniform").spec("paper")
    assert (spec.batch_size, spec.n_hard_negatives, spec.temperature, spec.similarity) == (2048, 1, 0.002, "cos")
    assert (spec.query_max_length, spec.doc_max_length, spec.steps, spec.warmup_steps) == (128, 512, 1000, 100)
    assert (spec.lr, spec.schedule, spec.min_lr_ratio, spec.weight_decay) == (1e-4, "cosine", 0.1, 0.1)
    assert (spec.precision, spec.gradient_checkpointing, spec.seed, spec.pooling) == ("bf16", True, 42, "last")
    assert spec.in_batch_negatives and spec.cross_batch_negatives and spec.sampling == "homogeneous"
    assert spec.use_instructions and spec.symmetric_doc_prompt and spec.append_eos and spec.lora is None
    small = get_method("uniform").spec("small", steps=60)
    assert small.model == "minilm" and small.steps == 60 and small.pooling == "mean"
    assert small.warmup_steps == 6                      # the preset's 10% warmup follows the new length


def test_weights_are_uniform():
    method = get_method("uniform")
    data = make_data(n_sources=4, rows=3)
    spec = method.spec("tiny")
    assert method.dataset_weights(spec, data).tolist() == [0.25] * 4
    with pytest.raises(ConfigError, match="samples every source equally"):
        method.dataset_weights(spec.replace(dataset_weights={"src0": 2.0, "src1": 1.0}), data)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = make_tiny_bert(tmp_path_factory.mktemp("tiny"), dropout=0.1, hidden=32)
    method = get_method("uniform")
    spec = method.spec("tiny", model=str(model_dir), steps=20, batch_size=8, lr=3e-3)
    ckpt = method.train(spec, make_data(n_sources=3, rows=16), tmp_path_factory.mktemp("run"))
    return method, spec, ckpt


def test_tiny_run_learns_and_logs(trained):
    method, spec, ckpt = trained
    assert isinstance(ckpt, Checkpoint) and ckpt.step == 20 and ckpt.method == "uniform"
    log = read_log(ckpt.workdir / "train_log.jsonl")
    assert len(log) == 20
    first, last = np.mean([r["loss"] for r in log[:5]]), np.mean([r["loss"] for r in log[-5:]])
    assert last < first - 0.3                                    # in-batch retrieval of the tiny data is learnt
    assert all(len(r["counts"]) == 1 and sum(r["counts"].values()) == 8 for r in log)   # homogeneous batches
    assert {"lr", "grad_norm", "examples_per_s", "infonce"} <= set(log[0])


def test_checkpoint_encodes_like_the_trained_model(trained):
    import torch

    from harness.encoders.backbone import tokenize
    from harness.train.model import build_model, load_weights

    method, spec, ckpt = trained
    encoder = method.encoder(ckpt)
    texts = ["alpha beta river", "a longer sentence about the ocean and the desert island"]
    got = encoder.encode_queries(texts, progress=False)
    model, tok, enc = build_model(spec)
    load_weights(model, ckpt.path)
    model.eval()
    with torch.no_grad():
        batch = tokenize(tok, texts, spec.query_max_length)
        want = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")).numpy()
    assert encoder.similarity == "cos"
    assert np.allclose(got, want, atol=1e-5)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_presets_are_read_only_and_not_shared():
    uniform, tdro = get_method("uniform"), get_method("tdro")
    with pytest.raises(TypeError):
        uniform.presets["tiny"]["lr"] = 1.0            # type: ignore[index]
    with pytest.raises(TypeError):
        uniform.presets["huge"] = {}                   # type: ignore[index]
    assert uniform.presets is not tdro.presets and uniform.presets["tiny"] is not tdro.presets["tiny"]
    assert dict(uniform.presets["tiny"]) == dict(tdro.presets["tiny"])
    spec = uniform.spec("tiny")
    assert spec.lr == 1e-3 and spec.save_every > 0      # every preset checkpoints: a kill resumes the cell
    opts = get_method("peg").resolve_options({})
    opts["alpha"] = 9.0                                 # a resolved copy is the caller's own
    assert get_method("peg").default_options["alpha"] == 0.5
