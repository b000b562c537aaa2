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


def test_the_editable_install_builds_without_warnings(tmp_path):
    """`pip install -e .` (scripts/setup.sh) printed setuptools' 'Editable installation' notice: a flat layout
    without package-dir took the meta-path finder; with it, a .pth entry for the root, and no notice."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("harness", "methods", "suites", "reports"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    hook = f"from setuptools import build_meta; print(build_meta.build_editable({str(wheels)!r}))"
    done = subprocess.run([sys.executable, "-W", "always", "-c", hook], capture_output=True, text=True,
                          timeout=600, cwd=source)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "Warning" not in output and "InformationOnly" not in output, output[-2000:]
    (wheel,) = wheels.glob("retrieval_harness-*.whl")
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        pth = [n for n in archive.namelist() if n.endswith(".pth")]
        assert len(pth) == 1 and archive.read(pth[0]).decode().strip() == str(source.resolve())
