"""``--executor ray`` for real: a local Ray instance runs the suite's units wave by wave.

The first test drives :func:`run_grid` with a trivial job (it records when each unit ran, in which process)
on the real units of a suite with a shared dependency, so what is checked is Ray's scheduling: dependencies
finish before the units that need them, at most ``workers`` at a time, one fresh process per unit, the job's
log reaches the driver, a failure names its unit and the instance is shut down.  The slow test runs the
README's quickstart suite through Ray and compares its table byte for byte with a plain ``harness run``.

Both are ``slow``: Ray's start-up alone took 9.5 s on the two shared cores at load 10, and each unit starts a
fresh worker process (the first test: 25 s at load 6, 98 s at load 15).  The default run keeps the refusal without Ray
(tests/ablation/test_executors.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optional_extras import require_extra
from test_claims import _suite

from harness.ablation.executors import GridOptions, _require_ray, build_units, run_grid, waves
from harness.ablation.runner import SuiteRun
from harness.ablation.validate import load_validated
from harness.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray():
    try:
        return _require_ray()
    except ConfigError:
        require_extra("ray")      # skips, or fails under HARNESS_REQUIRE_EXTRAS=1, when ray is missing
        raise


@pytest.mark.slow
def test_units_run_through_ray_in_dependency_order(tmp_path, ray, capfd):
    suite = load_validated(_suite(tmp_path / "claims.yaml"), "tiny")
    root = tmp_path / "results"
    runner = SuiteRun(suite, "tiny", root, progress=False)
    units = build_units(runner)
    grouped = waves(units)
    assert [sorted(u.kind for u in w) for w in grouped] == [["dependency", "eval"], ["train", "train"],
                                                            ["eval", "eval"]]
    failing = grouped[2][1]
    failing_key, log = failing.key, str(tmp_path / "ran.jsonl")   # what the job captures: plain values

    def job(suite_arg: str, scale: str, results_root: str, cache_dir: str | None, key: str) -> str:
        # defined here so that Ray ships it by value: the workers need not import this test module
        start = time.time()
        before = os.environ.get("TRIVIAL_JOB_RAN")           # set if this process had run a unit already
        os.environ["TRIVIAL_JOB_RAN"] = key
        print(f"trivial job ran {key}", file=sys.stderr, flush=True)
        time.sleep(0.4)
        with open(log, "a") as f:
            f.write(json.dumps({"key": key, "start": start, "end": time.time(), "pid": os.getpid(), "before": before,
                                "args": [suite_arg, scale, results_root, cache_dir]}) + "\n")
        if key == failing_key:
            raise RuntimeError(f"asked to fail {key}")
        return key

    options = GridOptions("claims-suite", "tiny", root, None, workers=2, job=job)
    messages: list[str] = []
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        run_grid(runner, units, "ray", options, progress=messages.append)
    elapsed = time.perf_counter() - started
    assert str(err.value) == (f"1 unit(s) failed in wave 3: {failing.label} (eval {failing.key[:12]}): "
                              f"RuntimeError: asked to fail {failing.key}")
    assert not ray.is_initialized()                         # the local instance it started is shut down
    assert messages[0] == "wave 1: 2 unit(s) on ray (dependency, eval)"
    assert messages[1] == "ray: a local Ray instance (2 CPU(s), 0 GPU(s))"
    assert [m.split(" done in ")[0] for m in messages if " done in " in m] == ["wave 1", "wave 2"]

    ran = {r["key"]: r for r in map(json.loads, Path(log).read_text().splitlines())}
    assert sorted(ran) == sorted(u.key for u in units)      # every unit once (the failing one too)
    assert {tuple(r["args"]) for r in ran.values()} == {("claims-suite", "tiny", str(root), None)}
    assert [r["before"] for r in ran.values()] == [None] * len(units)    # a fresh worker process per unit
    assert os.getpid() not in {r["pid"] for r in ran.values()}
    for u in units:
        for need in u.depends_on:                           # nothing starts before what it needs has ended
            assert ran[u.key]["start"] >= ran[need]["end"], (u.label, need)
    events = sorted([(r["start"], 1) for r in ran.values()] + [(r["end"], -1) for r in ran.values()])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 2                                        # --workers 2
    out = capfd.readouterr()
    for u in units:                                         # every job's stderr reached the driver's
        assert f"trivial job ran {u.key}" in out.err
    print(f"ray: 7 trivial units in {elapsed:.1f}s including start-up and shutdown", file=sys.stderr)


@pytest.mark.slow
def test_quickstart_through_ray_gives_the_table_of_harness_run(tmp_path, ray):
    """The acceptance case of issue 16 on Ray: the quickstart suite with two workers on a local instance
    writes the same table.md, byte for byte, as a plain ``harness run quickstart``."""
    env = {**os.environ, "HARNESS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)

    def harness(root: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", "run", "quickstart", "--results-root", str(root),
                               "--cache-dir", str(root / "cache"), "--no-progress", *extra], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=3600)

    plain = harness(tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    grid = harness(tmp_path / "ray", "--executor", "ray", "--workers", "2")
    assert grid.returncode == 0, grid.stderr
    table = Path("suites", "quickstart", "tiny", "table.md")
    assert (tmp_path / "ray" / table).read_bytes() == (tmp_path / "plain" / table).read_bytes()
    assert grid.stdout == plain.stdout
    assert "ray: a local Ray instance (2 CPU(s), 0 GPU(s))" in grid.stderr
    assert re.findall(r"^wave (\d): (\d+) unit", grid.stderr, re.MULTILINE) == [("1", "6"), ("2", "8")]
    # the workers' log lines reached the user: each of the 12 evaluations stored by a worker
    stored = re.findall(r"^\(worker_job pid=\d+\) .* harness\.pipeline: stored (\w+) in", grid.stderr, re.MULTILINE)
    assert len(stored) == 12 and set(stored) == {"latin_qa", "latin_synonyms", "cyrillic_news", "cjk_qa"}
