"""Per-run claims (harness.io.claims): concurrent processes never train the same run twice, and a
killed holder's claim is recovered by the next process, which resumes the run from its checkpoint.

The workers are real processes (``python -c`` importing :func:`_worker` from this file), because the
claim is an OS file lock: threads of one process would not show what two machines sharing a results
root see."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.io.claims import ClaimTimeout, claim, claim_path, read_claim
from harness.method import Method

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKER_STEPS = 8


class Counting(Method):
    """The default contrastive recipe, recording every training start and step in a marker file
    (``CLAIMTEST_MARKER``) and sleeping ``CLAIMTEST_DELAY`` seconds per step so runs overlap."""

    name = "test-claims-counting"

    def configure(self, ctx) -> None:
        _mark(f"start {os.getpid()}")

    def on_step_end(self, ctx) -> None:
        _mark(f"step {os.getpid()} {ctx.step}")
        time.sleep(float(os.environ.get("CLAIMTEST_DELAY", "0")))


def _mark(line: str) -> None:
    with open(os.environ["CLAIMTEST_MARKER"], "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _spec(model_dir: str):
    from harness.train.spec import TrainSpec

    return TrainSpec(model=model_dir, pooling="mean", batch_size=4, steps=WORKER_STEPS, warmup_steps=1,
                     save_every=2, keep_checkpoints=2, lr=1e-3, n_hard_negatives=1, query_max_length=32,
                     doc_max_length=48, precision="fp32", progress=False)


def _worker(model_dir: str, root: str) -> None:
    """Obtain the Counting run as a dependency (``<root>/deps/<key>``) and print its step and losses."""
    import logging

    import torch
    from trainutil import make_data

    from harness.train.logs import read_log

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    from harness.method.stages import run_stages
    from harness.train.stages import Stage

    class Owner(Method):
        """Declares the Counting run as its one stage (trained into ``<root>/deps/<key>``)."""

        def stages(self, spec):
            return [Stage("counting", "the Counting run", f"{__name__}:Counting", spec)]

    results, _ = run_stages(Owner(), _spec(model_dir), make_data(), root)
    ckpt = results["counting"].checkpoint
    losses = [r["loss"] for r in read_log(ckpt.workdir / "train_log.jsonl")]
    print(json.dumps({"step": ckpt.step, "workdir": str(ckpt.workdir), "losses": losses}))


def _start(model_dir: Path, root: Path, marker: Path, delay: float) -> subprocess.Popen:
    code = (f"import sys; sys.path[:0] = {[str(HERE), str(REPO / 'tests' / 'train'), str(REPO)]!r}; "
            f"from test_claims import _worker; _worker({str(model_dir)!r}, {str(root)!r})")
    env = {**os.environ, "CLAIMTEST_MARKER": str(marker), "CLAIMTEST_DELAY": str(delay),
           "HARNESS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def _starts(marker: Path) -> list[str]:
    return [line.split()[1] for line in marker.read_text().splitlines() if line.startswith("start ")]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from trainutil import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), dropout=0.0)


# ---------------------------------------------------------------------- the lock itself (in process)
def test_claim_is_exclusive_reentrant_and_times_out_naming_the_holder(tmp_path):
    run = tmp_path / "cells" / "train" / "abc"
    helper = ("import sys, time; from harness.io.claims import claim\n"
              f"with claim({str(run)!r}, 'training abc'):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", helper], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        record = read_claim(run)
        assert record is not None and record["pid"] == holder.pid and record["what"] == "training abc"
        assert claim_path(run) == tmp_path / "cells" / "train" / "abc.claim"   # beside the run, not in it
        with pytest.raises(ClaimTimeout, match=rf"still claimed by pid {holder.pid} on .* after 0.3s"):
            with claim(run, timeout=0.3, poll=0.05):
                pytest.fail("took a claim another process holds")
    finally:
        holder.kill()
        holder.wait()
    # The kill released it: taken at once, and the dead holder's record is reported as recovered.
    with claim(run, timeout=0, poll=0.05) as waited:
        assert waited is False
        assert read_claim(run)["pid"] == os.getpid()
        with claim(run, timeout=0) as again:          # re-entrant within one thread: no self-deadlock
            assert again is False
    assert read_claim(run) is None                    # a clean release leaves no record
    assert not run.exists()                           # the claim never creates the run directory


def test_bad_settings_are_config_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CLAIM_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="HARNESS_CLAIM_TIMEOUT='soon': expected a number of seconds"):
        with claim(tmp_path / "x"):
            pass
    monkeypatch.delenv("HARNESS_CLAIM_TIMEOUT")
    monkeypatch.setenv("HARNESS_CLAIMS", "maybe")
    with pytest.raises(ConfigError, match="HARNESS_CLAIMS='maybe': expected on or off"):
        with claim(tmp_path / "x"):
            pass
    monkeypatch.setenv("HARNESS_CLAIMS", "off")
    with claim(tmp_path / "x") as waited:
        assert waited is False and not claim_path(tmp_path / "x").exists()


# ---------------------------------------------------------------------- two processes, one run
def test_two_processes_train_one_dependency_once(tmp_path, tiny_model):
    marker = tmp_path / "marker"
    marker.touch()
    procs = [_start(tiny_model, tmp_path / "work", marker, delay=0.15) for _ in range(2)]
    (a, err_a), (b, err_b) = (_finish(p) for p in procs)
    starts = _starts(marker)
    assert len(starts) == 1                                         # trained once ...
    trainer_pid = int(starts[0])
    waiter_err = err_b if trainer_pid == procs[0].pid else err_a
    assert re.search(rf"waiting for stage .* is claimed by pid {trainer_pid} on ", waiter_err)
    assert a == b and a["step"] == WORKER_STEPS                    # ... and reused by the other, as is
    assert len(a["losses"]) == WORKER_STEPS
    assert Path(a["workdir"]).parent == tmp_path / "work" / "deps"


def test_a_killed_holder_is_recovered_and_its_run_resumed(tmp_path, tiny_model):
    straight, _ = _finish(_start(tiny_model, tmp_path / "straight", tmp_path / "m0", delay=0))
    marker = tmp_path / "marker"
    marker.touch()
    holder = _start(tiny_model, tmp_path / "work", marker, delay=0.4)
    deadline = time.time() + 120
    while not list((tmp_path / "work" / "deps").glob("*/checkpoints/step-*")):
        assert time.time() < deadline and holder.poll() is None, "the holder never saved a checkpoint"
        time.sleep(0.05)
    waiter = _start(tiny_model, tmp_path / "work", marker, delay=0)
    time.sleep(1.0)                                                 # let the waiter reach the claim
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    got, err = _finish(waiter)
    assert f"left by pid {holder.pid} on" in err                    # the dead holder's claim, recovered
    assert re.search(r"resumed .* \(step [1-9]\d*\)", err)          # from its checkpoint, not from scratch
    assert _starts(marker) == [str(holder.pid), str(waiter.pid)]
    first_step = next(int(line.split()[2]) for line in marker.read_text().splitlines()
                      if line.startswith(f"step {waiter.pid} "))
    assert first_step > 1                                           # the waiter did not start over
    assert got["step"] == WORKER_STEPS
    assert got["losses"] == straight["losses"]                      # exact resume: the uninterrupted run


# ---------------------------------------------------------------------- two concurrent `harness run`
def _suite(path: Path) -> Path:
    """Two tDRO stage-1 cells that share one uniform reference run (a dependency that is not a cell)."""
    raw = {"name": "claims", "version": 1, "description": "two cells sharing a dependency",
           "baseline": "base", "metrics": ["ndcg@10"], "stats": {"test": "randomization", "seed": 0},
           "variants": [{"id": "base", "method": "none"},
                        {"id": "weights-a", "method": "tdro-weights", "options": {"lr_alpha": 0.02}},
                        {"id": "weights-b", "method": "tdro-weights", "options": {"lr_alpha": 0.05}}],
           "scales": {"tiny": {"model": "synthetic:default/tiny-bert", "data": ["synthetic:default"],
                               "train": {"steps": 12, "batch_size": 16, "warmup_steps": 2, "save_every": 4,
                                         "use_instructions": False, "seed": 7},
                               "benchmarks": [{"id": "latin_qa", "suite": "synthetic", "max_queries": 40,
                                               "dataset_dir": "synthetic:default/eval/latin_qa"}]}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_two_concurrent_suite_runs_train_every_run_once(tmp_path):
    suite = _suite(tmp_path / "claims.yaml")
    root = tmp_path / "results"
    env = {**os.environ, "HARNESS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "harness", "run", str(suite), "--results-root", str(root), "--no-progress"]
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    logs = "".join(err for _, err in outs)
    trained = re.findall(r"harness\.method\.stages: training (\S+) in (\S+)", logs)
    runs = sorted(p for p in (root / "cells" / "train").iterdir() if p.is_dir())
    assert len(runs) == 3                                           # two cells + their shared reference
    assert sorted(Path(d) for _, d in trained) == runs              # each trained exactly once, by one process
    assert sorted(m for m, _ in trained) == ["tdro-weights", "tdro-weights", "uniform"]
    evaluated = re.findall(r"stored latin_qa in (\S+)", logs)
    assert len(evaluated) == len(set(evaluated)) == 3               # each eval cell evaluated once
    assert "waiting for" in logs                                    # the runs did meet on a claim
    table = (root / "suites" / "claims" / "tiny" / "table.md").read_text()
    first_rows = [line for line in table.splitlines() if line.startswith("|")]
    for out, _ in outs:                                             # both print the same, finished table
        assert [line for line in out.splitlines() if line.startswith("|")] == first_rows
    assert len(first_rows) == 5
