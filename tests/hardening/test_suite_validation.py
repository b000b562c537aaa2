"""`harness run` validates the whole suite plan before any compute.

Every error class gets a real suite file in tmp_path (the `mini` fixture with one thing
broken) and goes through the command line: exit status 2, a message naming the file,
line, key and problem, no traceback, and nothing written under the results root.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.cli import main

REPO = Path(__file__).resolve().parents[2]
MINI = REPO / "tests" / "ablation" / "fixtures" / "mini.yaml"


def _suite(tmp_path: Path, edit=None, text: str | None = None) -> Path:
    """The mini suite with ``edit(raw)`` applied (or ``text`` verbatim), written to tmp_path."""
    path = tmp_path / "suite.yaml"
    if text is None:
        raw = yaml.safe_load(MINI.read_text())
        if edit is not None:
            edit(raw)
        text = yaml.safe_dump(raw, sort_keys=False)
    path.write_text(text)
    return path


def _refused(tmp_path: Path, suite: Path | None, capsys, *extra: str, command: str = "run") -> str:
    """Run ``harness run SUITE`` (or ``harness COMMAND EXTRA...``); assert exit 2, one clean error and an
    untouched results root."""
    root = tmp_path / "results"
    argv = [command, str(suite), "--results-root", str(root), "--no-progress", *extra] if command == "run" \
        else [command, *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith(f"harness {command}: error: ")
    assert not root.exists(), "something was written before the plan was validated"
    return err


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_unknown_metric(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r.update(metrics=["ndcg@10", "ndgc@10"]))
    err = _refused(tmp_path, suite, capsys)
    assert f"{suite}:" in err and "metrics[1]" in err and "unknown metric 'ndgc@10'" in err


def test_unknown_benchmark_suite(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["scales"]["tiny"]["benchmarks"][1].update(suite="synthetik"))
    err = _refused(tmp_path, suite, capsys)
    assert "scales.tiny.benchmarks[1].suite" in err and "unknown benchmark suite 'synthetik'" in err
    assert "did you mean 'synthetic'?" in err


def test_missing_dataset_folder(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "scifact"
    suite = _suite(tmp_path, lambda r: r["scales"]["tiny"]["benchmarks"][0].update(suite="beir",
                                                                                    dataset_dir=str(missing)))
    err = _refused(tmp_path, suite, capsys)
    assert "scales.tiny.benchmarks[0].dataset_dir" in err and f"{missing} does not exist" in err


def test_missing_model(tmp_path, capsys):
    missing = tmp_path / "models" / "my-bert"
    suite = _suite(tmp_path, lambda r: r["scales"]["tiny"].update(model=str(missing)))
    err = _refused(tmp_path, suite, capsys)
    assert "scales.tiny.model" in err and str(missing) in err and "does not exist" in err


def test_unsupported_statistics_test(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["stats"].update(test="wilcoxon"))
    err = _refused(tmp_path, suite, capsys)
    assert f"{suite}:{_line_of(suite, 'wilcoxon')}" in err
    assert "stats.test: test 'wilcoxon' is not supported; supported: ttest, randomization, bootstrap" in err


def test_alpha_must_be_a_probability(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["stats"].update(alpha="high"))
    err = _refused(tmp_path, suite, capsys)
    assert "stats.alpha: expected a number in (0, 1)" in err and "'high'" in err


def test_unknown_top_level_key_suggests_the_known_one(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r.update(metric=r.pop("metrics")))
    err = _refused(tmp_path, suite, capsys)
    assert f"{suite}:{_line_of(suite, 'metric:')}" in err
    assert "unknown top-level key 'metric' (did you mean 'metrics'?)" in err


def test_nested_unknown_key_names_where_it_is(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["scales"]["tiny"]["train"].update(warmup=3))
    err = _refused(tmp_path, suite, capsys)
    assert "scales.tiny.train: unknown key 'warmup' (did you mean 'warmup_steps'?)" in err


def test_steps_of_the_wrong_type(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["scales"]["tiny"]["train"].update(steps="ten"))
    err = _refused(tmp_path, suite, capsys)
    assert "scales.tiny.train.steps: expected an integer, got 'ten'" in err


def test_every_problem_is_reported_at_once(tmp_path, capsys):
    def edit(raw):
        raw["stats"]["test"] = "wilcoxon"
        raw["variants"][1]["options"] = {"temprature": 0.1}
        raw["scales"]["tiny"]["train"]["steps"] = "ten"
        raw["scales"]["tiny"]["benchmarks"][0]["suite"] = "nope"

    err = _refused(tmp_path, _suite(tmp_path, edit), capsys)
    assert "4 problems in the suite (nothing was run)" in err
    assert err.count("\n  - line ") == 4
    assert "method 'uniform' has no option 'temprature'" in err


def test_alias_bomb_is_refused(tmp_path, capsys):
    levels = ["a: &a [x,x,x,x,x,x,x,x,x]"] + [
        f"{b}: &{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdef", "bcdefg")]
    text = "\n".join(levels) + "\n"
    assert len(text.encode()) <= 260                 # a "billion laughs" (9^7 items) in ~250 bytes
    started = time.perf_counter()
    err = _refused(tmp_path, _suite(tmp_path, text=text), capsys)
    assert "YAML aliases expand to" in err and "limit 100,000" in err
    assert time.perf_counter() - started < 5


def test_train_set_is_checked_against_the_spec_types(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"query": "q", "pos": ["p"], "neg": ["n"]}) + "\n")
    out = tmp_path / "results"
    base = ["--data", str(data), "--out", str(out), "--scale", "tiny"]
    err = _refused(tmp_path, None, capsys, *base, "--set", "alpha=high", command="train")
    assert "unknown option(s) alpha" in err
    err = _refused(tmp_path, None, capsys, *base, "--set", "temperature=high", command="train")
    assert "temperature: expected a number, got 'high'" in err
    err = _refused(tmp_path, None, capsys, *base, "--set", "lora={alpha: high}", command="train")
    assert "lora.alpha: expected an integer, got 'high'" in err


def test_resolved_suite_has_only_known_keys(tmp_path):
    """Extension fields (``x-...``: anchors) are allowed at the top level and left out of the suite."""
    from harness.ablation import load_suite
    from harness.ablation.spec import TOP_KEYS

    text = MINI.read_text().replace("variants:", "x-train: &tr {in_batch_negatives: false}\nvariants:", 1)
    suite = load_suite(_suite(tmp_path, text=text))
    assert set(suite.raw) <= set(TOP_KEYS) and "x-train" not in suite.raw


# ----------------------------------------------------------------------------- content-only keys

def _cli(*args: str, cache: Path, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARNESS_NUM_THREADS": "1", "HARNESS_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_quickstart_keys_depend_on_content_only(tmp_path):
    """Two results roots and two cache dirs (--cache-dir and HARNESS_CACHE): the same cells, keys and
    summary; then a dry run of the finished suite reports every cell done under its real key."""
    runs = {}
    for name in ("one", "two"):
        root, cache = tmp_path / name / "results", tmp_path / name / "cache"
        proc = _cli("run", "quickstart", "--results-root", str(root), "--cache-dir", str(tmp_path / name / "emb"),
                    "--no-progress", cache=cache)
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((root / "suites" / "quickstart" / "tiny" / "summary.json").read_text())
        runs[name] = (root, cache, summary)
    (root1, cache1, s1), (root2, _, s2) = runs["one"], runs["two"]
    assert [c["key"] for c in s1["cells"]] == [c["key"] for c in s2["cells"]]
    assert sorted(p.name for p in (root1 / "cells" / "train").iterdir()) == \
        sorted(p.name for p in (root2 / "cells" / "train").iterdir())
    assert sorted(p.name for p in (root1 / "cells" / "eval").iterdir()) == \
        sorted(p.name for p in (root2 / "cells" / "eval").iterdir())
    assert s1 == s2                                           # no timings in it, and no path of either root
    resolved = json.loads((root1 / "suites" / "quickstart" / "tiny" / "suite.resolved.json").read_text())
    assert str(tmp_path) not in json.dumps(resolved)          # no cache or results path in the provenance
    dry = _cli("run", "quickstart", "--dry-run", "--results-root", str(root1), cache=cache1)
    assert dry.returncode == 0, dry.stderr
    for cell in s1["cells"]:
        line = next(ln for ln in dry.stdout.splitlines() if ln.strip().startswith(cell["variant"] + " "))
        assert f"key={cell['key']} [done]" in line, dry.stdout
    assert "evaluations: 12 of 12 stored" in dry.stdout
