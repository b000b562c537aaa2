"""A run's key follows the code revision of the methods of the stages it starts from.

PEG's fine-tuning starts from RetroMAE pre-training (option ``pretrain``). The spec holds the stage's settings,
but not its method's ``revision``: when RetroMAE was revised (long texts cut as the released preprocessing does,
revision 2), the pre-training stage got a new key and the fine-tuning kept its old one, so a stored fine-tuning
trained on the old pre-training would have been reused."""
from __future__ import annotations

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.keys import content_key
from harness.method import METHODS, get_method, train_run_config


def _peg(scale: str):
    return {c.variant.id: c for c in expand_train_cells(load_suite("peg"), scale, load_data=False)}["peg"]


def test_a_revised_stage_method_changes_the_key_of_the_run_that_starts_from_it(monkeypatch):
    cell = _peg("smoke")
    assert [s.method for s in get_method("peg").stages(cell.spec)] == ["retromae"]
    assert cell.config["stage_revisions"] == {"retromae": METHODS.get("retromae").revision} != {}
    assert cell.key == content_key(train_run_config("peg", cell.spec, cell.data_fingerprint))
    monkeypatch.setattr(METHODS.get("retromae"), "revision", METHODS.get("retromae").revision + 1)
    assert content_key(train_run_config("peg", cell.spec, cell.data_fingerprint)) != cell.key
    # the PEG method's own revision is unchanged: only the stage's moved the key
    assert "revision" not in cell.config


def test_a_run_without_revised_stages_keeps_its_key(monkeypatch):
    """No stage, or stages of methods at revision 1: the config is as before (every stored key kept)."""
    tiny = _peg("tiny")
    assert get_method("peg").stages(tiny.spec) == [] and "stage_revisions" not in tiny.config
    cell = _peg("smoke")
    monkeypatch.setattr(METHODS.get("retromae"), "revision", 1)
    assert "stage_revisions" not in train_run_config("peg", cell.spec, cell.data_fingerprint)
