"""A thread setting (``HARNESS_NUM_THREADS`` or ``--threads``) imports no torch: the commands that run no
torch model (``evaluate``, ``compare``, ``check``, ``table``, ``export``, BM25 ``eval``) end without torch
in ``sys.modules``, the BLAS/OpenMP variables are set before numpy loads, and where a torch model does
run (a dense eval) torch uses the thread count."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import _early_threads, main
from harness.encoders.threads import THREAD_VARIABLES

REPO = Path(__file__).resolve().parents[2]

# Runs each command (argv lists) in one process and records, after each, whether torch is loaded; a
# finder records the thread variables at numpy's first import.
CHILD = """
import json, os, sys

class NumpyWatch:
    seen = None
    def find_spec(self, name, path, target=None):
        if name == "numpy" and NumpyWatch.seen is None:
            NumpyWatch.seen = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        return None

sys.meta_path.insert(0, NumpyWatch())
from harness.cli import main
commands, report = json.loads(sys.argv[1]), sys.argv[2]
rows = []
for argv in commands:
    rows.append({"argv": argv, "rc": main(argv), "torch": "torch" in sys.modules})
    if "torch" in sys.modules:
        break
with open(report, "w") as handle:
    json.dump({"rows": rows, "env_at_numpy": NumpyWatch.seen}, handle)
"""


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES and k != "HARNESS_NUM_THREADS"}
    return {**env, **extra}


def run_child(code: str, args: list[str], env: dict[str, str], timeout: int = 600) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture
def inputs(tmp_path, dataset):
    """Qrels, two runs and the folders the commands read and write."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d4 1\nq2 0 d2 1\nq3 0 d3 2\nq3 0 d5 1\n")
    run_a, run_b = tmp_path / "a.trec", tmp_path / "b.trec"
    run_a.write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq1 Q0 d4 3 1.0 a\nq2 Q0 d2 1 5.0 a\n"
                     "q2 Q0 d3 2 1.0 a\nq3 Q0 d5 1 2.0 a\nq3 Q0 d3 2 1.5 a\n")
    run_b.write_text("q1 Q0 d4 1 3.0 b\nq1 Q0 d1 2 2.0 b\nq2 Q0 d1 1 5.0 b\nq2 Q0 d2 2 1.0 b\n"
                     "q3 Q0 d3 1 2.0 b\nq3 Q0 d5 2 1.5 b\n")
    return {"dataset": dataset, "qrels": qrels, "a": run_a, "b": run_b, "results": tmp_path / "results",
            "expected": tmp_path / "expected", "cache": tmp_path / "cache", "report": tmp_path / "report.json"}


def torch_free_commands(paths: dict[str, Path]) -> list[list[str]]:
    result = paths["results"] / "mini" / "e1"         # where `check --reuse` looks for entry mini/e1
    return [
        ["eval", "--model", "bm25", "--dataset-dir", str(paths["dataset"]), "--out", str(result),
         "--cache-dir", str(paths["cache"]), "--format", "json"],
        ["evaluate", "--qrels", str(paths["qrels"]), "--run", str(paths["a"])],
        ["compare", "--qrels", str(paths["qrels"]), "--run", str(paths["a"]), "--run", str(paths["b"]),
         "-m", "ndcg@10", "-m", "map"],
        ["export", "results", str(paths["results"])],
        ["check", "record", "--suite", "mini", "--id", "e1", "--result", str(result), "--command",
         "eval --model bm25 --dataset-dir {shared}/mini --out {out}", "--expected-dir", str(paths["expected"])],
        ["check", "--suite", "mini", "--reuse", "--results-root", str(paths["results"]),
         "--expected-dir", str(paths["expected"])],
        ["table", "paper", "tdro"],
    ]


@pytest.mark.parametrize("how", ["environment", "option"])
def test_commands_without_a_torch_model_never_import_torch(inputs, how):
    commands = torch_free_commands(inputs)
    if how == "option":
        commands = [["--threads", "2", *argv] for argv in commands]
        env = child_env()
    else:
        env = child_env(HARNESS_NUM_THREADS="2")
    run_child(CHILD, [json.dumps(commands), str(inputs["report"])], env)
    report = json.loads(inputs["report"].read_text())
    rows = report["rows"]
    assert [row["argv"] for row in rows] == commands, f"torch was imported by {rows[-1]['argv']}"
    assert [row["rc"] for row in rows] == [0] * len(commands)
    assert not any(row["torch"] for row in rows)
    # The BLAS/OpenMP variables were set before numpy loaded (its OpenBLAS reads them once, then).
    assert report["env_at_numpy"] == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    assert (inputs["results"] / "mini" / "e1" / "run.trec.gz").is_file()
    assert "e1" in (inputs["expected"] / "mini.yaml").read_text()


DENSE = """
import json, sys
from harness.cli import main
rc = main(json.loads(sys.argv[1]))
import torch
print(json.dumps({"rc": rc, "threads": torch.get_num_threads()}))
"""


@pytest.mark.parametrize("how", ["environment", "option"])
def test_a_dense_eval_runs_torch_on_the_set_threads(inputs, how):
    threads = (os.cpu_count() or 1) + 1                 # never torch's own default (at most the cores)
    argv = ["eval", "--model", "synthetic:default/tiny-bert", "--dataset-dir", str(inputs["dataset"]),
            "--out", str(inputs["results"] / "dense"), "--cache-dir", str(inputs["cache"]), "--format", "json"]
    if how == "option":
        argv, env = ["--threads", str(threads), *argv], child_env()
    else:
        env = child_env(HARNESS_NUM_THREADS=str(threads))
    last = run_child(DENSE, [json.dumps(argv)], env).strip().splitlines()[-1]
    assert json.loads(last) == {"rc": 0, "threads": threads}


HOOK = """
import sys
from harness.encoders.threads import apply_threads, pending_torch_threads
apply_threads(3)
apply_threads(5)                                   # the last setting wins
assert "torch" not in sys.modules and pending_torch_threads() == 5
import torch
assert torch.get_num_threads() == 5, torch.get_num_threads()
assert pending_torch_threads() is None             # one-shot: the hook is gone
apply_threads(1)                                   # torch loaded: applied at once
assert torch.get_num_threads() == 1 and pending_torch_threads() is None
print("ok")
"""


def test_torch_threads_are_set_on_first_import_and_at_once_after():
    assert run_child(HOOK, [], child_env()).strip() == "ok"


@pytest.mark.parametrize("argv, expected", [
    (["--threads", "3", "evaluate"], 3),
    (["-v", "--threads=4", "evaluate"], 4),
    (["--thr", "5", "compare"], 5),                      # argparse's unique prefix
    (["evaluate", "--threads", "3"], None),             # after the command: not the global option
    (["--threads", "zero", "evaluate"], None),          # left for the parser to report
    (["evaluate"], None),
])
def test_thread_option_read_before_the_parser(monkeypatch, argv, expected):
    monkeypatch.delenv("HARNESS_NUM_THREADS", raising=False)
    assert _early_threads(argv) == expected


def test_a_bad_thread_setting_is_a_clear_error(monkeypatch, inputs, capsys):
    monkeypatch.setenv("HARNESS_NUM_THREADS", "0")
    assert main(["evaluate", "--qrels", str(inputs["qrels"]), "--run", str(inputs["a"])]) == 2
    assert "HARNESS_NUM_THREADS" in capsys.readouterr().err
