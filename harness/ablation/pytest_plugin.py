"""pytest plugin: every ablation suite becomes test items, selectable by marker.

``pytest -m "ablation and quickstart" --scale tiny`` runs the ``quickstart`` suite:
one test item per training run (a variant, or each sweep point and seed of one: its
training cell and all its evaluations, checkpoints included) and one final item that
builds the comparison table (and the sweep and learning-curve tables and plots).  Items carry the markers
``ablation``, ``slow`` (so the default run leaves them out) and the suite's name.
Results go to ``--ablation-results`` (default ``results/``, shared with
``harness run``), so cells finished by either are reused by the other.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.ablation.axes import suite_replicates
from harness.ablation.runner import SuiteRun
from harness.ablation.spec import list_suite_files, load_suite

_RUNS: dict[tuple[str, str], object] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ablation suites")
    group.addoption("--scale", default="tiny", help="scale of the ablation suites (tiny, small, paper)")
    # Written "--ablation-results=DIR": pytest finds its rootdir and ini file before any plugin or conftest
    # can register an option, so in "--ablation-results DIR" the unknown option's DIR is taken for a test path
    # (rootdir DIR, no pyproject settings, nothing collected) whenever DIR exists.  No registration can avoid it.
    group.addoption("--ablation-results", default="results", metavar="DIR",
                    help="results root shared with `harness run`; write --ablation-results=DIR (with '=')")


def _suite_files() -> dict[str, Path]:
    return list_suite_files()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ablation: an ablation-suite cell or table")
    for name in _suite_files():
        config.addinivalue_line("markers", f"{name}: cells of the '{name}' ablation suite")


def _params(config: pytest.Config, kind: str) -> list:
    scale = config.getoption("--scale")
    params = []
    for name, path in _suite_files().items():
        suite = load_suite(path)
        if scale not in suite.scales:
            continue
        marks = [pytest.mark.ablation, pytest.mark.slow, getattr(pytest.mark, name)]
        if kind == "cell":
            # one item per training run: a variant, or each sweep point and seed of it (harness.ablation.axes)

            params += [pytest.param((name, r.id), marks=marks, id=f"{name}-{scale}-{r.id}")
                       for r in suite_replicates(suite, scale)]
        else:
            params.append(pytest.param(name, marks=marks, id=f"{name}-{scale}"))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ablation_cell" in metafunc.fixturenames:
        metafunc.parametrize("ablation_cell", _params(metafunc.config, "cell"))
    if "ablation_suite" in metafunc.fixturenames:
        metafunc.parametrize("ablation_suite", _params(metafunc.config, "table"))


def suite_run(config: pytest.Config, name: str):
    """The (session-cached) runner of suite ``name`` at the chosen scale."""
    scale = config.getoption("--scale")
    key = (name, scale)
    if key not in _RUNS:
        suite = load_suite(_suite_files()[name])
        root = Path(config.getoption("--ablation-results"))
        _RUNS[key] = SuiteRun(suite, scale, root, progress=False, load_data=not suite.scale(scale).dry_run_only)
    return _RUNS[key]


@pytest.fixture
def ablation_runner(request: pytest.FixtureRequest):
    """Factory fixture: ``ablation_runner(suite name)`` -> SuiteRun."""
    return lambda name: suite_run(request.config, name)
