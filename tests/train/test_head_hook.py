"""Method.representation_head: SPLADE term weights from a tiny MLM (METHODS.md 4.1, oracle S1) trained
through the trainer, with the gradient cache; the dense default head is the spec's pooling."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from trainutil import grads, load_tiny, make_data, make_tiny_bert, plain_step, step_context

from harness.encoders.heads import DenseHead, SparseHead, splade_pool
from harness.encoders.pooling import pool
from harness.errors import ConfigError
from harness.method import Method

# Tiny models train fastest on one thread (the shared fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), dropout=0.0, mlm=True))


def test_splade_pooling_oracle_s1():
    logits = torch.tensor([[[1.0, -2.0, 0.5, 0.0], [math.e - 1, 0.2, -1.0, 3.0], [10.0, 10.0, 10.0, 10.0]]])
    mask = torch.tensor([[1, 1, 0]])
    w = splade_pool(logits, mask, "max")[0]
    assert torch.allclose(w, torch.tensor([1.0, 0.182322, 0.405465, 1.386294]), atol=1e-6)
    assert torch.allclose(splade_pool(logits, mask, "sum")[0], torch.tensor([1.693147, 0.182322, 0.405465, 1.386294]),
                          atol=1e-6)
    assert float(w @ torch.tensor([0.5, 0.0, 1.0, 2.0])) == pytest.approx(3.678054, abs=1e-6)
    unmasked = splade_pool(logits, torch.ones(1, 3, dtype=torch.long), "max")[0]
    assert torch.allclose(unmasked, torch.full((4,), math.log(11.0)))     # the bug the mask prevents
    with pytest.raises(ConfigError, match="aggregation"):
        SparseHead("mean")


def test_dense_head_is_the_spec_pooling(tiny_model_nodrop):
    spec, model, tok, _ = load_tiny(tiny_model_nodrop, pooling="mean", similarity="cos")
    assert isinstance(model.head, DenseHead) and model.head.normalize
    feats = tok(["alpha beta gamma", "delta"], padding=True, return_tensors="pt")
    hidden = model.backbone(**feats).last_hidden_state
    expected = torch.nn.functional.normalize(pool(hidden, feats["attention_mask"], "mean"), dim=-1)
    assert torch.equal(model(**feats), expected)


def test_sparse_head_gives_padding_free_vocabulary_weights(tiny_mlm):
    _, model, tok, _ = load_tiny(tiny_mlm, head=SparseHead(), similarity="dot")
    texts = ["alpha beta", "gamma delta epsilon zeta eta theta iota kappa"]
    with torch.no_grad():
        together = model(**tok(texts, padding=True, return_tensors="pt"))
        alone = model(**tok(texts[:1], return_tensors="pt"))
    assert together.shape == (2, tok.vocab_size) and bool((together >= 0).all())
    assert torch.allclose(together[0], alone[0], atol=1e-6)                 # padding never contributes
    assert int((together[0] > 0).sum()) > 0


class Splade(Method):
    name = "test-splade"

    def representation_head(self, spec):
        return SparseHead("max")


def test_sparse_head_under_the_gradient_cache(tiny_mlm):
    results = []
    for chunk in (None, 3):
        spec, model, tok, enc = load_tiny(tiny_mlm, head=SparseHead(), similarity="dot", temperature=1.0,
                                          batch_size=6)
        ctx = step_context(spec, make_data(), model, tok, enc, [(0, i) for i in range(3)] + [(1, i) for i in range(3)])
        res = plain_step(model, ctx, Splade(), gradcache_chunk=chunk)
        results.append((res, grads(model)))
    (full, g_full), (cached, g_cached) = results
    assert full.output.q.shape[1] == 30522
    assert full.loss == pytest.approx(cached.loss, rel=1e-5)
    scale = max(float(g.abs().max()) for g in g_full.values())
    assert scale > 1e-4
    assert max(float((g_full[k] - g_cached[k]).abs().max()) for k in g_full) < 1e-5 * max(scale, 1.0)


def test_method_head_trains_and_is_recorded(tmp_path, tiny_mlm):
    from safetensors.torch import load_file

    from harness.train.spec import TrainSpec

    spec = TrainSpec(model=tiny_mlm, pooling="mean", similarity="dot", temperature=1.0, batch_size=6, steps=3,
                     warmup_steps=0, lr=1e-3, n_hard_negatives=1, query_max_length=32, doc_max_length=64,
                     precision="fp32", gradient_checkpointing=False, progress=False)
    ckpt = Splade().train(spec, make_data(), tmp_path / "run")
    info = json.loads((ckpt.path / "training.json").read_text())
    assert info["head"] == {"type": "sparse", "aggregation": "max", "lm": "masked"}
    weights = load_file(str(next(ckpt.path.glob("*.safetensors"))))
    start = load_file(str(next(Path(tiny_mlm).glob("*.safetensors"))))
    head_bias = [k for k in weights if k.startswith("cls.predictions") and k.endswith("bias")]
    assert head_bias, sorted(weights)[:5]                                      # the MLM head was trained and saved
    assert any(not torch.equal(weights[k], start[k]) for k in head_bias)


def test_dry_run_plan_names_a_method_head(tiny_mlm):
    from harness.train.plan import training_plan
    from harness.train.spec import TrainSpec

    spec = TrainSpec(model=tiny_mlm, similarity="dot", progress=False)
    assert training_plan(spec, make_data(), Splade())["model"]["head"]["type"] == "sparse"
    assert "head" not in training_plan(spec, make_data(), Method())["model"]
