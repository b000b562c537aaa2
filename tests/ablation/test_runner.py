"""The ablation-suite engine: parsing, cell keys, sharding, caching, and resume after a kill."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells, shard_filter
from harness.ablation.runner import SuiteRun, run_suite
from harness.ablation.spec import parse_suite
from harness.errors import ConfigError, InputError

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"
REPO = Path(__file__).resolve().parents[2]


def _raw() -> dict:
    return yaml.safe_load(MINI.read_text())


def test_suite_file_errors_name_the_file_and_problem(tmp_path):
    raw = _raw()
    raw["baseline"] = "nope"
    with pytest.raises(InputError, match="baseline 'nope' is not a variant id"):
        parse_suite(raw, tmp_path / "s.yaml")
    raw = _raw()
    raw["variants"][1]["trian"] = {}
    with pytest.raises(InputError, match=r"variants\[1\]: unknown key 'trian' \(did you mean 'train'\?\)"):
        parse_suite(raw, tmp_path / "s.yaml")
    raw = _raw()
    raw["scales"]["tiny"]["aggregates"] = {"Avg": ["latin_qa", "ghost"]}
    with pytest.raises(InputError, match="aggregate 'Avg' names unknown benchmark"):
        parse_suite(raw, tmp_path / "s.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvariants: [\n")
    with pytest.raises(InputError) as info:
        load_suite(bad)
    assert str(info.value).startswith(f"{bad}:")
    with pytest.raises(ConfigError, match="has no scale 'huge'"):
        load_suite(MINI).scale("huge")


def test_cell_keys_follow_content_not_names(tmp_path):
    suite = load_suite(MINI)
    cells = expand_train_cells(suite, "tiny")
    assert len({c.key for c in cells}) == 2
    raw = _raw()
    raw["name"] = "renamed"                                   # the suite name is not part of a cell key
    raw["variants"][1]["id"] = "other-id"
    renamed = expand_train_cells(parse_suite(raw, MINI), "tiny")
    assert [c.key for c in renamed] == [c.key for c in cells]
    raw["scales"]["tiny"]["train"]["steps"] = 17                # any training setting changes every key
    changed = expand_train_cells(parse_suite(raw, MINI), "tiny")
    assert not {c.key for c in changed} & {c.key for c in cells}


def test_shards_partition_the_cells():
    cells = expand_train_cells(load_suite(MINI), "tiny")
    shards = [shard_filter(cells, (i, 3)) for i in (1, 2, 3)]
    keys = [c.key for shard in shards for c in shard]
    assert sorted(keys) == sorted(c.key for c in cells)
    with pytest.raises(ConfigError):
        shard_filter(cells, (4, 3))


def _run_cli(root: Path, *extra: str, wait: bool = True):
    env = {**os.environ, "HARNESS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "harness", "run", str(MINI), "--results-root", str(root), "--no-progress", *extra]
    if wait:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_kill_and_resume_reproduces_the_table(tmp_path):
    """Kill the suite while the second cell trains; the rerun skips what is done and
    ends with exactly the table of an uninterrupted run; no temp files are left."""
    reference = _run_cli(tmp_path / "ref")
    assert reference.returncode == 0, reference.stderr
    proc = _run_cli(tmp_path / "killed", wait=False)
    train_root = tmp_path / "killed" / "cells" / "train"
    deadline = time.time() + 300
    while time.time() < deadline:
        done = list(train_root.glob("*/done.json"))
        in_progress = [p for p in train_root.glob("*/checkpoints/*") if not (p.parent.parent / "done.json").exists()]
        if done and in_progress:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the run never reached the second cell")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed" / "suites" / "mini" / "tiny" / "table.md").exists()
    resumed = _run_cli(tmp_path / "killed")
    assert resumed.returncode == 0, resumed.stderr
    ref_dir = tmp_path / "ref" / "suites" / "mini" / "tiny"
    got_dir = tmp_path / "killed" / "suites" / "mini" / "tiny"
    assert (got_dir / "table.md").read_text() == (ref_dir / "table.md").read_text()
    ref_summary = json.loads((ref_dir / "summary.json").read_text())
    got_summary = json.loads((got_dir / "summary.json").read_text())
    assert got_summary["scores"] == ref_summary["scores"]
    leftovers = [p for p in (tmp_path / "killed").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    assert "HN only" in resumed.stdout and "significant if adjusted p" in resumed.stdout   # the legend names the test


def test_second_run_is_fully_cached(tmp_path, caplog):
    suite = load_suite(MINI)
    first = run_suite(suite, "tiny", tmp_path, progress=False)
    assert first.complete
    runner = SuiteRun(suite, "tiny", tmp_path, progress=False)
    assert all(runner.is_trained(c) for c in runner.train_cells)
    assert all(runner.is_evaluated(c) for c in runner.eval_cells)
    started = time.perf_counter()
    again = run_suite(suite, "tiny", tmp_path, progress=False)
    assert again.markdown == first.markdown
    assert time.perf_counter() - started < 30
    # Every cell is also exposed under a stable name, with the metrics of the summary.
    from harness.store import load_result

    labels = {"uniform": "uniform", "hn-only": "HN only"}
    for variant, label in labels.items():
        for bench in ("latin_qa", "cjk_qa"):
            stored = load_result(first.report_dir / "results" / variant / bench)
            assert stored.metrics == pytest.approx(first.summary["scores"][bench][label])


def test_regression_expectation_on_a_suite_cell(tmp_path):
    """An expectation can pin a suite cell: the check re-runs the suite in a fresh {out} each time."""
    from harness.regression import OK, Expectation, check_entry, run_harness

    command = ["run", str(MINI), "--scale", "tiny", "--results-root", "{out}"]
    result = "suites/mini/tiny/results/hn-only/latin_qa"
    reference = run_suite(load_suite(MINI), "tiny", tmp_path / "reference", progress=False)
    expected = {"ndcg@10": round(reference.summary["scores"]["latin_qa"]["HN only"]["ndcg@10"], 4)}
    entry = Expectation(suite="mini", id="hn-only-latin_qa", command=command, result=result, metrics=expected,
                        recorded={"by": "test", "at": "2026-01-01T00:00:00+00:00", "commit": "0"})
    calls = []

    def counting_runner(argv):
        calls.append(argv)
        return run_harness(argv)

    for _ in range(2):  # the second check must train and evaluate again, not find cached cells
        checked = check_entry(entry, results_root=tmp_path / "checks", runner=counting_runner)
        assert checked.status == OK, checked.message
    assert len(calls) == 2


def test_only_and_partial_shards_leave_the_table_pending(tmp_path):
    outcome = run_suite(load_suite(MINI), "tiny", tmp_path, only=["hn-only"], progress=False)
    assert not outcome.complete
    assert sorted(outcome.pending) == ["uniform x cjk_qa", "uniform x latin_qa"]
    with pytest.raises(ConfigError, match="unknown variant"):
        run_suite(load_suite(MINI), "tiny", tmp_path, only=["ghost"], progress=False)


def test_pytest_markers_select_suite_cells():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "ablation and quickstart",
                          "tests/ablation/test_suites.py"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert "tests/ablation/test_suites.py::test_cell[quickstart-tiny-uniform]" in ids
    assert "tests/ablation/test_suites.py::test_table[quickstart-tiny]" in ids
    assert all("quickstart" in i for i in ids)
