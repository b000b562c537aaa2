"""The layer rule, checked on the static import graph of the repository.

Layers (README, "Architecture"):

* **engine**: ``harness`` minus the application modules; it holds every interface
  (``harness.method``, ``harness.benchmark``, ``harness.registry``, ...);
* **plug-ins**: ``methods``, ``suites``, ``reports``: implementations only;
* **application**: ``harness.__main__``, ``harness.cli``, ``harness.ablation`` (suite runner), ``harness.regression``
  (``harness check`` against ``suites/expected``), ``suites.pytest_plugin`` and ``reports.layouts`` (table layout
  kinds: they read a finished suite through the runner's files and axes) and ``harness.results`` (the
  DataFrame API over stored results and finished suites); they wire engine and plug-ins
  together and may import everything.

Rules: the engine imports no plug-in and no application module; a plug-in imports no
application module; no two modules import each other, directly or through others.  Imports
under ``if TYPE_CHECKING:`` are annotations only and do not count; imports inside functions do.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "methods", "suites", "reports")
PLUGINS = ("methods", "suites", "reports")
APPLICATION = ("harness.__main__", "harness.cli", "harness.ablation", "harness.regression", "suites.pytest_plugin",
               "reports.layouts", "harness.results")


@dataclass(frozen=True)
class Violation:
    importer: str
    imported: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.imported} ({self.rule})"


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Module name -> file for every ``.py`` under the packages."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement outside ``if TYPE_CHECKING:`` blocks."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:   # relative: resolve against this module's package
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # ``from pkg import name``: the submodule pkg.name if there is one, else pkg itself
            # (resolved in import_graph, which knows the modules).
            found.extend((f"{prefix}\0{alias.name}", node.lineno) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """importer -> {imported module of the packages: first line}, over the packages' modules only."""
    files = module_files(root, packages)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}
        for name, line in _imports(tree, module, path.name == "__init__.py"):
            if "\0" in name:
                prefix, attr = name.split("\0")
                name = f"{prefix}.{attr}" if f"{prefix}.{attr}" in files else prefix
            if name in files and name != module:
                edges.setdefault(name, line)
        graph[module] = edges
    return graph


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str, plugins: tuple[str, ...], application: tuple[str, ...]) -> str:
    if _within(module, application):
        return "application"
    if _within(module, plugins):
        return "plugin"
    return "engine"


def layer_violations(graph: dict[str, dict[str, int]], plugins: tuple[str, ...] = PLUGINS,
                     application: tuple[str, ...] = APPLICATION) -> list[Violation]:
    """Upward imports: engine -> plug-in or application, plug-in -> application."""
    out = []
    for importer, edges in sorted(graph.items()):
        low = layer(importer, plugins, application)
        for imported, line in sorted(edges.items()):
            high = layer(imported, plugins, application)
            if (low, high) in {("engine", "plugin"), ("engine", "application"), ("plugin", "application")}:
                out.append(Violation(importer, imported, line, f"{low} must not import {high}"))
    return out


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# ---------------------------------------------------------------------- the repository
def test_the_engine_imports_no_plugin_and_no_application_module():
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 100   # the walk really saw the repository
    violations = layer_violations(graph)
    assert not violations, "upward imports:\n" + "\n".join(map(str, violations))


def test_no_import_cycles():
    found = cycles(import_graph(ROOT, PACKAGES))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# ---------------------------------------------------------------------- the checker itself
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


CLEAN = {
    "eng/__init__.py": "",
    "eng/core.py": "import json\n",
    "eng/iface.py": "from eng.core import json\nfrom typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from plug.impl import Impl\n",
    "eng/app/__init__.py": "",
    "eng/app/cli.py": "from eng import iface\nimport plug.impl\n",
    "plug/__init__.py": "",
    "plug/impl.py": "from eng.iface import json\n",
}


def test_checker_accepts_a_layered_package(tmp_path):
    _write(tmp_path, CLEAN)
    graph = import_graph(tmp_path, ("eng", "plug"))
    assert graph["eng.app.cli"] == {"eng.iface": 1, "plug.impl": 2}
    assert "plug.impl" not in graph["eng.iface"]   # TYPE_CHECKING imports do not count
    assert layer_violations(graph, ("plug",), ("eng.app",)) == []
    assert cycles(graph) == []


def test_checker_fails_on_a_planted_upward_import(tmp_path):
    # A function-level import of a plug-in inside the engine, and a plug-in importing the application.
    _write(tmp_path, {**CLEAN,
                      "eng/core.py": "import json\n\ndef f():\n    from plug import impl\n    return impl\n",
                      "plug/impl.py": "from eng.iface import json\nfrom eng.app.cli import iface\n"})
    graph = import_graph(tmp_path, ("eng", "plug"))
    found = {(v.importer, v.imported, v.line, v.rule) for v in layer_violations(graph, ("plug",), ("eng.app",))}
    assert found == {("eng.core", "plug.impl", 4, "engine must not import plugin"),
                     ("plug.impl", "eng.app.cli", 2, "plugin must not import application")}


def test_checker_fails_on_a_planted_cycle(tmp_path):
    # a -> b -> c -> a through a relative import, plus an unrelated edge d -> a.
    _write(tmp_path, {"eng/__init__.py": "", "eng/a.py": "import eng.b\n", "eng/b.py": "from eng import c\n",
                      "eng/c.py": "from .a import x\n", "eng/d.py": "import eng.a\n"})
    assert cycles(import_graph(tmp_path, ("eng",))) == [["eng.a", "eng.b", "eng.c"]]
