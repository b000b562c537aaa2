"""TrainSpec validation and hashing, LR schedules, the compute estimate and ``harness train``."""
from __future__ import annotations

import json
import math

import pytest
from trainutil import make_data

from harness.cli import main
from harness.errors import ConfigError
from harness.train.plan import KNOWN_CONFIGS, compute_estimate, estimate_parameters
from harness.train.schedule import lr_factor
from harness.train.spec import TrainSpec, load_spec_file


def test_spec_validation_and_round_trip():
    spec = TrainSpec(lora={"r": 4, "alpha": 8}, method_options={"eta": 0.1})
    assert spec.lora.r == 4 and spec.lora.dropout == 0.1
    assert TrainSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(ConfigError, match="unknown option.*batchsize"):
        TrainSpec.from_dict({"batchsize": 3})
    with pytest.raises(ConfigError, match="similarity must be one of"):
        TrainSpec(similarity="l2")
    with pytest.raises(ConfigError, match="not divisible by grad_accum"):
        TrainSpec(batch_size=10, grad_accum=4)
    with pytest.raises(ConfigError, match="not divisible by 3 processes"):
        TrainSpec(batch_size=8).micro_batch_size(3)
    assert TrainSpec(batch_size=2048, grad_accum=4).micro_batch_size(8) == 64


def test_fingerprint_ignores_bookkeeping_only():
    spec = TrainSpec()
    assert spec.replace(progress=False, save_every=7, log_every=3).fingerprint() == spec.fingerprint()
    assert spec.replace(temperature=0.01).fingerprint() != spec.fingerprint()
    assert spec.replace(lora={"r": 8}).replace(lora={"alpha": 16}).lora.r == 8


def test_spec_file_errors(tmp_path):
    good = tmp_path / "s.yaml"
    good.write_text("steps: 5\nlora: {r: 2}\n")
    assert load_spec_file(good) == {"steps": 5, "lora": {"r": 2}}
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: 5\n  lr: [\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: malformed YAML"):
        load_spec_file(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_spec_file(bad)


def test_lr_schedules():
    assert [lr_factor(s, 1000, 100, "cosine", 0.1) for s in (0, 50, 100)] == [0.0, 0.5, 1.0]
    assert lr_factor(550, 1000, 100, "cosine", 0.1) == pytest.approx(0.55)            # half-way: (1 + 0.1) / 2
    assert lr_factor(1000, 1000, 100, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_factor(325, 1000, 100, "cosine", 0.0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_factor(550, 1000, 100, "linear", 0.0) == pytest.approx(0.5)
    assert lr_factor(999, 1000, 100, "constant") == 1.0


def test_compute_estimate_for_the_paper_baseline():
    params = estimate_parameters(KNOWN_CONFIGS["Qwen/Qwen1.5-0.5B"])
    assert params["total"] == pytest.approx(464e6, rel=0.01)          # Qwen1.5-0.5B without the LM head
    from harness.method import get_method

    est = compute_estimate(get_method("uniform").spec("paper"), params["non_embedding"])
    assert est["tokens"] == 1000 * 2048 * (128 + 2 * 512)
    assert est["flops_per_param_token"] == 8                           # full fine-tuning + checkpointing
    assert est["gpu_hours"] == pytest.approx(4.09, abs=0.01)


@pytest.mark.needs_shared
def test_cli_dry_run_prints_the_plan(shared_data, capsys):
    rc = main(["train", "--data", str(shared_data / "train-multidomain"), "--out", "unused", "--scale", "paper",
               "--dry-run", "--set", "steps=500"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["model"]["name"] == "Qwen/Qwen1.5-0.5B" and plan["steps"] == 500 and plan["batch_size"] == 2048
    assert [d["weight"] for d in plan["datasets"]] == [0.125] * 8
    assert plan["compute"]["gpu_hours"] == pytest.approx(4.09 / 2, abs=0.01)


def test_cli_trains_and_reports_bad_options(tmp_path, tiny_model_nodrop, capsys):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for src in make_data(n_sources=2, rows=6).sources:
        (data_dir / f"{src.name}.jsonl").write_text("".join(
            json.dumps({"query": r.query, "pos": r.pos, "neg": r.neg}) + "\n" for r in src.rows))
    out = tmp_path / "out"
    args = ["train", "--data", str(data_dir), "--out", str(out), "--scale", "tiny", "--model", tiny_model_nodrop,
            "--steps", "2", "--batch-size", "4"]
    assert main(args) == 0
    assert "trained uniform for 2 steps" in capsys.readouterr().out
    assert (out / "done.json").exists() and (out / "final" / "harness_encoder.json").exists()
    assert main(args + ["--set", "temperature"]) == 2
    assert "expects KEY=VALUE" in capsys.readouterr().err
    assert main(args[:-4] + ["--set", "tempratur=1"]) == 2
    assert "unknown option(s) tempratur" in capsys.readouterr().err
