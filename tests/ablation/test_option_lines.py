"""A method option's type, choice or range problem in a suite file is reported at the option's own line,
from the method's typed recipe (harness.recipe.option_problems), before anything runs."""
from __future__ import annotations

import pytest

from harness.cli import main

SUITE = """\
name: badopt
version: 1
description: bad option values at their lines
baseline: a
metrics: [ndcg@10]
stats: {test: randomization, seed: 0}
variants:
  - id: a
    method: tdro
    options:
      transfer: ratoi
  - id: b
    method: groupdro
    options: {k: many, base: debiased}
scales:
  tiny:
    model: synthetic:default/tiny-bert
    data: [synthetic:default]
    benchmarks:
      - {id: latin_qa, suite: synthetic, dataset_dir: "synthetic:default/eval/latin_qa"}
"""


def test_option_problems_point_at_their_lines(tmp_path, capsys):
    path = tmp_path / "badopt.yaml"
    path.write_text(SUITE)
    assert main(["run", str(path), "--dry-run", "--results-root", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "2 problems in the suite (nothing was run)" in err
    assert "line 11, column 7: variants[0].options: variant 'a': method 'tdro': unknown transfer 'ratoi': " \
           "transfer must be one of top, bottom, ratio, loss" in err
    assert "line 14, column 15: variants[1].options: variant 'b': method 'groupdro': k must be an integer, " \
           "got 'many'" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("base, message", [("debiasd", "unknown method 'debiasd'"),
                                           ("tdro", "wraps a base of its own"), ("groupdro", "is the method itself")])
def test_a_bad_base_is_refused_before_anything_runs(tmp_path, capsys, base, message):
    text = SUITE.replace("transfer: ratoi", "transfer: ratio").replace("k: many, base: debiased", f"base: {base}")
    if base == "tdro":
        text = text.replace(f"base: {base}", "base: tdro, base_options: {base: debiased}")
    path = tmp_path / "badbase.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--dry-run", "--results-root", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err
