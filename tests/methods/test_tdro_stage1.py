"""tDRO stage 1 (``tdro-weights``) in the real trainer: the weight trajectory equals repeated
``update_weights`` on the measured M's, the reference is the uniform dependency, exports, resume."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from trainutil import make_data, make_tiny_bert

from harness.errors import ConfigError
from harness.method import Method, get_method
from harness.train.logs import read_log
from harness.train.spec import TrainSpec
from methods.tdro import group_measurements, update_weights
from methods.tdro_weights import TdroWeights, same_tokenization

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-tdro"), dropout=0.0))


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> Path:
    """One cache of dependency runs for the module: the uniform reference is trained once."""
    return tmp_path_factory.mktemp("cells")


def base_spec(model: str, **kw) -> TrainSpec:
    fields = dict(model=model, pooling="mean", batch_size=8, steps=3, warmup_steps=0, n_hard_negatives=1,
                  temperature=0.05, query_max_length=24, doc_max_length=32, precision="fp32", lr=3e-3,
                  gradient_checkpointing=False, progress=False, use_instructions=False)
    return TrainSpec(**{**fields, **kw})


def stage1_spec(model: str, measure: str = "relative", **kw) -> TrainSpec:
    reference = base_spec(model, steps=4).config_dict()
    return base_spec(model, sampling="mixed", in_batch_negatives=False, cross_batch_negatives=False,
                     n_hard_negatives=2, grad_accum=2,
                     method_options={"measure": measure, "lr_alpha": 0.5, "reference": reference}, **kw)


class Recording(TdroWeights):
    """Keeps every micro-batch's proxy/reference losses and M, and can stop after a step."""

    interrupt_at: int | None = None

    def observe(self, out, ctx):
        super().observe(out, ctx)
        ref = self.reference_losses(ctx) if self.frozen is not None else None
        self.micro.append((out.losses.detach().clone(), None if ref is None else ref.clone(),
                           out.group_ids.clone(), torch.tensor(self.last_measurement)))

    def configure(self, ctx):
        super().configure(ctx)
        self.micro = []

    def on_step_end(self, ctx):
        if self.interrupt_at is not None and ctx.step == self.interrupt_at:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tiny, cells):
    """A 4-step stage-1 run (2 micro-batches per step, checkpoints every 2 steps)."""
    method = Recording()
    method.cells_root = cells
    data = make_data(n_sources=3, rows=12)
    ckpt = method.train(RESUMABLE(tiny), data, tmp_path_factory.mktemp("stage1") / "run")
    return method, data, ckpt


def RESUMABLE(model: str) -> TrainSpec:
    return stage1_spec(model, steps=4, save_every=2, keep_checkpoints=3)


def test_trajectory_equals_update_weights_on_measured_m(recorded):
    method, data, ckpt = recorded
    assert len(method.micro) == 8 and len(method.trajectory) == 4
    log_w = torch.log(torch.full((3,), 1 / 3))
    for step in range(4):
        pair = method.micro[2 * step:2 * step + 2]
        for proxy, ref, ids, m in pair:                             # M is the public function of the losses
            assert torch.allclose(m, group_measurements(proxy, ref, ids, 3), atol=1e-5)
        log_w = update_weights(log_w, torch.stack([m for *_, m in pair]), lr=0.5)
        assert np.allclose(method.trajectory[step], log_w.exp().numpy(), atol=1e-6)
    assert not np.allclose(method.trajectory[-1], 1 / 3)


def test_exports(recorded):
    method, data, ckpt = recorded
    out = ckpt.workdir / "method"
    final = json.loads((out / "curr_weights.json").read_text())
    assert list(final) == data.names and sum(final.values()) == pytest.approx(1.0)
    assert np.allclose(list(final.values()), method.trajectory[-1], atol=1e-6)
    mean = json.loads((out / "mean_weights.json").read_text())
    assert np.allclose(list(mean.values()), np.mean(method.trajectory, axis=0), atol=1e-6)
    ema = np.full(3, 1 / 3)
    for alpha in method.trajectory:
        ema = 0.9 * ema + 0.1 * np.asarray(alpha)
    assert np.allclose(list(json.loads((out / "ema_weights.json").read_text()).values()), ema, atol=1e-6)
    top = json.loads((out / "top70_weights.json").read_text())       # floor(3 * 0.7) = 2 datasets
    best = sorted(final, key=final.get, reverse=True)[:2]
    assert {n for n, w in top.items() if w > 0} == set(best) and max(top.values()) == pytest.approx(0.5)
    assert not (out / "top20_weights.json").exists()                  # 20% of 3 selects none
    lines = (out / "weights_trajectory.jsonl").read_text().splitlines()
    assert [json.loads(x)["update"] for x in lines] == [1, 2, 3, 4]
    assert (out / "weights.png").stat().st_size > 1000 and (out / "weights.pdf").exists()
    records = read_log(ckpt.workdir / "train_log.jsonl")
    assert all(len(r["counts"]) >= 1 for r in records) and "alpha_max" in records[-1]["method"]


