"""tDRO stage 2 (``tdro``): spec derivation (the reference is the suite's baseline cell), the
transfer strategies in the real trainer, and the full chain tdro -> tdro-weights -> uniform."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from trainutil import make_data, make_tiny_bert

from harness.errors import ConfigError
from harness.method import Method, get_method
from harness.train.logs import read_log
from harness.train.spec import TrainSpec
from methods.tdro import Tdro, reference_spec, stage1_spec

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(steps=5, batch_size=8, query_max_length=24, doc_max_length=32, use_instructions=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-tdro2"), dropout=0.0))


def test_reference_is_the_baseline_spec_and_stage1_follows_the_released_script():
    overrides = {"steps": 50, "batch_size": 16}
    baseline = get_method("uniform").spec("paper", **overrides)
    tdro = get_method("tdro").spec("paper", **overrides, method_options={"transfer": "top", "percent": 70})
    opts = get_method("tdro").resolve_options(tdro.method_options)
    ref = reference_spec(tdro, opts)
    assert ref.result_dict() == baseline.result_dict()          # same content key as the suite's baseline cell
    s1 = stage1_spec(tdro, opts)
    assert (s1.sampling, s1.in_batch_negatives, s1.cross_batch_negatives) == ("mixed", False, False)
    assert (s1.n_hard_negatives, s1.grad_accum, s1.temperature, s1.model) == (7, 4, 0.002, "Qwen/Qwen1.5-0.5B")
    assert s1.method_options == {"measure": "relative", "mode": "code", "lr_alpha": 0.02, "max_norm": 1.0,
                                 "reference": baseline.config_dict()}
    get_method("tdro-weights").resolve_options(s1.method_options)   # stage-1 options are its own
    proxy = stage1_spec(tdro, {**opts, "measure": "proxy"})
    assert proxy.method_options["reference"] is None
    # transfer options do not reach stage 1: every transfer of one measurement shares one stage-1 run
    other = get_method("tdro").spec("paper", **overrides, method_options={"transfer": "loss"})
    assert stage1_spec(other, get_method("tdro").resolve_options(other.method_options)) == s1
    # a separate proxy backbone (the paper's 0.5B proxy for an 8B fine-tuning) and reference overrides
    big = get_method("tdro").spec("paper", model="meta-llama/Meta-Llama-3-8B",
                                  method_options={"proxy_model": "Qwen/Qwen1.5-0.5B", "reference": {"lora": None}})
    big_opts = get_method("tdro").resolve_options(big.method_options)
    assert stage1_spec(big, big_opts).model == "Qwen/Qwen1.5-0.5B"
    assert reference_spec(big, big_opts).model == "Qwen/Qwen1.5-0.5B"


def test_options_are_validated():
    method = get_method("tdro")
    with pytest.raises(ConfigError, match="unknown transfer"):
        method.resolve_options({"transfer": "best"})
    with pytest.raises(ConfigError, match="percent must be in"):
        method.resolve_options({"transfer": "top", "percent": 0})
    with pytest.raises(ConfigError, match="unknown source"):
        method.resolve_options({"source": "median"})
    with pytest.raises(ConfigError, match="unknown option"):
        method.resolve_options({"lora": 8})


def _out(losses, groups):
    from harness.train.context import LossOutput

    return LossOutput(torch.tensor(losses), torch.tensor(groups))


def test_loss_reweighting_multiplies_by_k_alpha():
    method = Tdro()
    method._multipliers = np.array([2.0, 0.5, 0.5])            # k * alpha for alpha = (2/3, 1/6, 1/6)
    assert method.reduce(_out([1.0, 3.0], [0, 0]), None).item() == pytest.approx(4.0)
    assert method.reduce(_out([1.0, 3.0], [1, 1]), None).item() == pytest.approx(1.0)
    method._multipliers = np.ones(3)
    assert method.reduce(_out([1.0, 3.0], [1, 1]), None).item() == pytest.approx(2.0)


def test_given_weights_transfer_top_and_loss(tmp_path, tiny):
    data = make_data(n_sources=4, rows=12)
    weights = {"src0": 0.1, "src1": 0.4, "src2": 0.3, "src3": 0.2}
    spec = Tdro.spec("tiny", model=tiny, **SMALL, method_options={"transfer": "top", "percent": 50, "weights": weights})
    ckpt = get_method("tdro").train(spec, data, tmp_path / "top")
    counts = [r["counts"] for r in read_log(ckpt.workdir / "train_log.jsonl")]
    assert all(len(c) == 1 and set(c) <= {"src1", "src2"} for c in counts)     # homogeneous, selected only
    used = json.loads((ckpt.workdir / "method" / "weights.json").read_text())
    assert used == {"src0": 0.0, "src1": 0.5, "src2": 0.5, "src3": 0.0}
    spec = spec.replace(method_options={"transfer": "loss"})
    ckpt = get_method("tdro").train(spec, data, tmp_path / "loss")
    info = json.loads((ckpt.workdir / "method" / "transfer.json").read_text())
    assert info["sampling"] == {n: 0.25 for n in weights}
    assert info["loss_multipliers"] == pytest.approx({n: 4 * w for n, w in weights.items()})
    with pytest.raises(ConfigError, match="do not match the training sources"):
        get_method("tdro").train(spec.replace(method_options={"weights": {"src0": 1.0}}), data, tmp_path / "bad")


def test_chain_shares_the_baseline_and_transfers_stage1_weights(tmp_path, tiny):
    data = make_data(n_sources=3, rows=12)
    cells = tmp_path / "cells"
    stage1 = {"n_hard_negatives": 2, "grad_accum": 2, "steps": 3, "warmup_steps": 0}
    options = {"transfer": "ratio", "lr_alpha": 0.5, "stage1": stage1}
    baseline = get_method("uniform").spec("tiny", model=tiny, **SMALL)
    spec = get_method("tdro").spec("tiny", model=tiny, **SMALL, method_options=options)
    method = get_method("tdro")
    method.cells_root = cells
    ckpt = method.train(spec, data, tmp_path / "tdro")
    base_dir = cells / Method.run_key("uniform", baseline, data)
    assert (base_dir / "done.json").exists()                           # the baseline cell, trained as reference
    s1 = stage1_spec(spec, method.resolve_options(spec.method_options))
    s1_dir = cells / Method.run_key("tdro-weights", s1, data)
    learned = json.loads((s1_dir / "method" / "curr_weights.json").read_text())
    info = json.loads((ckpt.workdir / "method" / "transfer.json").read_text())
    assert info["learned"] == learned and info["sampling"] == pytest.approx(learned)
    assert info["stage1_run"] == str(s1_dir)
    runs = sorted(p for p in cells.iterdir() if p.is_dir())            # beside each run: its claim file
    assert len(runs) == 2                                              # uniform + tdro-weights, nothing else
    # a second transfer of the same measurement reuses stage 1 (and so the reference)
    top = get_method("tdro")
    top.cells_root = cells
    top.train(spec.replace(method_options={"transfer": "top", "percent": 70}), data, tmp_path / "top")
    assert sorted(p for p in cells.iterdir() if p.is_dir()) == runs
    ref = TrainSpec.from_dict(s1.method_options["reference"])
    assert Method.run_key("uniform", ref, data) == base_dir.name
