"""Shared fixtures: where the real data lives, and small helpers."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# Ablation suites become test items (pytest -m "ablation and <suite>" --scale tiny).
pytest_plugins = ["harness.ablation.pytest_plugin"]

# pyproject's addopts pass pytest-benchmark options; without the plugin pytest would stop with "unrecognized
# arguments".  That is what a runtime-only set-up (make quickstart) gives, so say in one line what to install.
MISSING_TEST_TOOLS = ("the test tools are not installed (pytest-benchmark is missing; 'make quickstart' installs "
                      "only the runtime set-up): run 'make setup-dev' (bash scripts/setup.sh --dev)")


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # Called while this file registers, before pytest checks the command line against the known options.
    if not pluginmanager.has_plugin("benchmark"):
        raise pytest.UsageError(MISSING_TEST_TOOLS)


REPO_ROOT = Path(__file__).resolve().parents[1]
# Real data sits beside the repository (../shared/data); HARNESS_SHARED_DATA overrides.
SHARED_DATA = Path(os.environ.get("HARNESS_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def _beside_repo(path: Path, what: str, variable: str) -> Path:
    """``path``, or a skip naming it: ../shared is not part of the repository (CI places it beside the clone)."""
    if not path.is_dir():
        pytest.skip(f"{what} not found at {path} (set {variable})")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return _beside_repo(SHARED_DATA, "real data", "HARNESS_SHARED_DATA")


# The seed papers' text extractions sit beside the repository (../shared/papers); HARNESS_SHARED_PAPERS overrides.
PAPERS_DIR = Path(os.environ.get("HARNESS_SHARED_PAPERS", REPO_ROOT.parent / "shared" / "papers"))


@pytest.fixture(scope="session")
def papers_dir() -> Path:
    return _beside_repo(PAPERS_DIR, "seed papers", "HARNESS_SHARED_PAPERS")


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's torch work on one thread: tiny models train fastest that way (also on a machine
    shared with other jobs), and the speed tests compare like with like.  Use it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


MINI_DOCS = {"d1": "p53 mutations drive many human cancers", "d2": "Aspirin lowers the risk of heart attack",
             "d3": "Mitochondria make ATP from glucose", "d4": "The tumor suppressor p53 regulates the cell cycle",
             "d5": "Statins reduce cholesterol in the blood"}
MINI_QUERIES = {"q1": "role of p53 in cancer", "q2": "does aspirin prevent heart attacks", "q3": "how cells make ATP"}
MINI_QRELS = [("q1", "d1"), ("q1", "d4"), ("q2", "d2"), ("q3", "d3")]


@pytest.fixture
def beir_folder(tmp_path):
    """A factory ``(docs, queries, qrels) -> folder`` writing a small BEIR-layout folder under ``tmp_path``
    (``docs``/``queries``: id -> text; ``qrels``: (query id, doc id) pairs judged 1, split ``test``)."""
    def write(docs: dict[str, str], queries: dict[str, str], qrels: list[tuple[str, str]],
              name: str = "mini") -> Path:
        folder = tmp_path / name
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                                     for k, v in docs.items()))
        (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n"
                                                      for k, v in queries.items()))
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" +
                                                   "".join(f"{q}\t{d}\t1\n" for q, d in qrels))
        return folder
    return write


@pytest.fixture
def dataset(beir_folder):
    """A 5-document BEIR-layout folder (3 queries, 4 judgements) for end-to-end evaluations (sparse tests, CLI)."""
    return beir_folder(MINI_DOCS, MINI_QUERIES, MINI_QRELS)
