"""PEG's run length in epochs (option ``epochs``): paper 002 trains 5 epochs, i.e. ceil(5 x rows / global batch)
steps, which for the public substitute mixture (scale paper-public) is known only once the user has built it.
The run refuses any other step count naming the right one; the dry run says how the steps are derived."""
from __future__ import annotations

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.errors import ConfigError
from methods.peg import PEG


class Rows:
    """Training data of the given source sizes (all prepare reads of it)."""

    def __init__(self, *sizes: int):
        self.sizes = list(sizes)


def spec(**train):
    return PEG.spec("tiny", **train)


def test_the_paper_counts_its_steps_this_way():
    paper = spec(batch_size=13824, steps=39786)
    assert PEG.epoch_steps(5, 110_000_000, paper) == 39786        # paper 002: 5 epochs of 110M pairs at 432 x 32
    assert PEG.epoch_steps(5, 13824, paper) == 5 and PEG.epoch_steps(5, 13825, paper) == 6
    assert PEG.epoch_steps(2, 100, spec(batch_size=8, grad_accum=4)) == 7          # ceil(200 / 32)


def test_a_run_of_another_length_is_refused_naming_the_steps():
    method = PEG()
    run = spec(batch_size=8, steps=25, method_options={"epochs": 2})
    assert method.prepare(run, Rows(60, 40), {}).data.sizes == [60, 40]              # ceil(2 x 100 / 8) = 25
    with pytest.raises(ConfigError, match=r"ceil\(2 x 101 / 8\) = 26 steps, but the run has 25: set train.steps: 26"):
        method.prepare(run, Rows(61, 40), {})
    assert method.prepare(spec(batch_size=8, steps=3), Rows(61, 40), {})           # no epochs: steps as given
    assert method.prepare(spec(batch_size=8, steps=3, limits={"steps": 3}, method_options={"epochs": 2}),
                          Rows(61, 40), {})                                         # a smoke cap shortens on purpose


def test_plan_note_gives_the_rows_the_steps_stand_for():
    (note,) = PEG().plan_notes(spec(batch_size=13824, steps=39786, method_options={"epochs": 5}))
    assert "ceil(5 x rows / 13824)" in note and "109,997,569 to 110,000,332 rows" in note
    assert PEG().plan_notes(spec()) == []


def test_paper_public_checks_its_steps_against_the_built_mixture():
    suite = load_suite("peg")
    for scale, epochs in (("paper", None), ("paper-public", 5)):
        cells = [c for c in expand_train_cells(suite, scale, load_data=False) if c.method == "peg"]
        assert cells and {c.train_spec.method_options.get("epochs") for c in cells} == {epochs}
        # the rest of the paper options are the same at both scales (pre-training, statistics)
        assert all(c.train_spec.method_options["statistics"] == "global" and c.train_spec.method_options["pretrain"]
                   for c in cells)
