"""Shared fixtures: where the real data lives, and small helpers."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Ablation suites become test items (pytest -m "ablation and <suite>" --scale tiny).
pytest_plugins = ["suites.pytest_plugin"]

REPO_ROOT = Path(__file__).resolve().parents[1]
# Real data sits beside the repository (../shared/data); HARNESS_SHARED_DATA overrides.
SHARED_DATA = Path(os.environ.get("HARNESS_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (set HARNESS_SHARED_DATA)")
    return SHARED_DATA


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
