"""mteb is the optional extra 'cmteb': without it a C-MTEB task (whose definition mteb holds) is refused with
the command that installs it, and the other benchmark families never import it."""
from __future__ import annotations

import sys

import pytest

from harness.cli import main
from harness.errors import ConfigError


def test_without_mteb_a_cmteb_task_names_the_extra(monkeypatch):
    from suites.benchmarks import cmteb

    monkeypatch.setitem(sys.modules, "mteb", None)              # `import mteb` fails as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'retrieval-harness\[cmteb\]'"):
        cmteb.task_definition("T2Retrieval")


def test_other_benchmark_families_do_not_import_mteb(monkeypatch, shared_data, tmp_path):
    monkeypatch.setitem(sys.modules, "mteb", None)
    assert main(["eval", "--model", "bm25", "--suite", "beir", "--dataset-dir", str(shared_data / "scifact"),
                 "--out", str(tmp_path / "beir"), "--format", "json"]) == 0
