"""The layer rule, checked by import-linter with the contracts in pyproject.toml (``[tool.importlinter]``).

Layers are folders (README, "Architecture"):

* **application**: ``harness/__main__.py``, ``harness/cli/``, ``harness/regression.py``, ``harness/results.py``
  and ``harness/ablation/`` (the suite runner, its table layout kinds and its pytest plugin);
* **engine**: every other child of ``harness/``; it holds every interface;
* **plug-ins**: ``methods/``, ``suites/``, ``reports/``: implementations only.

The contracts: the engine imports no plug-in and no application module; a plug-in imports no
application module; no folder loop; no import of another package's private (``_name``) module.
Imports under ``if TYPE_CHECKING:`` are annotations only and do not count; imports inside
functions do.  ``make lint`` runs the same contracts (``lint-imports``).

Here: the contracts hold on the repository, and they fail on a copy of the repository with a
planted upward import, a planted folder loop and a planted private import.  What import-linter's
contracts do not express (a loop between a package and one of its own modules) is checked on
grimp's import graph, the one import-linter builds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

importlinter = pytest.importorskip("importlinter", reason="import-linter is a dev dependency (make lint)")
grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "methods", "suites", "reports")


def lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """Run the ``lint-imports`` command on the packages under ``root`` with ``root/pyproject.toml``."""
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
               "sys.exit(lint_imports_command())", "--no-cache", "pyproject.toml"]
    for contract in contracts:
        command += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def contract_options() -> dict[str, dict]:
    """The contracts of pyproject.toml by id."""
    with open(ROOT / "pyproject.toml", "rb") as handle:
        config = tomllib.load(handle)
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


# ---------------------------------------------------------------------- the repository
def test_the_contracts_hold_on_the_repository():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_engine_of_both_contracts_is_one_list():
    """The layers contract names the engine's children of harness/; the plug-in contract forbids them
    the plug-ins: both must name the same modules, or a new engine folder would escape one of them."""
    options = contract_options()
    layers = options["harness-layers"]["layers"]
    engine_layer = {f"harness.{tail.strip()}" for tail in layers[-1].split(":")}
    assert set(options["engine-no-plugins"]["source_modules"]) == engine_layer
    application = {f"harness.{tail.strip()}" for layer in layers[:-1] for tail in layer.split("|")}
    assert set(options["plugins-no-application"]["forbidden_modules"]) == application


def test_no_module_imports_itself_through_others():
    """No two modules import each other, directly or through others: also a package and one of its own
    modules, which the sibling contract does not see (every module cycle has an edge a -> b with a chain
    b -> a back)."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert len(graph.modules) > 100   # the graph really holds the repository
    loops = sorted((a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
                   if graph.chain_exists(importer=b, imported=a))
    assert not loops, "import cycles through:\n" + "\n".join(f"{a} -> {b}" for a, b in loops)


# ---------------------------------------------------------------------- planted violations
@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A copy of the packages (their Python files) and of pyproject.toml."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=lambda folder, names: [n for n in names if n == "__pycache__"
                                                      or (not n.endswith(".py") and not (Path(folder) / n).is_dir())])
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(root: Path, module: str, line: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = root / module.replace(".", "/") / "__init__.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n\n" + line + "\n", encoding="utf-8")


def broken_section(output: str, name: str) -> str:
    """The report of one broken contract (from its title to the next title)."""
    broken = output.split("Broken contracts", 1)[-1]
    start = broken.find(name)
    assert start >= 0, output
    rest = broken[start + len(name):]
    ends = [rest.find(f"\n{other}\n") for other in contract_names() if other != name]
    ends = [e for e in ends if e >= 0]
    return rest[:min(ends)] if ends else rest


def contract_names() -> list[str]:
    return [c["name"] for c in contract_options().values()]


def test_a_planted_upward_import_breaks_the_layer_contracts(tree):
    # The engine importing a plug-in, inside a function (imports in functions count) ...
    plant(tree, "harness.errors", "def _planted():\n    from reports import table\n    return table")
    # ... and a plug-in importing the application.
    plant(tree, "reports.markdown", "import harness.cli")
    result = lint_imports(tree, "engine-no-plugins", "plugins-no-application", "harness-layers")
    assert result.returncode == 1, result.stdout + result.stderr
    names = contract_options()
    engine = broken_section(result.stdout, names["engine-no-plugins"]["name"])
    assert "harness.errors -> reports.table" in engine
    plugins = broken_section(result.stdout, names["plugins-no-application"]["name"])
    assert "reports.markdown -> harness.cli" in plugins


def test_a_planted_engine_import_of_the_application_breaks_the_layers(tree):
    plant(tree, "harness.store", "def _planted():\n    from harness.ablation import runner\n    return runner")
    result = lint_imports(tree, "harness-layers")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "harness.store -> harness.ablation.runner" in result.stdout


def test_a_planted_folder_loop_breaks_the_loop_contract(tree):
    # harness.registry imports harness.errors; the planted import closes the loop.
    plant(tree, "harness.errors", "import harness.registry")
    result = lint_imports(tree, "no-folder-loop")
    assert result.returncode == 1, result.stdout + result.stderr
    section = broken_section(result.stdout, contract_options()["no-folder-loop"]["name"])
    assert "No cycles are allowed in harness." in section
    assert ".errors -> .registry" in section or ".registry -> .errors" in section


def test_a_planted_loop_between_plugin_folders_breaks_the_plugin_contract(tree):
    # methods may use reports (figures); reports importing methods closes a loop between the folders.
    plant(tree, "reports.plots", "def _planted():\n    import methods.tdro\n    return methods.tdro")
    result = lint_imports(tree, "plugin-folders")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "reports.plots -> methods.tdro" in result.stdout


def test_a_planted_private_import_breaks_the_private_contract(tree):
    plant(tree, "methods.tdro", "def _planted():\n    from suites.benchmarks import _common\n    return _common")
    result = lint_imports(tree, "no-private-import")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "methods.tdro -> suites.benchmarks._common" in result.stdout


def test_an_unclassified_engine_folder_breaks_the_exhaustive_layers(tree):
    (tree / "harness" / "newfolder").mkdir()
    (tree / "harness" / "newfolder" / "__init__.py").write_text("", encoding="utf-8")
    result = lint_imports(tree, "harness-layers")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "harness.newfolder" in result.stdout
