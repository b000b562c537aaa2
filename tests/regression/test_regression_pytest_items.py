"""``pytest -m regression`` items from an expectation store, and a real command end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from regression_helpers import CARD, RECORDED, make_result, write_expectations

from harness.cli import main
from harness.regression import load_expectations

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run_pytest(env_extra: dict[str, str]) -> str:
    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/regression/test_expected_scores.py", "-m",
                           "regression", "-q", "-p", "no:cacheprovider", "-W", "always"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc.stdout + proc.stderr


def test_regression_items_fail_on_fail_and_unaccepted_improvement(tmp_path):
    root = tmp_path / "results"
    make_result(root / "beir" / "ok", **{"ndcg@10": 0.679})
    make_result(root / "beir" / "fail", **{"ndcg@10": 0.670})
    make_result(root / "beir" / "better", **{"ndcg@10": 0.690})
    write_expectations(tmp_path / "expected", "beir", [
        {"id": "ok", "metrics": {"ndcg@10": 0.679}, "card_fingerprint": CARD.fingerprint()},
        {"id": "fail", "metrics": {"ndcg@10": 0.679}},
        {"id": "better", "metrics": {"ndcg@10": 0.679}},
    ])
    env = {"HARNESS_EXPECTED_DIR": str(tmp_path / "expected"), "HARNESS_RESULTS_ROOT": str(root),
           "HARNESS_CHECK_REUSE": "1"}
    out = _run_pytest(env)
    assert "2 failed, 1 passed" in out, out
    assert "test_expected_score[beir/fail]" in out and "test_expected_score[beir/better]" in out
    assert "FAIL     beir/fail" in out and "IMPROVED beir/better" in out
    accepted = _run_pytest({**env, "HARNESS_ACCEPT_IMPROVED": "1"})
    assert "1 failed, 2 passed" in accepted and "improved beyond tolerance (accepted)" in accepted, accepted


def _tiny_beir(folder: Path) -> None:
    """A small real-text BEIR folder (sentences about fruit) for a fast BM25 run."""
    words = "apple banana cherry date elder fig grape honeydew kiwi lemon mango nectarine olive papaya".split()
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for i in range(40):
            text = " ".join(words[(i * j + i) % len(words)] for j in range(1, 9))
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as f:
        for i in range(8):
            f.write(json.dumps({"_id": f"q{i}", "text": f"{words[i]} {words[(i + 5) % len(words)]}"}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(8):
            f.write(f"q{i}\td{i + 1}\t1\nq{i}\td{(3 * i + 7) % 40}\t1\n")


@pytest.mark.slow
def test_check_runs_a_real_command_then_record_makes_it_ok(tmp_path, capsys):
    _tiny_beir(tmp_path / "data" / "fruit")
    command = ["eval", "--model", "bm25", "--dataset-dir", "{shared}/fruit", "--out", "{out}", "-m", "ndcg@10"]
    expected = tmp_path / "expected"
    expected.mkdir()
    (expected / "tiny.yaml").write_text(yaml.safe_dump(
        {"version": 1, "entries": [{"id": "bm25", "command": command, "metrics": {"ndcg@10": 0.99},
                                    "recorded": RECORDED}]}))
    args = ["check", "--expected-dir", str(expected), "--results-root", str(tmp_path / "results"),
            "--shared", str(tmp_path / "data")]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAIL     tiny/bm25  (ran " in out
    result_dir = tmp_path / "results" / "tiny" / "bm25"
    actual = json.loads((result_dir / "metrics.json").read_text())["ndcg@10"]
    assert main(["check", "record", "--suite", "tiny", "--id", "bm25", "--result", str(result_dir), "--replace",
                 "--expected-dir", str(expected)]) == 0
    (entry,) = load_expectations(expected / "tiny.yaml")
    assert entry.metrics == {"ndcg@10": round(actual, 4)} and entry.command == command
    assert main(args + ["--reuse"]) == 0
    assert "OK       tiny/bm25  (reused" in capsys.readouterr().out
    # Re-running the command reproduces the recorded number exactly.
    assert main(args) == 0
    assert "OK       tiny/bm25  (ran" in capsys.readouterr().out
