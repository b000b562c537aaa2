"""``optional_extras.require_extra``: a missing extra skips with the extra and its install command, or
fails under ``HARNESS_REQUIRE_EXTRAS=1`` (set by ``make test``); a broken install is never skipped; the
table of extras agrees with pyproject.toml, and the Makefile's test target sets the variable."""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from optional_extras import EXTRAS, REQUIRE_ENV, require_extra

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def seismic_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "seismic", None)          # `import seismic` fails as if not installed
    monkeypatch.delenv(REQUIRE_ENV, raising=False)


def test_a_missing_extra_skips_with_the_extra_and_the_install_command(seismic_missing):
    with pytest.raises(pytest.skip.Exception) as exc:
        require_extra("seismic")
    reason = str(exc.value)
    assert "optional extra 'seismic'" in reason and "pyseismic-lsr" in reason
    assert "pip install -e '.[seismic]'" in reason and "scripts/setup.sh --dev" in reason


@pytest.mark.parametrize("value", ["1", "yes"])
def test_a_missing_extra_fails_when_extras_are_required(seismic_missing, monkeypatch, value):
    monkeypatch.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.fail.Exception) as exc:
        require_extra("seismic")
    assert "optional extra 'seismic'" in str(exc.value) and f"{REQUIRE_ENV}=1" in str(exc.value)


def test_zero_or_empty_means_not_required(seismic_missing, monkeypatch):
    for value in ("0", ""):
        monkeypatch.setenv(REQUIRE_ENV, value)
        with pytest.raises(pytest.skip.Exception):
            require_extra("seismic")


def test_submodules_and_an_installed_extra(monkeypatch):
    # Both names: an earlier test of the same run may have imported the submodule (then it is cached).
    monkeypatch.setitem(sys.modules, "playwright", None)
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"playwright.sync_api: .*extra 'dev'"):
        require_extra("playwright.sync_api")
    fake = types.ModuleType("fasttext")
    monkeypatch.setitem(sys.modules, "fasttext", fake)
    monkeypatch.setenv(REQUIRE_ENV, "1")
    assert require_extra("fasttext") is fake


def test_a_broken_install_is_an_error_not_a_skip(monkeypatch):
    """The extra's package is there but cannot be imported (a dependency of it is missing, or a shared
    library): the error reaches the test, with or without HARNESS_REQUIRE_EXTRAS."""
    import optional_extras

    monkeypatch.delenv(REQUIRE_ENV, raising=False)

    def missing_dependency(name):
        raise ModuleNotFoundError("No module named 'numba'", name="numba")

    monkeypatch.setattr(optional_extras.importlib, "import_module", missing_dependency)
    with pytest.raises(ModuleNotFoundError, match="numba"):
        require_extra("seismic")

    def broken_library(name):
        raise ImportError("libgomp.so.1: cannot open shared object file")

    monkeypatch.setattr(optional_extras.importlib, "import_module", broken_library)
    with pytest.raises(ImportError, match="libgomp"):
        require_extra("seismic")


def test_unknown_modules_are_refused():
    with pytest.raises(KeyError, match="not an optional extra"):
        require_extra("numpy")


def optional_dependencies() -> dict[str, list[str]]:
    """pyproject.toml's [project.optional-dependencies]: extra -> distribution names (lower case)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    section = "\n".join(line.split("#", 1)[0] for line in section.splitlines())
    return {name: [req.lower() for req in re.findall(r'"([A-Za-z0-9_.-]+)', body)]
            for name, body in re.findall(r"^([A-Za-z0-9_-]+)\s*=\s*\[(.*?)\]", section, re.M | re.S)}


def test_the_table_agrees_with_pyproject():
    extras = optional_dependencies()
    assert {"dev", "seismic", "topics", "cluster"} <= set(extras)
    for module, (extra, dist) in EXTRAS.items():
        assert extra in extras, module
        assert dist.lower() in extras[extra], (module, extra, extras[extra])


def test_make_test_requires_every_extra():
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert f"{REQUIRE_ENV}=1 $(VENV)/bin/python -m pytest" in target
