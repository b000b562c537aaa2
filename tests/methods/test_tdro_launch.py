"""``torchrun``/``accelerate launch`` of ``harness run``: every process trains (the uniform reference,
tDRO stage 1 and stage 2, 2 CPU processes over gloo), then the main process evaluates and writes
the table.  Slow: two interpreters load torch and train four runs."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SUITE = {
    "name": "tdro-launch-test", "version": 1, "baseline": "base",
    "variants": [
        {"id": "base", "method": "uniform"},
        {"id": "top", "method": "tdro",
         "options": {"transfer": "top", "percent": 50, "lr_alpha": 0.1,
                     "stage1": {"n_hard_negatives": 2, "grad_accum": 2, "steps": 4, "warmup_steps": 0}}},
    ],
    "metrics": ["ndcg@10"],
    "scales": {"tiny": {
        "model": "synthetic:tdro/tiny-bert", "data": ["synthetic:tdro"],
        "train": {"steps": 6, "batch_size": 8, "lr": 0.001, "warmup_steps": 0, "use_instructions": False},
        "benchmarks": [{"id": "latin_qa", "suite": "synthetic", "dataset_dir": "synthetic:tdro/eval/latin_qa"}]}},
}


def test_two_processes_train_then_main_evaluates(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(SUITE, sort_keys=False), encoding="utf-8")
    root = tmp_path / "results"
    env = {**os.environ, "HARNESS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    # A free port chosen here: with --master_port 0 the workers' rendezvous can wait forever.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port,
           "-m", "harness", "run", str(suite), "--scale", "tiny", "--results-root", str(root), "--no-progress"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "evaluation runs on the main process (this is rank 1 of 2)" in done.stderr
    assert (root / "suites" / "tdro-launch-test" / "tiny" / "table.md").exists()
    runs = {json.loads((d / "run.json").read_text())["method"]: d for d in (root / "cells" / "train").iterdir()}
    assert set(runs) == {"uniform", "tdro-weights", "tdro"}                 # reference = baseline, trained once
    for method, run in runs.items():
        assert json.loads((run / "done.json").read_text())["info"]["processes"] == 2, method
    trajectory = (runs["tdro-weights"] / "method" / "weights_trajectory.jsonl").read_text().splitlines()
    assert len(trajectory) == 4                                            # one update per optimizer step
    log = [json.loads(x) for x in (runs["tdro-weights"] / "train_log.jsonl").read_text().splitlines()]
    assert all(sum(r["counts"].values()) == 8 for r in log)                 # the global batch over both ranks
    assert len(list((root / "cells" / "eval").iterdir())) == 2
