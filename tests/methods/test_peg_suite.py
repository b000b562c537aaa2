"""The `peg` ablation suite file: its variants are valid PEG option sets, every scale resolves,
and the paper scale's dry run prints the plan here, without the user's data or weights."""
from __future__ import annotations

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from methods.peg import PEG


def test_variants_are_the_issue_ablations():
    suite = load_suite("peg")
    assert suite.baseline == "vanilla" and set(suite.scales) == {"tiny", "smoke", "small", "paper", "paper-public"}
    options = {v.id: PEG().resolve_options(v.options) for v in suite.variants}
    # the trained rows are PEG's; the rest are released checkpoints evaluated as they are (test_released_rows.py)
    assert all(v.method == "peg" for v in suite.variants if v.method != "none")
    assert [v.id for v in suite.variants if v.method == "none"] == ["peg-released", "bge-large-zh", "bge-base-zh",
                                                                    "m3e-base"]
    vanilla = options["vanilla"]
    assert not vanilla["weight_queries"] and not vanilla["scale_negatives"]
    full = options["peg"]
    assert full == PEG.default_options                                   # the paper's loss, a_mode "pos"
    assert not options["no-wq"]["weight_queries"] and options["no-wq"]["scale_negatives"]
    assert options["no-an"]["weight_queries"] and not options["no-an"]["scale_negatives"]
    assert options["const-t"]["t_mode"] == "constant"
    assert options["a-neg"]["a_mode"] == "neg"


def test_paper_scale_is_the_paper_recipe_without_data(monkeypatch):
    monkeypatch.delenv("HARNESS_PEG_DATA", raising=False)
    cells = [c for c in expand_train_cells(load_suite("peg"), "paper", load_data=False) if c.trains]
    assert len({c.key for c in cells}) == 6
    spec = cells[0].spec
    assert (spec.batch_size, spec.n_hard_negatives, spec.query_max_length, spec.doc_max_length) == (13824, 5, 64, 256)
    assert (spec.temperature, spec.lr, spec.schedule, spec.similarity) == (0.01, 1e-5, "linear", "cos")
    assert cells[0].data_entries == ["{peg_data}/train"]
    assert load_suite("peg").scale("paper").dry_run_only


def test_paper_dry_run_prints_the_plan(capsys, monkeypatch, tmp_path):
    from harness.cli import main

    monkeypatch.delenv("HARNESS_PEG_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["run", "peg", "--scale", "paper", "--dry-run", "--results-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "10 training cells x 14 benchmarks" in out and "{peg_data}/train" in out     # 6 trained + 4 released
    assert out.count("batch=13824") == 6 and "lengths=64/256" in out
    assert "GPU-hours" in out                                               # BERT-large compute estimate


@pytest.mark.parametrize("scale,steps,tau", [("tiny", 150, 0.05), ("small", 80, 0.01)])
def test_cpu_scales(scale, steps, tau):
    suite = load_suite("peg")
    cells = [c for c in expand_train_cells(suite, scale, load_data=False) if c.trains]
    assert len({c.key for c in cells}) == 6
    assert {(c.spec.steps, c.spec.temperature) for c in cells} == {(steps, tau)}


@pytest.mark.parametrize("scale", ["paper", "paper-public"])
def test_paper_scales_pretrain_first_and_rest_on_no_harness_default(monkeypatch, scale):
    from harness.ablation.provenance import resolved_settings, strict_provenance_problems

    monkeypatch.delenv("HARNESS_PEG_DATA", raising=False)
    suite = load_suite("peg")
    cells = [c for c in expand_train_cells(suite, scale, load_data=False) if c.trains]
    assert cells[0].data_entries == ["{peg_data}/" + ("train" if scale == "paper" else "peg-public")]
    stages = [PEG().stages(c.spec) for c in cells]
    assert all(len(s) == 1 and s[0].method == "retromae" and s[0].starts_from for s in stages)
    assert len({s[0].spec.fingerprint() for s in stages}) == 1                 # one pre-training run for all rows
    pre = stages[0][0].spec
    assert (pre.lr, pre.batch_size, pre.doc_max_length, pre.steps, pre.schedule) == (2e-5, 1024, 512, 172852,
                                                                                     "linear")
    assert pre.method_options["corpora"] == ["{peg_data}/pretrain"]
    spec = cells[0].spec
    assert (spec.pooling, spec.warmup_steps, spec.weight_decay, spec.precision) == ("cls", 0, 0.01, "bf16")
    assert strict_provenance_problems(resolved_settings(suite, scale)) == []


@pytest.mark.parametrize("scale", ["tiny", "smoke", "paper-public"])
def test_every_layout_validates_at_the_scale(capsys, monkeypatch, tmp_path, scale):
    """A run validates every table layout at its scale first (each must have columns there, except at smoke)."""
    from harness.cli import main

    monkeypatch.delenv("HARNESS_PEG_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["run", "peg", "--scale", scale, "--dry-run", "--results-root", str(tmp_path)]) == 0
    assert f"at scale {scale}: 10 training cells" in capsys.readouterr().out
