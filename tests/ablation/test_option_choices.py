"""A benchmark suite's declared options (``SuiteOption``: type, ``choices``) are enforced at every entry
point: a suite file (at its file:line, before anything runs), ``harness eval --option`` and Python."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.ablation.problems import SuitePlanError
from harness.ablation.validate import load_validated
from harness.benchmark import get_suite
from harness.cli import main
from harness.errors import ConfigError
from harness.pipeline import load_benchmark

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"
WRONG = "option gallery must be one of full, sub200k, got 'sub20k' (did you mean 'sub200k'?)"


def test_python_api_refuses_a_choice_the_suite_does_not_declare(tmp_path):
    with pytest.raises(ConfigError, match=r"did you mean 'sub200k'"):
        get_suite("dureader").load(tmp_path, gallery="sub20k")
    with pytest.raises(ConfigError, match="option gallery must be one of"):
        load_benchmark(tmp_path, "dureader", gallery="sub20k")
    with pytest.raises(ConfigError, match="option gallery_size must be a int, got 'many'"):
        load_benchmark(tmp_path, "dureader", gallery_size="many")


def test_command_line_option_refuses_an_undeclared_choice(tmp_path, capsys):
    code = main(["eval", "--model", "bm25", "--suite", "dureader", "--dataset-dir", str(tmp_path),
                 "--option", "gallery=sub20k", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and WRONG in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_suite_file_option_is_checked_at_its_line(tmp_path):
    raw = yaml.safe_load(MINI.read_text())
    raw["scales"]["tiny"]["benchmarks"][0].update(suite="dureader", dataset_dir=str(tmp_path),
                                                   options={"gallery": "sub20k"})
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "gallery: sub20k" in text)
    with pytest.raises(SuitePlanError) as info:
        load_validated(path, "tiny", dry_run=True)
    problem = next(p for p in info.value.problems if "gallery" in p.message)
    assert problem.line == line and problem.keypath == ("scales", "tiny", "benchmarks", 0, "options", "gallery")
    assert WRONG in problem.message and "benchmark 'latin_qa'" in problem.message


def test_accepted_choices_pass(tmp_path):
    get_suite("dureader").check_options({"gallery": "sub200k", "gallery_size": 10, "split": "dev"})
