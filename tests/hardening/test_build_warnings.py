"""Building the package prints no warnings (setuptools deprecated the licence table; setup ran it twice)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_builds_without_warnings(tmp_path):
    # a copy of what the build reads, so the build leaves nothing in the checkout
    source = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    for package in ("harness", "methods", "suites", "reports"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "Warning" not in output and "deprecat" not in output.lower(), output[-2000:]
    assert len(list(tmp_path.glob("retrieval_harness-*.whl"))) == 1
