"""A package from outside the repository adds a method and a benchmark suite, and a suite file uses them.

The package is written into a temporary folder with a ``.dist-info`` holding its entry points, the
way ``pip install`` leaves one; putting the folder on ``PYTHONPATH`` is all the installation there is.
The suite file names the method by its entry point and the benchmark both by its entry point and by
a ``package.module:Class`` reference.  ``harness run`` trains and evaluates at tiny scale.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

METHOD_MODULE = '''
from methods.uniform import Uniform


class Hotter(Uniform):
    """Uniform training at temperature 0.5 instead of 0.05."""

    description = "uniform baseline at a ten times higher InfoNCE temperature (an external plug-in)"
    presets = {scale: {**preset, "temperature": 0.5} for scale, preset in Uniform.presets.items()}
'''

BENCH_MODULE = '''
import hashlib
from pathlib import Path

from harness.benchmark import BenchmarkSuite, LoadedBenchmark, SuiteOption
from harness.data.beir import load_beir
from harness.metrics import evaluate
from harness.protocol import ProtocolCard


class FirstQueries(BenchmarkSuite):
    \"\"\"A BEIR-layout folder restricted to its first N judged queries, scored by MRR@10.\"\"\"

    description = "first N judged queries of a BEIR-layout folder (an external plug-in)"
    options = (SuiteOption("queries", int, 30, "how many judged queries to keep (sorted by id)"),)

    def load(self, dataset_dir, *, dataset=None, split=None, queries=30, **options):
        split = split or "test"
        ds = load_beir(dataset_dir, split)
        keep = sorted(ds.qrels.query_list())[:int(queries)]
        ds.queries, ds.qrels = ds.queries.subset(keep), ds.qrels.subset(keep)
        digest = hashlib.sha256(f"{ds.corpus.content_hash()} {ds.queries.content_hash()}".encode()).hexdigest()
        card = ProtocolCard(suite=self.name, dataset=dataset or Path(dataset_dir).name, split=split,
                            metrics=("mrr@10",), data_hash=digest[:16], extra=(("queries", int(queries)),))
        return LoadedBenchmark(ds, card)

    def evaluate(self, loaded, run):
        return evaluate(loaded.dataset.qrels, run, list(loaded.card.metrics))
'''

ENTRY_POINTS = """
[retrieval_harness.methods]
hotter = hotplug.methods:Hotter

[retrieval_harness.suites]
firstq = hotplug.bench:FirstQueries
"""


def write_plugin(root: Path) -> Path:
    """The package ``hotplug`` and its distribution metadata under ``root`` (a sys.path entry)."""
    (root / "hotplug").mkdir(parents=True)
    (root / "hotplug" / "__init__.py").write_text('"""A retrieval-harness plug-in from outside."""\n')
    (root / "hotplug" / "methods.py").write_text(METHOD_MODULE)
    (root / "hotplug" / "bench.py").write_text(BENCH_MODULE)
    info = root / "hotplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hotplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _env(plugin_root: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(plugin_root), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "HARNESS_NUM_THREADS": "1"}


def _harness(args: list[str], plugin_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], check=False, cwd=REPO, env=_env(plugin_root),
                          capture_output=True, text=True, timeout=600)


def test_registries_find_the_plugin_through_entry_points(tmp_path, monkeypatch):
    from harness.benchmark import SUITES, get_suite
    from harness.method import METHODS, get_method

    root = write_plugin(tmp_path / "site")
    assert "hotter" not in METHODS.names()
    monkeypatch.syspath_prepend(str(root))   # found at the next lookup: no restart needed
    method = get_method("hotter")
    assert method.name == "hotter" and method.spec("tiny").temperature == 0.5
    assert get_method("uniform").spec("tiny").temperature == 0.05
    suite = get_suite("firstq")
    assert suite.name == "firstq" and suite.parse_options({"queries": "7"}) == {"queries": 7}
    assert dict(METHODS.describe())["hotter"].startswith("uniform baseline at a ten times higher")
    assert "firstq" in SUITES.names()
    # The same classes by reference, without any registration.
    assert type(get_method("hotplug.methods:Hotter")).__name__ == "Hotter"
    assert type(get_suite("hotplug.bench:FirstQueries")).__name__ == "FirstQueries"


def test_harness_list_shows_plugins(tmp_path):
    root = write_plugin(tmp_path / "site")
    out = _harness(["list", "methods"], root)
    assert out.returncode == 0, out.stderr
    assert any(line.split()[0] == "hotter" and "external plug-in" in line for line in out.stdout.splitlines())
    out = _harness(["list", "suites", "--options"], root)
    assert "firstq" in out.stdout and "queries=int [default 30]" in out.stdout


@pytest.mark.slow
def test_a_suite_file_runs_the_plugin_method_on_the_plugin_benchmark(tmp_path):
    root = write_plugin(tmp_path / "site")
    suite = {
        "name": "plugin-demo", "version": 1, "description": "a method and a benchmark from an external package",
        "baseline": "uniform",
        "variants": [{"id": "uniform", "method": "uniform"}, {"id": "hot", "method": "hotter"}],
        "metrics": ["mrr@10"],
        "stats": {"test": "randomization", "correction": "holm", "seed": 0},
        "scales": {"tiny": {
            "model": "synthetic:default/tiny-bert", "data": ["synthetic:default"],
            "train": {"steps": 16, "batch_size": 16, "warmup_steps": 2, "save_every": 0,
                      "use_instructions": False, "seed": 7},
            "benchmarks": [
                {"id": "by_entry_point", "suite": "firstq", "dataset_dir": "synthetic:default/eval/latin_qa",
                 "options": {"queries": 40}},
                {"id": "by_reference", "suite": "hotplug.bench:FirstQueries",
                 "dataset_dir": "synthetic:default/eval/cjk_qa", "options": {"queries": 25}},
            ]}},
    }
    path = tmp_path / "plugin-demo.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    out = _harness(["run", str(path), "--results-root", str(tmp_path / "results"), "--no-progress",
                    "--format", "json"], root)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    report = json.loads(out.stdout[out.stdout.index("{"):])
    text = json.dumps(report)
    assert "hot" in text and "by_reference" in text and "by_entry_point" in text
    values = _metric_values(report)
    assert values, text[:2000]
    assert all(0.0 <= v <= 1.0 for v in values)


def _metric_values(obj) -> list[float]:
    """Every number stored under a key naming mrr@10, anywhere in the report."""
    found: list[float] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if "mrr@10" in str(key) and isinstance(value, (int, float)):
                found.append(float(value))
            found.extend(_metric_values(value))
    elif isinstance(obj, list):
        for value in obj:
            found.extend(_metric_values(value))
    return found


def test_a_broken_reference_is_a_one_line_error(tmp_path):
    from harness.errors import ConfigError
    from harness.method import get_method

    with pytest.raises(ConfigError, match="cannot import 'no_such_pkg.mod'"):
        get_method("no_such_pkg.mod:Thing")
    with pytest.raises(ConfigError, match="is not a valid method"):
        get_method("json:dumps")
