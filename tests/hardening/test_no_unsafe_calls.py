"""A static scan (``ast``) of the package sources for calls that run code from data or build
shell commands: ``yaml.load`` without a safe loader, ``torch.load`` without
``weights_only=True``, ``pickle``-family loads, ``shell=True``, ``os.system``/``os.popen``,
``subprocess`` with a command string, ``trust_remote_code=True``, ``np.load(allow_pickle=True)``.

Imports are resolved, so ``from yaml import load`` or ``import pickle as p`` are caught too.
The planted examples below prove each rule fires (and that the safe forms do not).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "methods", "suites", "reports", "scripts")

SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}
UNSAFE_YAML_LOADERS = {"Loader", "CLoader", "UnsafeLoader", "CUnsafeLoader", "FullLoader", "CFullLoader"}
ALWAYS_UNSAFE = {
    "yaml.unsafe_load": "yaml.unsafe_load runs arbitrary constructors",
    "yaml.unsafe_load_all": "yaml.unsafe_load_all runs arbitrary constructors",
    "yaml.full_load": "yaml.full_load: use yaml.safe_load",
    "yaml.full_load_all": "yaml.full_load_all: use yaml.safe_load_all",
    "pickle.load": "pickle.load runs code from the file",
    "pickle.loads": "pickle.loads runs code from the data",
    "pickle.Unpickler": "pickle.Unpickler runs code from the data",
    "_pickle.load": "pickle.load runs code from the file",
    "_pickle.loads": "pickle.loads runs code from the data",
    "dill.load": "dill.load runs code from the file",
    "dill.loads": "dill.loads runs code from the data",
    "joblib.load": "joblib.load unpickles",
    "shelve.open": "shelve unpickles its values",
    "marshal.load": "marshal.load reads code objects",
    "marshal.loads": "marshal.loads reads code objects",
    "os.system": "os.system runs a shell string",
    "os.popen": "os.popen runs a shell string",
    "pandas.read_pickle": "pandas.read_pickle unpickles",
}
SUBPROCESS = {"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
              "subprocess.Popen", "subprocess.getoutput", "subprocess.getstatusoutput"}


class _Scanner(ast.NodeVisitor):
    def __init__(self, source: str, filename: str):
        self.filename = filename
        self.aliases: dict[str, str] = {}
        self.findings: list[str] = []
        self.visit(ast.parse(source, filename=filename))

    # -- imports: local name -> dotted origin
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module:
            for a in node.names:
                self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def qualname(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def flag(self, node: ast.AST, problem: str) -> None:
        self.findings.append(f"{self.filename}:{node.lineno}: {problem}")

    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualname(node.func) or ""
        name = name.replace("numpy.", "np.", 1) if name.startswith("numpy.") else name
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if name in ALWAYS_UNSAFE:
            self.flag(node, ALWAYS_UNSAFE[name])
        if name in ("yaml.load", "yaml.load_all"):
            loader = kw.get("Loader", node.args[1] if len(node.args) > 1 else None)
            loader_name = (self.qualname(loader) or "").rsplit(".", 1)[-1] if loader is not None else ""
            if loader_name not in SAFE_YAML_LOADERS:
                self.flag(node, f"{name} without Loader=yaml.SafeLoader (use yaml.safe_load)")
        elif "Loader" in kw and (self.qualname(kw["Loader"]) or "").rsplit(".", 1)[-1] in UNSAFE_YAML_LOADERS:
            self.flag(node, f"{name} with an unsafe YAML Loader")
        if name == "torch.load" and not _is_true(kw.get("weights_only")):
            self.flag(node, "torch.load without weights_only=True")
        if name == "np.load" and _is_true(kw.get("allow_pickle")):
            self.flag(node, "np.load with allow_pickle=True")
        if _is_true(kw.get("shell")):
            self.flag(node, f"{name or 'call'} with shell=True")
        if _is_true(kw.get("trust_remote_code")):
            self.flag(node, f"{name or 'call'} with trust_remote_code=True")
        if name in SUBPROCESS and node.args and _is_string(node.args[0]):
            self.flag(node, f"{name} with a command string (pass an argument list)")
        self.generic_visit(node)


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _is_string(node.left)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
        and _is_string(node.func.value)


def scan(source: str, filename: str = "<planted>") -> list[str]:
    return _Scanner(source, filename).findings


def package_sources() -> list[Path]:
    files = [p for pkg in PACKAGES if (REPO / pkg).is_dir() for p in sorted((REPO / pkg).rglob("*.py"))]
    return [p for p in files if ".venv" not in p.parts and "__pycache__" not in p.parts]


# ------------------------------------------------------------------------- the scan itself
def test_package_sources_have_no_unsafe_calls():
    files = package_sources()
    assert len(files) > 50 and any(p.name == "checkpoint.py" for p in files)     # really scanning the packages
    findings = [f for p in files for f in scan(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))]
    assert findings == []


# ------------------------------------------------------------------- the rules fire
UNSAFE = [
    ("import yaml\nyaml.load(text)", "yaml.load without Loader"),
    ("import yaml\nyaml.load(text, Loader=yaml.Loader)", "yaml.load without Loader"),
    ("import yaml\nyaml.load(text, yaml.FullLoader)", "yaml.load without Loader"),
    ("from yaml import load\nload(text)", "yaml.load without Loader"),
    ("import yaml\nyaml.unsafe_load(text)", "yaml.unsafe_load"),
    ("import yaml as y\ny.full_load(text)", "yaml.full_load"),
    ("import yaml\nyaml.compose(text, Loader=yaml.UnsafeLoader)", "unsafe YAML Loader"),
    ("import torch\ntorch.load(path)", "torch.load without weights_only=True"),
    ("import torch\ntorch.load(path, weights_only=False)", "torch.load without weights_only=True"),
    ("from torch import load\nload(path, map_location='cpu')", "torch.load without weights_only=True"),
    ("import pickle\npickle.load(fh)", "pickle.load runs code"),
    ("import pickle as pk\npk.loads(data)", "pickle.loads runs code"),
    ("from pickle import Unpickler\nUnpickler(fh).load()", "pickle.Unpickler"),
    ("import joblib\njoblib.load(path)", "joblib.load"),
    ("import numpy as np\nnp.load(path, allow_pickle=True)", "allow_pickle=True"),
    ("import subprocess\nsubprocess.run(cmd, shell=True)", "shell=True"),
    ("import subprocess\nsubprocess.run(f'java -cp {jar} Main')", "command string"),
    ("import subprocess\nsubprocess.check_output('git ' + arg)", "command string"),
    ("import os\nos.system('rm -rf ' + path)", "os.system"),
    ("from os import popen\npopen(cmd)", "os.popen"),
    ("from transformers import AutoModel\nAutoModel.from_pretrained(name, trust_remote_code=True)",
     "trust_remote_code=True"),
]


@pytest.mark.parametrize("source, problem", UNSAFE, ids=[s.splitlines()[-1] for s, _ in UNSAFE])
def test_planted_unsafe_call_is_caught(source, problem):
    findings = scan(source)
    assert len(findings) == 1 and problem in findings[0] and findings[0].startswith("<planted>:2: ")


SAFE = [
    "import yaml\nyaml.safe_load(text)",
    "import yaml\nyaml.load(text, Loader=yaml.SafeLoader)",
    "import yaml\nyaml.load(text, Loader=yaml.CSafeLoader)",
    "import yaml\nyaml.compose(text, Loader=yaml.SafeLoader)",
    "import torch\ntorch.load(path, map_location='cpu', weights_only=True)",
    "import pickle\nraise pickle.UnpicklingError('x')",
    "import numpy as np\nnp.load(path, mmap_mode='r')",
    "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'harness', *argv], capture_output=True)",
    "from transformers import AutoModel\nAutoModel.from_pretrained(name, trust_remote_code=False)",
    "model.load(path)\nmodel.eval()",
]


@pytest.mark.parametrize("source", SAFE, ids=[s.splitlines()[-1] for s in SAFE])
def test_safe_forms_are_not_flagged(source):
    assert scan(source) == []


def test_a_planted_file_in_a_package_tree_is_reported_with_its_line(tmp_path):
    """The same path the package scan takes: a file on disk, its relative name and line in the finding."""
    pkg = tmp_path / "harness" / "train"
    pkg.mkdir(parents=True)
    (pkg / "evil.py").write_text('"""Docstring."""\nimport torch\n\n\ndef resume(p):\n'
                                 '    return torch.load(p, map_location="cpu")\n')
    path = pkg / "evil.py"
    assert scan(path.read_text(), str(path.relative_to(tmp_path))) == [
        "harness/train/evil.py:6: torch.load without weights_only=True"]
