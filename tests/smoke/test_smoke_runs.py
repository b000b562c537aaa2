"""Each paper suite's smoke scale end to end on CPU (marker ``smoke``: ``pytest -m smoke``, ``make test-smoke``):
the paper recipe (pooling, loss, negatives, LoRA, schedule shape, stages) on tiny stand-ins, runs capped.  Every
trained cell must have trained the recipe its paper cell would (checked against the run's own ``run.json``)."""
from __future__ import annotations

import json
import time

import pytest

from harness.ablation.spec import load_suite
from harness.cli import main

pytestmark = pytest.mark.smoke

PAPER_SUITES = ("peg", "tdro", "coco_dr", "splade", "mining")


@pytest.mark.parametrize("name", PAPER_SUITES)
def test_smoke_scale_runs_the_paper_code_path(name, tmp_path, capsys):
    root = tmp_path / "results"
    started = time.perf_counter()
    assert main(["run", name, "--scale", "smoke", "--results-root", str(root), "--no-progress",
                 "--format", "json"]) == 0
    wall = time.perf_counter() - started
    summary = json.loads(capsys.readouterr().out)
    suite = load_suite(name)
    limits = suite.scale("smoke").limits
    trained = [c for c in summary["cells"] if c.get("method") != "none"]
    assert trained, "the smoke scale trains nothing"
    for cell in trained:
        run = json.loads((root / "cells" / "train" / cell["key"] / "run.json").read_text(encoding="utf-8"))
        spec = run["spec"]
        assert spec["limits"] == limits and spec["steps"] <= limits["steps"]
        assert (root / "cells" / "train" / cell["key"] / "done.json").is_file()
        lora = spec.get("lora")
        if lora and not lora.get("merge_on_save"):
            # the paper's LoRA (rank, scaling, targets) is what the run saved
            adapter = next((root / "cells" / "train" / cell["key"]).rglob("adapter_config.json"))
            config = json.loads(adapter.read_text(encoding="utf-8"))
            assert (config["r"], config["lora_alpha"]) == (lora["r"], lora["alpha"])
            if lora.get("target_modules"):
                assert set(config["target_modules"]) == set(lora["target_modules"])
    print(f"smoke {name}: {len(trained)} trained cells, {wall:.0f} s")
