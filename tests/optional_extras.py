"""Tests that need an optional extra of pyproject.toml ([project.optional-dependencies]) call
:func:`require_extra` with the module they import: when its package is missing the test is skipped with
a reason naming the extra and the command that installs it.

``make test`` installs every extra (``scripts/setup.sh --dev``) and sets ``HARNESS_REQUIRE_EXTRAS=1``:
there a missing extra fails the test instead, so that a broken install cannot hide behind skips.  An
extra that is installed but fails to import (a missing shared library, a broken dependency) is never
skipped: its error is the test's error.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRE_ENV = "HARNESS_REQUIRE_EXTRAS"

# top-level import name -> (extra in pyproject.toml, the distribution that provides it)
EXTRAS: dict[str, tuple[str, str]] = {
    "seismic": ("seismic", "pyseismic-lsr"),
    "mteb": ("cmteb", "mteb"),
    "fasttext": ("topics", "fasttext-wheel"),
    "submitit": ("cluster", "submitit"),
    "ray": ("cluster", "ray"),
    "sentence_transformers": ("dev", "sentence-transformers"),
    "statsmodels": ("dev", "statsmodels"),
    "pytrec_eval": ("dev", "pytrec-eval-terrier"),
    "tensorboard": ("dev", "tensorboard"),
    "playwright": ("dev", "playwright"),
    "hypothesis": ("dev", "hypothesis"),
}


def extras_required() -> bool:
    """Whether a missing extra is a failure (``HARNESS_REQUIRE_EXTRAS`` set to anything but ``0``/empty)."""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0")


def install_hint(module: str) -> str:
    extra, dist = EXTRAS[module.partition(".")[0]]
    return (f"needs the optional extra '{extra}' (package {dist}), which is not installed: "
            f"pip install -e '.[{extra}]' (or bash scripts/setup.sh --dev, which installs every extra)")


def require_extra(module: str) -> ModuleType:
    """``module`` imported; when its package is not installed, skip the calling test (or module, when
    called at import time) saying which extra to install, or fail it under ``HARNESS_REQUIRE_EXTRAS=1``."""
    __tracebackhide__ = True       # skips and failures are reported at the caller's line
    top = module.partition(".")[0]
    if top not in EXTRAS:
        raise KeyError(f"{top!r} is not an optional extra's module; known: {', '.join(sorted(EXTRAS))}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != top:
            raise        # the extra is there but one of its own dependencies is not: a broken install
        reason = f"{module}: {install_hint(module)}"
        if extras_required():
            pytest.fail(f"{reason} [{REQUIRE_ENV}=1: every extra must be installed; {exc}]", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
