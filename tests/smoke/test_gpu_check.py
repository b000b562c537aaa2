"""scripts/gpu_check.py: its report without a GPU, the QLoRA suite it derives, and (marker smoke) a CPU run."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from harness.ablation.axes import replicates, suite_systems
from harness.ablation.cells import replicate_spec
from harness.ablation.spec import load_suite

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_check():
    return _module()


def test_without_a_gpu_it_refuses_and_says_why(gpu_check, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["env"]["cuda"] is False and "no CUDA GPU" in report["error"] and "suites" not in report


def test_the_qlora_suite_quantises_the_decoder_rows_at_smoke(gpu_check, tmp_path):
    path = gpu_check.quantised_splade(tmp_path)
    suite = load_suite(path)
    system = next(s for s in suite_systems(suite) if s.id == "echo-lora")
    spec = replicate_spec(suite, replicates(suite, system, "smoke")[0], "smoke", "tiny-decoder-untied")
    assert spec.method_options["quantization"] == "4bit"          # the paper's QLoRA (echo-splade paper preset)
    plain = load_suite("splade")
    system = next(s for s in suite_systems(plain) if s.id == "echo-lora")
    spec = replicate_spec(plain, replicates(plain, system, "smoke")[0], "smoke", "tiny-decoder-untied")
    assert spec.method_options["quantization"] is None            # the CPU smoke scale: unquantised


def test_rows_whose_packaged_model_is_missing_are_left_out(gpu_check, tmp_path, monkeypatch):
    """An offline GPU image without the MiniLM and Pyserini packages: the splade suite runs without its minilm
    and bm25 rows (and the layouts naming them); the mining suite, whose smoke scale needs MiniLM, is skipped."""
    monkeypatch.setitem(gpu_check.PACKAGED, "minilm", "no_such_module_for_the_test")
    monkeypatch.setitem(gpu_check.PACKAGED, "bm25", "no_such_module_for_the_test")
    suite_level, runs, left_out = gpu_check.missing_models("splade")
    assert suite_level == [] and set(left_out) == {"minilm", "bm25"} and "echo-lora" in runs
    assert "package no_such_module_for_the_test" in left_out["minilm"]
    path = gpu_check.without_variants("splade", (gpu_check.ROOT / "suites/ablations/splade.yaml").read_text(),
                                      left_out, tmp_path)
    suite = load_suite(path)
    assert {v.id for v in suite.variants} == set(runs)
    layouts = suite.raw["table"]["layouts"]
    assert layouts and all(not {"minilm", "bm25"} & set(gpu_check._strings(layout)) for layout in layouts.values())
    assert "table1" not in layouts and "default" not in suite.raw["table"]     # table1 names both rows
    assert gpu_check.missing_models("mining")[0] == ["minilm"]


def test_the_trained_runs_device_is_read_from_the_log(gpu_check, caplog):
    import logging

    from harness.train import trainer

    with caplog.at_level(logging.INFO, logger=trainer.log.name):
        trainer.make_accelerator("fp32")
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("training on "))
    assert line == "training on cpu (fp32, 1 process(es))"
    assert gpu_check.re.findall(r"training on (\S+) \((\w+), \d+ process", line) == [("cpu", "fp32")]


@pytest.mark.smoke
def test_a_cpu_run_writes_the_report(gpu_check, tmp_path):
    assert gpu_check.main(["--out", str(tmp_path), "--suites", "peg", "--allow-cpu", "--timeout", "1200"]) == 0
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    (peg,) = report["suites"]
    assert peg["passed"] and peg["cells"] == 6 and peg["precision_fallback"] is True    # bf16 -> fp32 on CPU
    assert report["qlora"]["ran"] is False and report["passed"] is True
