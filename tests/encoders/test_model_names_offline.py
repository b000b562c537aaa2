"""Model names are resolved offline first: aliases, known checkpoints and local folders, then a did-you-mean,
then at most one quick hub request (none in offline mode); no cache folder is left by a model that never loaded.

The CLI cases run ``harness eval`` in a subprocess with and without ``HF_HUB_OFFLINE``: before, a typo'd name
(``minlm``) retried the hub for about a minute, logged "encoding 1 of 1 shard(s)", ended with advice about a
folder that does not exist and left an empty embedding-cache entry.  The last test runs pytest itself without
the pytest-benchmark plugin, as after ``make quickstart`` (runtime set-up only).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.encoders import model_check, refs
from harness.encoders.model_check import check_model
from harness.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "harness"]
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _env(tmp_path: Path, offline: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    env["HF_HUB_CACHE"] = str(tmp_path / "hub")          # an empty hub cache: nothing is found there
    env["HARNESS_CACHE"] = str(tmp_path / "cache")
    env.pop("HARNESS_NUM_THREADS", None)
    return env


def _eval(tmp_path: Path, model: str, dataset: Path, offline: bool) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``harness eval`` once; returns the process, its wall time and its CPU time (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([*CLI, "eval", "--model", model, "--dataset-dir", str(dataset),
                           "--results-root", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")],
                          env=_env(tmp_path, offline), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def _left_behind(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for sub in ("cache", "results") if (tmp_path / sub).exists()
                  for p in (tmp_path / sub).rglob("*"))


# ---------------------------------------------------------------------------- through the CLI
@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline"])
def test_typo_model_fails_fast_with_did_you_mean(tmp_path, dataset, offline):
    proc, wall, cpu = _eval(tmp_path, "minlm", dataset, offline)
    print(f"harness eval --model minlm ({'offline' if offline else 'online'}): {wall:.2f} s wall, {cpu:.2f} s CPU")
    assert proc.returncode == 2, proc.stderr
    assert "did you mean 'minilm'?" in proc.stderr
    assert "harness list models" in proc.stderr
    assert "'minlm'" in proc.stderr
    # Nothing was encoded, retried or advised about a folder; no cache entry or result folder was left.
    assert "encoding" not in proc.stderr and "Retrying" not in proc.stderr and "complete saved model" not in proc.stderr
    assert _left_behind(tmp_path) == []
    # The model name is checked before torch and the dataset load: about 1.7 s of CPU on this machine (the
    # wall time is below 3 s on an idle one; a machine shared with other jobs stretches it, not the CPU time).
    assert cpu < 3.0, f"{cpu:.2f} s of CPU"
    assert wall < 30.0, f"{wall:.2f} s: the hub was retried"


def test_hub_id_offline_fails_in_one_line(tmp_path, dataset):
    proc, wall, cpu = _eval(tmp_path, "sentence-transformers/all-mpnet-base-v2", dataset, offline=True)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("harness eval: error: model 'sentence-transformers/all-mpnet-base-v2'")
    assert "offline mode is set (HF_HUB_OFFLINE), so the hub is not asked" in lines[0]
    assert "hf download sentence-transformers/all-mpnet-base-v2" in lines[0]
    assert cpu < 3.0 and _left_behind(tmp_path) == []


def test_model_that_cannot_load_leaves_no_cache_entry(tmp_path, dataset, tiny_bert_dir):
    """A folder that passes the pre-flight check but cannot be loaded (an unknown model type): the error comes
    before the embedding-cache entry is created, so no empty entry is left (before: embeddings/<key>/meta.json)."""
    import shutil

    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_bert_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "model_type": "no-such-architecture"}))
    proc, _, _ = _eval(tmp_path, str(broken), dataset, offline=True)
    assert proc.returncode == 2, proc.stderr
    assert "could not load the model" in proc.stderr
    assert "encoding" not in proc.stderr
    embeddings = tmp_path / "cache" / "embeddings"
    assert not embeddings.exists() or list(embeddings.iterdir()) == []


# ---------------------------------------------------------------------------- the pieces
def test_suggestions_cover_aliases_and_known_checkpoints():
    assert refs.model_suggestions("minlm")[0] == "minilm"
    assert refs.model_suggestions("MINLM")[0] == "minilm"            # case-insensitive
    assert refs.model_suggestions("bge-m4")[0] == "bge-m3"           # a known checkpoint's alias
    assert refs.model_suggestions("BAAI/bge-m")[0] == "BAAI/bge-m3"   # its hub id
    assert refs.model_suggestions("smolm2")[0] == "smollm2"
    assert refs.model_suggestions("xyzzy-qwerty") == []
    assert refs.did_you_mean("minlm") == "did you mean 'minilm'?"
    assert refs.did_you_mean("xyzzy-qwerty") == ""


@pytest.fixture
def online(monkeypatch):
    """Offline mode unset (the encoder tests' conftest sets HF_HUB_OFFLINE for the whole session)."""
    for var in OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)


