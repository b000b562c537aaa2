"""Suite axes: sweep, seeds and checkpoints parsed, validated and expanded into cells; nested aggregates."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.ablation.axes import baseline_system, suite_replicates, suite_systems
from harness.ablation.cells import eval_key, expand_eval_cells, expand_train_cells
from harness.ablation.problems import SuitePlanError
from harness.ablation.spec import Checkpoints, parse_suite
from harness.ablation.validate import validate_plan
from harness.errors import ConfigError, HarnessError
from harness.keys import content_key

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"


def _raw() -> dict[str, Any]:
    return yaml.safe_load(MINI.read_text(encoding="utf-8"))


def _suite(**changes: Any) -> Any:
    raw = _raw()
    for key, value in changes.items():
        raw[key] = value
    return parse_suite(raw, MINI)


def _with_variant(extra: dict[str, Any], **top: Any) -> Any:
    raw = _raw()
    raw["variants"].append({"id": "axis", "method": "uniform", **extra})
    raw.update(top)
    return parse_suite(raw, MINI)


def _problems(raw: dict[str, Any]) -> str:
    with pytest.raises(HarnessError) as info:
        parse_suite(raw, MINI)
    return str(info.value)


def test_sweep_expands_into_one_system_per_value_with_ids_and_labels():
    suite = _with_variant({"label": "Temp", "sweep": {"param": "train.temperature", "values": [0.02, 0.05, 0.1]}})
    systems = [s for s in suite_systems(suite) if s.variant.id == "axis"]
    assert [s.id for s in systems] == ["axis@temperature=0.02", "axis@temperature=0.05", "axis@temperature=0.1"]
    assert [s.label for s in systems] == ["Temp (temperature=0.02)", "Temp (temperature=0.05)",
                                          "Temp (temperature=0.1)"]
    assert [s.value for s in systems] == [0.02, 0.05, 0.1]
    # values that are no safe file names are numbered in ids, kept in labels
    odd = _with_variant({"sweep": {"param": "options.x", "values": ["a b", "c/d"]}})
    assert [s.id for s in suite_systems(odd)][-2:] == ["axis@x=v1", "axis@x=v2"]
    assert suite_systems(odd)[-1].label == "axis (x=c/d)"


def test_seeds_precedence_variant_scale_over_variant_over_scale_over_suite():
    raw = _raw()
    raw["seeds"] = [1, 2]
    raw["scales"]["tiny"]["seeds"] = [3, 4, 5]
    raw["variants"][1]["seeds"] = [6]
    raw["variants"].append({"id": "axis", "method": "uniform", "seeds": [7], "scales": {"tiny": {"seeds": [8, 9]}}})
    raw["variants"].append({"id": "bm25", "method": "none", "model": "bm25"})
    suite = parse_suite(raw, MINI)
    assert suite.seeds_for(suite.variant("uniform"), "tiny") == [3, 4, 5]
    assert suite.seeds_for(suite.variant("hn-only"), "tiny") == [6]
    assert suite.seeds_for(suite.variant("axis"), "tiny") == [8, 9]
    assert suite.seeds_for(suite.variant("bm25"), "tiny") is None      # untrained: no replicates
    ids = [r.id for r in suite_replicates(suite, "tiny")]
    assert ids == ["uniform@seed=3", "uniform@seed=4", "uniform@seed=5", "hn-only@seed=6", "axis@seed=8",
                   "axis@seed=9", "bm25"]
    del raw["scales"]["tiny"]["seeds"]
    assert parse_suite(raw, MINI).seeds_for(suite.variant("uniform"), "tiny") == [1, 2]


def test_checkpoints_steps_and_every():
    assert Checkpoints(steps=(4, 8, 16, 20)).at(16) == [4, 8]
    assert Checkpoints(every=5).at(16) == [5, 10, 15]
    assert Checkpoints(every=4).at(16) == [4, 8, 12]


@pytest.mark.parametrize("extra, message", [
    ({"sweep": {"param": "lr", "values": [1]}}, "must be options.<method option> or train.<TrainSpec field>"),
    ({"sweep": {"param": "train.lr", "values": [0.1, 0.1]}}, "must be distinct"),
    ({"sweep": {"param": "train.lr", "values": [[1]]}}, "numbers or strings"),
    ({"sweep": {"param": "train.save_every", "values": [1, 2]}}, "does not change the trained weights"),
    ({"sweep": {"param": "train.lrr", "values": [1]}}, "did you mean 'lr'"),
    ({"sweep": {"param": "train.steps", "values": ["many"]}}, "expected"),
    ({"sweep": {"param": "train.lr"}}, "missing 'values'"),
    ({"sweep": {"param": "train.lr", "values": [1], "colour": 2}}, "unknown key 'colour'"),
    ({"seeds": [1, 1]}, "seeds must be distinct"),
    ({"seeds": [-1]}, "non-negative integers"),
    ({"checkpoints": [-1, 4]}, "non-negative integers"),
    ({"checkpoints": {"each": 4}}, "unknown key 'each'"),
    ({"sweep": {"param": "train.seed", "values": [1, 2]}, "seeds": [3]}, "sweeps train.seed and sets 'seeds'"),
])
def test_bad_axes_are_refused_with_the_key(extra, message):
    raw = _raw()
    raw["variants"].append({"id": "axis", "method": "uniform", **extra})
    assert message in _problems(raw)


def test_untrained_variants_take_no_axes():
    raw = _raw()
    raw["variants"].append({"id": "bm25", "method": "none", "model": "bm25", "seeds": [1, 2]})
    assert "trains nothing" in _problems(raw)


def test_nested_aggregates_parse_and_cycles_and_unknown_members_are_refused():
    raw = _raw()
    raw["scales"]["tiny"]["aggregates"] = {"Q": ["latin_qa"], "All": ["Q", "cjk_qa"]}
    cfg = parse_suite(raw, MINI).scale("tiny")
    assert cfg.aggregate_leaves("All") == ["latin_qa", "cjk_qa"]
    assert cfg.aggregate_closure(["All"]) == {"Q": ["latin_qa"], "All": ["Q", "cjk_qa"]}
    raw["scales"]["tiny"]["aggregates"] = {"A": ["B", "latin_qa"], "B": ["A"]}
    assert "aggregates contain each other: A -> B -> A" in _problems(raw)
    raw["scales"]["tiny"]["aggregates"] = {"A": ["latin_q"]}
    assert "did you mean 'latin_qa'" in _problems(raw)


def test_cells_sweep_seed_and_checkpoints_reach_the_spec_but_checkpoints_not_the_key():
    suite = _with_variant({"sweep": {"param": "train.temperature", "values": [0.02, 0.1]}, "seeds": [1, 2],
                           "checkpoints": [4, 12]})
    cells = {c.variant.id: c for c in expand_train_cells(suite, "tiny", load_data=False)}
    assert list(cells) == ["uniform", "hn-only", "axis@temperature=0.02@seed=1", "axis@temperature=0.02@seed=2",
                           "axis@temperature=0.1@seed=1", "axis@temperature=0.1@seed=2"]
    cell = cells["axis@temperature=0.1@seed=2"]
    spec = cell.train_spec
    assert (spec.temperature, spec.seed, spec.save_every, cell.steps) == (0.1, 2, 4, [4, 12])
    assert spec.keep_checkpoints >= spec.steps + 1              # nothing pruned
    assert (cell.system, cell.declared, cell.seed) == ("axis@temperature=0.1", "axis", 2)
    assert len({c.key for c in cells.values()}) == 6
    # the same run without the checkpoints axis has the same key (save_every/keep are not part of it)
    plain = _with_variant({"sweep": {"param": "train.temperature", "values": [0.02, 0.1]}, "seeds": [1, 2]})
    plain_cells = {c.variant.id: c for c in expand_train_cells(plain, "tiny", load_data=False)}
    assert plain_cells["axis@temperature=0.1@seed=2"].key == cell.key
    assert plain_cells["axis@temperature=0.1@seed=2"].steps == []
    # step 0 (the model before training) is its own save: save_every stays the gcd of the later steps
    zero = {c.variant.id: c for c in expand_train_cells(_with_variant({"checkpoints": [0, 4, 12]}), "tiny",
                                                        load_data=False)}["axis"]
    assert (zero.steps, zero.train_spec.save_every, zero.train_spec.save_initial) == ([0, 4, 12], 4, True)
    assert zero.key == {c.variant.id: c for c in expand_train_cells(_with_variant({}), "tiny",
                                                                    load_data=False)}["axis"].key
    assert not spec.save_initial
    # the variant without axes keeps its key and its seed
    base = {c.variant.id: c for c in expand_train_cells(_suite(), "tiny", load_data=False)}
    assert base["uniform"].key == cells["uniform"].key and cells["uniform"].train_spec.seed == 7
    # evaluation cells: one per benchmark for the finished run, one per benchmark and checkpoint
    refs = suite.scale("tiny").benchmarks
    evals = expand_eval_cells([cell], refs, {b.id: "fp-" + b.id for b in refs})
    assert [(e.id, e.benchmark.id) for e in evals] == [
        ("axis@temperature=0.1@seed=2", "latin_qa"), ("axis@temperature=0.1@seed=2", "cjk_qa"),
        ("axis@temperature=0.1@seed=2@step=4", "latin_qa"), ("axis@temperature=0.1@seed=2@step=4", "cjk_qa"),
        ("axis@temperature=0.1@seed=2@step=12", "latin_qa"), ("axis@temperature=0.1@seed=2@step=12", "cjk_qa")]
    assert evals[0].key == content_key({"train": cell.key, "benchmark": "synthetic", "card": "fp-latin_qa"})
    assert evals[2].key == eval_key(cell.key, "synthetic", "fp-latin_qa", 4) != evals[0].key


def test_an_options_sweep_reaches_method_options():
    raw = _raw()
    raw["variants"].append({"id": "g", "method": "groupdro", "sweep": {"param": "options.eta", "values": [0.01, 0.1]}})
    suite = parse_suite(raw, MINI)
    cells = {c.variant.id: c for c in expand_train_cells(suite, "tiny", load_data=False)}
    assert cells["g@eta=0.01"].train_spec.method_options["eta"] == 0.01
    assert cells["g@eta=0.1"].train_spec.method_options["eta"] == 0.1
    assert cells["g@eta=0.01"].key != cells["g@eta=0.1"].key
    validate_plan(suite, "tiny", check_resources=False)


def test_baseline_system_of_a_swept_baseline_is_its_first_point():
    raw = _raw()
    raw["variants"][0]["sweep"] = {"param": "train.lr", "values": [0.002, 0.001]}
    suite = parse_suite(raw, MINI)
    assert baseline_system(suite).id == "uniform@lr=0.002"


@pytest.mark.parametrize("extra, message", [
    ({"method": "groupdro", "sweep": {"param": "options.etaa", "values": [1]}}, "has no option 'etaa' to sweep"),
    ({"checkpoints": [8, 40]}, "beyond the run's 16 steps"),
    ({"model": "bm25"}, "lexical model and cannot be trained"),
    ({"sweep": {"param": "train.warmup_steps", "values": [2, 400]}}, "warmup_steps=400"),
])
def test_plan_validation_checks_every_sweep_point_and_checkpoint(extra, message):
    raw = _raw()
    raw["variants"].append({"id": "axis", "method": "uniform", **extra})
    suite = parse_suite(raw, MINI)
    with pytest.raises(SuitePlanError) as info:
        validate_plan(suite, "tiny", check_resources=False)
    assert message in str(info.value)


def test_bm25_and_aliases_are_baseline_rows():
    raw = _raw()
    raw["variants"] += [{"id": "bm25", "method": "none", "model": "bm25"},
                        {"id": "minilm", "method": "none", "model": "minilm"}]
    suite = parse_suite(raw, MINI)
    validate_plan(suite, "tiny", check_resources=False)
    cells = {c.variant.id: c for c in expand_train_cells(suite, "tiny", load_data=False)}
    assert not cells["bm25"].trains and cells["bm25"].model == "bm25"
    assert cells["bm25"].config == {"method": "none", "model": "bm25"}
    assert cells["minilm"].config == {"method": "none", "model": "minilm"}
    assert cells["bm25"].key != cells["minilm"].key


def test_a_copy_of_the_suite_file_without_axes_keeps_every_key():
    suite = _suite()
    again = parse_suite(copy.deepcopy(_raw()), MINI)
    a = [c.key for c in expand_train_cells(suite, "tiny", load_data=False)]
    b = [c.key for c in expand_train_cells(again, "tiny", load_data=False)]
    assert a == b and len(a) == 2


def test_checkpoints_axis_beyond_steps_is_a_config_error_at_expansion():
    suite = _with_variant({"checkpoints": [40]})
    with pytest.raises(ConfigError, match="beyond the run's 16 steps"):
        expand_train_cells(suite, "tiny", load_data=False)


def test_tdro_paper_scale_defines_beir_15_with_cqadupstack_averaged_over_its_forums():
    from harness.ablation.spec import load_suite
    from harness.stats.replicates import leaf_weights

    cfg = load_suite("tdro").scale("paper")
    beir, cqa = cfg.aggregates["BEIR"], cfg.aggregates["CQADupStack"]
    assert len(beir) == 15 and beir[-1] == "CQADupStack" and len(cqa) == 12
    assert len(cfg.aggregate_leaves("BEIR")) == 14 + 12
    weights = leaf_weights("BEIR", cfg.aggregates)
    assert weights["scifact"] == pytest.approx(1 / 15)
    assert weights["cqadupstack-android"] == pytest.approx(1 / 180)
    assert sum(weights.values()) == pytest.approx(1.0)


def test_replicate_table_shows_mean_sd_of_datasets_and_nested_aggregates():
    import numpy as np

    from harness.ablation.axes import replicate_table
    from harness.evaluation_result import EvaluationResult
    from harness.stats import StatsOptions, compare_suite
    from harness.stats.replicates import average_replicates
    from reports.comparison import comparison_table

    rng = np.random.default_rng(2)
    ids = [f"q{i}" for i in range(20)]
    runs = {(s, d): [EvaluationResult(ids, {"ndcg@10": np.clip(rng.random(20) * 0.4 + lift, 0, 1)})
                     for _ in range(3)]
            for s, lift in (("B", 0.0), ("S", 0.3)) for d in ("a", "b", "c")}
    aggregates = {"AB": ["a", "b"], "All": ["AB", "c"]}
    averaged = {d: {s: average_replicates(runs[(s, d)]) for s in "BS"} for d in "abc"}
    report = compare_suite(averaged, ["ndcg@10"], baseline="B", aggregates=aggregates,
                           options=StatsOptions(test="ttest"))
    table = replicate_table(comparison_table(report), {d: {s: runs[(s, d)] for s in "BS"} for d in "abc"},
                            ["ndcg@10"], aggregates)

    def per_seed(s, d):
        return np.array([r.per_query["ndcg@10"].mean() for r in runs[(s, d)]])

    nested = ((per_seed("S", "a") + per_seed("S", "b")) / 2 + per_seed("S", "c")) / 2
    cell = table.rows[1].cells["All/ndcg@10"]
    assert cell.value == f"{nested.mean() * 100:.1f} ± {np.std(nested, ddof=1) * 100:.1f}"
    assert cell.delta == pytest.approx(report.get("S", "ndcg@10", "All").delta)
    assert cell.marks == ("†",) and cell.bold and not table.rows[0].cells["All/ndcg@10"].bold
    b = per_seed("B", "b")
    assert table.rows[0].cells["b/ndcg@10"].value == f"{b.mean() * 100:.1f} ± {np.std(b, ddof=1) * 100:.1f}"
    assert "Replicates per row: 3." in table.notes[-1]


def test_a_missing_checkpoint_is_refused_with_the_folder_to_delete(tmp_path):
    from harness.ablation.runner import SuiteRun
    from harness.train.result import Checkpoint

    suite = _with_variant({"checkpoints": [4]})
    runner = SuiteRun(suite, "tiny", tmp_path, load_data=False)
    cell = next(c for c in runner.train_cells if c.variant.id == "axis")
    final = Checkpoint(path=tmp_path / "final", workdir=runner.train_dir(cell), method="uniform", step=16,
                       spec_fingerprint="s", data_fingerprint="d")
    with pytest.raises(ConfigError, match="kept no checkpoint of step 4.*delete"):
        runner.checkpoint_at(cell, final, 4)
    model = runner.train_dir(cell) / "checkpoints" / "step-00000004" / "model"
    model.mkdir(parents=True)
    at = runner.checkpoint_at(cell, final, 4)
    assert (at.path, at.step, at.method) == (model, 4, "uniform")
