"""Suite grids as units (harness.ablation.executors): ``--emit-cells`` JSON, ``harness run-cell``,
``--executor local|submitit|ray``, and a killed ``run-cell`` worker's claim recovered by the next one.

The end-to-end tests run real processes on the tiny synthetic world and compare tables with a plain
``harness run`` of the same suite on another results root (training is deterministic on CPU)."""
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
from optional_extras import require_extra
from test_claims import _suite

from harness.ablation.executors import KINDS, build_units, waves
from harness.ablation.runner import SuiteRun
from harness.ablation.validate import load_validated
from harness.cli import main

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MINI = HERE / "fixtures" / "mini.yaml"
ENV = {**os.environ, "HARNESS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _harness(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def _rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


def _emit(capsys, *args: str) -> dict:
    assert main(["run", *args, "--emit-cells"]) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------------- the plan (no training)
def test_emit_cells_lists_units_dependencies_waves_and_commands(tmp_path, capsys):
    suite = _suite(tmp_path / "claims.yaml")   # base (none) + two tDRO stage-1 cells sharing a reference run
    root = tmp_path / "results"
    plan = _emit(capsys, str(suite), "--results-root", str(root))
    assert plan["schema"] == "harness.cells/1" and plan["suite"] == "claims" and plan["scale"] == "tiny"
    assert plan["results_root"] == str(root.resolve())
    cells = plan["cells"]
    for c in cells:
        assert set(c) == {"key", "kind", "label", "method", "depends_on", "wave", "gpu_hours", "status",
                          "command", "shell"}
        assert c["kind"] in KINDS and c["status"] == "pending" and len(c["key"]) == 16
        assert c["command"][1:5] == ["-m", "harness", "run-cell", c["key"]]
        assert c["command"][c["command"].index("--suite") + 1] == str(suite.resolve())
    kinds = [c["kind"] for c in cells]
    assert kinds.count("dependency") == 1           # the shared reference run: one unit, not one per cell
    assert kinds.count("train") == 2 and kinds.count("eval") == 3
    by_key = {c["key"]: c for c in cells}
    dep = next(c for c in cells if c["kind"] == "dependency")
    assert dep["method"] == "uniform" and dep["label"].endswith("/reference (uniform)") and dep["wave"] == 0
    for c in cells:
        if c["kind"] == "train":
            assert c["depends_on"] == [dep["key"]] and c["wave"] == 1
        if c["kind"] == "eval":
            assert all(by_key[k]["kind"] == "train" for k in c["depends_on"])
            # the untrained baseline's evaluation needs nothing and goes in the first wave
            assert c["wave"] == (0 if c["label"].startswith("base ") else 2)
        # every unit comes after what it needs: the list is a runnable order
        assert all(list(by_key).index(k) < list(by_key).index(c["key"]) for k in c["depends_on"])
    assert [sorted(w) for w in plan["waves"]] == [sorted(c["key"] for c in cells if c["wave"] == i)
                                                  for i in range(3)]
    assert plan["report_command"][1:4] == ["-m", "harness", "run"]
    # the same keys as the dry run prints (one planner)
    assert main(["run", str(suite), "--results-root", str(root), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    for c in cells:
        if c["kind"] != "eval":
            assert f"key={c['key']}" in dry


def test_waves_and_selection_keep_dependencies(tmp_path):
    suite = load_validated(_suite(tmp_path / "claims.yaml"), "tiny")
    runner = SuiteRun(suite, "tiny", tmp_path / "r", progress=False)
    only_b = [c for c in runner.train_cells if c.variant.id == "weights-b"]
    units = build_units(runner, only_b, evaluations=False)
    assert [u.kind for u in units] == ["dependency", "train"]     # --only keeps what the cell needs
    assert [[u.kind for u in w] for w in waves(units)] == [["dependency"], ["train"]]


def test_bad_keys_executors_and_missing_ray_are_refused(tmp_path, capsys, monkeypatch):
    suite = _suite(tmp_path / "claims.yaml")
    assert main(["run-cell", "0123456789abcdef", "--suite", str(suite), "--results-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no cell or dependency with key '0123456789abcdef' in suite 'claims' at scale 'tiny'" in err
    assert "--emit-cells lists them" in err
    with pytest.raises(SystemExit):
        main(["run", str(suite), "--executor", "slurm"])
    assert "invalid choice: 'slurm'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)                # `import ray` fails as if it were not installed
    assert main(["run", str(suite), "--results-root", str(tmp_path), "--executor", "ray"]) == 2
    err = capsys.readouterr().err
    assert "--executor ray needs the package 'ray': pip install 'retrieval-harness[cluster]'" in err
    assert "scripts/setup.sh --dev" in err
    assert not (tmp_path / "cells").exists()                     # refused before any work


# ---------------------------------------------------------------------- end to end (real training)
@pytest.fixture(scope="module")
def reference_table(tmp_path_factory) -> str:
    """``harness run mini`` in one process: the table every other way of running the grid must give."""
    root = tmp_path_factory.mktemp("reference")
    done = _harness("run", str(MINI), "--results-root", str(root), "--no-progress")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_submitit_local_fallback_with_two_workers_gives_the_same_table(tmp_path, reference_table):
    require_extra("submitit")
    done = _harness("run", str(MINI), "--results-root", str(tmp_path), "--no-progress", "--executor", "submitit",
                    "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert _rows(done.stdout) == _rows(reference_table) and len(_rows(done.stdout)) == 4
    assert re.findall(r"wave (\d): (\d) unit", done.stderr) == [("1", "2"), ("2", "4")]
    jobs = re.findall(r"(train|eval) \S+(?: x \S+)?: local job (\d+)", done.stderr)
    assert len(jobs) == 6 and len({j for _, j in jobs}) == 6       # one local job per unit
    folder = tmp_path / "submitit" / "mini" / "tiny"
    assert len(list(folder.glob("*_result.pkl"))) == 6
    # each job logs like `harness run-cell` (into its submitit log)
    logs = "".join(p.read_text() for p in folder.glob("*_log.err"))
    assert len(re.findall(r"INFO harness\.ablation: trained \S+ in", logs)) == 2


@pytest.mark.slow
def test_emitted_commands_in_order_reproduce_harness_run(tmp_path, reference_table, capsys):
    plan = _emit(capsys, str(MINI), "--results-root", str(tmp_path))
    logs = []
    for cell in plan["cells"]:
        done = subprocess.run(cell["command"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        logs.append(done.stderr)
    trained = re.findall(r"harness\.method\.stages: training (\S+) in (\S+)", "".join(logs))
    assert sorted(Path(d).name for _, d in trained) == sorted(c["key"] for c in plan["cells"]
                                                              if c["kind"] == "train")
    final = subprocess.run(plan["report_command"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stderr
    assert "training" not in final.stderr and "evaluating" not in final.stderr    # nothing left to compute
    assert _rows(final.stdout) == _rows(reference_table)
    again = _emit(capsys, str(MINI), "--results-root", str(tmp_path))
    assert {c["status"] for c in again["cells"]} == {"done"}


@pytest.mark.slow
def test_local_executor_with_two_workers_gives_the_same_table(tmp_path, reference_table):
    done = _harness("run", str(MINI), "--results-root", str(tmp_path), "--no-progress", "--executor", "local",
                    "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert _rows(done.stdout) == _rows(reference_table)


@pytest.mark.slow
def test_a_killed_run_cell_worker_is_recovered_by_the_next(tmp_path, reference_table, capsys):
    """SIGKILL a ``run-cell`` worker mid-training: the next worker takes its claim (the kernel dropped the
    lock), resumes from the last checkpoint, and the suite's table is the uninterrupted one."""
    plan = _emit(capsys, str(MINI), "--results-root", str(tmp_path))
    first = next(c for c in plan["cells"] if c["kind"] == "train")
    run_dir = tmp_path / "cells" / "train" / first["key"]
    worker = subprocess.Popen(first["command"], cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    deadline = time.time() + 600
    while not list((run_dir / "checkpoints").glob("step-*")):
        assert time.time() < deadline and worker.poll() is None, "the worker never saved a checkpoint"
        time.sleep(0.05)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    assert not (run_dir / "done.json").exists()
    assert json.loads((tmp_path / "cells" / "train" / f"{first['key']}.claim").read_text())["pid"] == worker.pid
    done = subprocess.run(first["command"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert f"left by pid {worker.pid} on" in done.stderr                  # the dead worker's claim, recovered
    assert re.search(r"resumed .* \(step [1-9]\d*\)", done.stderr)        # from its checkpoint
    final = _harness("run", str(MINI), "--results-root", str(tmp_path), "--no-progress")
    assert final.returncode == 0, final.stderr
    assert _rows(final.stdout) == _rows(reference_table)


@pytest.mark.slow
def test_quickstart_with_submitit_gives_the_same_table_as_harness_run(tmp_path):
    """The acceptance case of issue 16: the README's quickstart suite through submitit's local fallback with
    two workers prints the table of a plain ``harness run quickstart``."""
    require_extra("submitit")
    plain = _harness("run", "quickstart", "--results-root", str(tmp_path / "plain"), "--no-progress", timeout=3600)
    assert plain.returncode == 0, plain.stderr
    grid = _harness("run", "quickstart", "--results-root", str(tmp_path / "grid"), "--no-progress",
                    "--executor", "submitit", "--workers", "2", timeout=3600)
    assert grid.returncode == 0, grid.stderr
    assert _rows(grid.stdout) == _rows(plain.stdout) and len(_rows(grid.stdout)) == 5   # header, rule, 3 systems
    assert re.findall(r"wave (\d): (\d+) unit", grid.stderr) == [("1", "6"), ("2", "8")]


@pytest.mark.slow
def test_run_cell_trains_a_dependency_once_and_cells_reuse_it(tmp_path, capsys):
    """tDRO cells sharing a reference run: the dependency unit trains it (by key prefix), the cells reuse it."""
    suite = _suite(tmp_path / "claims.yaml")
    root = tmp_path / "results"
    plan = _emit(capsys, str(suite), "--results-root", str(root))
    dep = next(c for c in plan["cells"] if c["kind"] == "dependency")
    done = _harness("run-cell", dep["key"][:10], "--suite", str(suite), "--results-root", str(root), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert re.findall(r"harness\.method\.stages: training (\S+) in (\S+)", done.stderr) == [
        ("uniform", str(root.resolve() / "cells" / "train" / dep["key"]))]
    logs = ""
    for cell in plan["cells"]:
        if cell["kind"] != "dependency":
            run = subprocess.run(cell["command"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
            assert run.returncode == 0, run.stderr
            logs += run.stderr
    trained = re.findall(r"harness\.method\.stages: training (\S+) in \S+/(\w+)$", logs, re.MULTILINE)
    assert sorted(trained) == sorted(("tdro-weights", c["key"]) for c in plan["cells"] if c["kind"] == "train")
    assert {c["status"] for c in _emit(capsys, str(suite), "--results-root", str(root))["cells"]} == {"done"}