def _probe_answers(monkeypatch, answer: tuple[str, str]) -> list[str]:
    asked: list[str] = []

    def probe(repo_id: str, timeout: float = refs.HUB_PROBE_TIMEOUT) -> tuple[str, str]:
        asked.append(repo_id)
        return answer

    monkeypatch.setattr(model_check, "hub_probe", probe)
    monkeypatch.setattr(model_check, "hub_snapshot", lambda repo_id, revision=None: None)
    return asked


def test_online_unknown_name_asks_the_hub_once(monkeypatch, online):
    asked = _probe_answers(monkeypatch, ("missing", "RepositoryNotFoundError"))
    with pytest.raises(ConfigError, match=r"the hub has no such model; did you mean 'minilm'\?"):
        check_model("minlm")
    assert asked == ["minlm"]


def test_online_unreachable_hub_names_the_cause(monkeypatch, online):
    _probe_answers(monkeypatch, ("unreachable", "ConnectError: Name or service not known"))
    with pytest.raises(ConfigError, match=r"hub cannot be reached \(ConnectError: Name or service not known\)") as exc:
        check_model("org/no-such-model")
    assert "harness list models" in str(exc.value) and "\n" not in str(exc.value)


def test_online_found_and_gated(monkeypatch, online):
    _probe_answers(monkeypatch, ("found", ""))
    check_model("org/some-model")            # transformers downloads it on load
    _probe_answers(monkeypatch, ("gated", "the repository is gated: accept its terms"))
    with pytest.raises(ConfigError, match="gated"):
        check_model("org/some-model")


def test_offline_never_asks_the_hub(monkeypatch):
    asked = _probe_answers(monkeypatch, ("found", ""))
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"did you mean 'minilm'\?"):
        check_model("minlm")
    with pytest.raises(ConfigError, match="this known checkpoint is not in the local Hugging Face cache") as exc:
        check_model("bge-m3")                 # a known alias stands for its hub id; no did-you-mean for it
    assert "BAAI/bge-m3" in str(exc.value) and "did you mean" not in str(exc.value)
    assert asked == []


def test_hub_probe_turns_transport_errors_into_unreachable(monkeypatch):
    from huggingface_hub import HfApi

    def fail(self, repo_id, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(HfApi, "model_info", fail)
    refs.hub_probe.cache_clear()
    try:
        assert refs.hub_probe("org/name", timeout=0.5) == ("unreachable", "ConnectionError: no route to host")
    finally:
        refs.hub_probe.cache_clear()


# ---------------------------------------------------------------------------- pytest after `make quickstart`
def test_pytest_without_benchmark_plugin_says_what_to_install(tmp_path):
    """``-p no:benchmark`` stands for a set-up without pytest-benchmark: one line names what to run, instead
    of "unrecognized arguments: --benchmark-disable-gc"."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:benchmark", "-p", "no:cacheprovider",
                           "tests/encoders/test_refs.py", "-q"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    output = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert output == ["ERROR: the test tools are not installed (pytest-benchmark is missing; 'make quickstart' "
                      "installs only the runtime set-up): run 'make setup-dev' (bash scripts/setup.sh --dev)"]
    assert "unrecognized arguments" not in proc.stderr