def test_reference_is_the_uniform_dependency(recorded, cells):
    method, data, ckpt = recorded
    ref_spec = TrainSpec.from_dict(RESUMABLE(method_model(ckpt)).method_options["reference"])
    ref_dir = cells / Method.run_key("uniform", ref_spec, data)
    assert (ref_dir / "done.json").exists()
    assert method.reference_path == str(ref_dir / "final")
    assert json.loads((ref_dir / "run.json").read_text())["method"] == "uniform"
    # the frozen reference tokenizes like the proxy, so its forward reuses the batch's token ids
    assert method.reuse_tokens


def method_model(ckpt) -> str:
    return json.loads((ckpt.workdir / "run.json").read_text())["spec"]["model"]


class BothPaths(TdroWeights):
    """Computes the reference losses with reused token ids and with the trainer's re-tokenizing path."""

    def observe(self, out, ctx):
        super().observe(out, ctx)
        self.pairs = getattr(self, "pairs", [])
        self.pairs.append((self.reference_losses(ctx), ctx.frozen_losses(self.frozen)))


def test_reused_tokens_give_the_same_reference_losses(tmp_path, tiny, cells):
    method = BothPaths()
    method.cells_root = cells
    method.train(stage1_spec(tiny, steps=1), make_data(n_sources=3, rows=12), tmp_path / "a")
    assert method.reuse_tokens and len(method.pairs) == 2
    for reused, retokenized in method.pairs:
        assert torch.allclose(reused, retokenized, atol=1e-6)


def test_proxy_measure_needs_no_reference(tmp_path, tiny):
    method = Recording()
    spec = stage1_spec(tiny, measure="proxy", steps=1)
    method.cells_root = tmp_path / "cells"
    method.train(spec, make_data(n_sources=3, rows=12), tmp_path / "proxy")
    assert method.frozen is None and method.reference_path is None
    assert not (tmp_path / "cells").exists()
    for proxy, ref, ids, m in method.micro:
        assert ref is None and torch.allclose(m, group_measurements(proxy, None, ids, 3, measure="proxy"))


@pytest.mark.slow
def test_resume_reproduces_weights_step_for_step(tmp_path, tiny, cells, recorded):
    straight, data, ckpt = recorded
    broken = Recording()
    broken.cells_root = cells
    broken.interrupt_at = 3
    with pytest.raises(KeyboardInterrupt):
        broken.train(RESUMABLE(tiny), data, tmp_path / "resumed")
    resumed = Recording()
    resumed.cells_root = cells
    resumed.train(RESUMABLE(tiny), data, tmp_path / "resumed")
    assert len(resumed.trajectory) == 4
    assert np.array_equal(resumed.trajectory, straight.trajectory)
    for name in ("curr", "mean", "ema"):
        a = json.loads((ckpt.workdir / "method" / f"{name}_weights.json").read_text())
        b = json.loads((tmp_path / "resumed" / "method" / f"{name}_weights.json").read_text())
        assert a == b, name


def test_options_are_checked(tmp_path, tiny):
    method = get_method("tdro-weights")
    with pytest.raises(ConfigError, match="unknown measure"):
        method.resolve_options({"measure": "ratio"})
    with pytest.raises(ConfigError, match="unknown option"):
        method.resolve_options({"transfer": "top"})
    spec = base_spec(tiny, sampling="mixed", dataset_weights={"src0": 0.0, "src1": 1.0, "src2": 1.0},
                     method_options={"measure": "proxy"})
    with pytest.raises(ConfigError, match="must be > 0"):
        method.train(spec, make_data(n_sources=3, rows=12), tmp_path / "zero")


def test_same_tokenization(tiny):
    from transformers import AutoTokenizer

    from harness.encoders.backbone import resolve_model

    a = AutoTokenizer.from_pretrained(tiny)
    assert same_tokenization(a, AutoTokenizer.from_pretrained(tiny))
    b = AutoTokenizer.from_pretrained(tiny)
    b.padding_side = "left"
    assert not same_tokenization(a, b)
    other, _ = resolve_model("minilm")
    assert same_tokenization(a, AutoTokenizer.from_pretrained(other))   # the tiny BERT uses MiniLM's tokenizer
