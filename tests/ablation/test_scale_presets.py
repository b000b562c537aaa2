"""A suite scale whose name is none of a method's presets is refused at validation (file:line) unless it
names the preset it extends (``preset: tiny``); before, it silently took the method's tiny preset."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.ablation.axes import suite_replicates
from harness.ablation.cells import method_preset, replicate_spec
from harness.ablation.problems import SuitePlanError
from harness.ablation.spec import NO_TRAINING, load_suite
from harness.ablation.validate import validate_plan
from harness.cli import main
from harness.errors import ConfigError
from harness.method import get_method

QUICKSTART = Path(__file__).resolve().parents[2] / "suites" / "ablations" / "quickstart.yaml"
SHIPPED = sorted((Path(__file__).resolve().parents[2] / "suites" / "ablations").glob("*.yaml"))


def _suite(tmp_path, scale_head: str, name: str = "quick.yaml") -> Path:
    """The quickstart suite with its 'tiny' scale renamed (and ``scale_head`` lines added under it)."""
    text = QUICKSTART.read_text().replace("\n  tiny:\n", f"\n{scale_head}")
    path = tmp_path / name
    path.write_text(text)
    return path


def _dry_run(capsys, path: Path, scale: str) -> tuple[int, str, str]:
    code = main(["run", str(path), "--scale", scale, "--dry-run", "--results-root", str(path.parent / "results")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_unknown_scale_name_is_refused_with_its_line(tmp_path, capsys):
    path = _suite(tmp_path, "  quick:\n")
    code, _, err = _dry_run(capsys, path, "quick")
    assert code == 2
    line = path.read_text().splitlines().index("  quick:") + 1
    assert f"line {line}, column 3: scales.quick: variant 'uniform': scale 'quick' is not a preset of method " \
           "'uniform' (presets: tiny, small, paper) and does not say which one it extends: add 'preset: <name>'" in err


def test_a_scale_naming_its_preset_runs_that_preset(tmp_path, capsys):
    path = _suite(tmp_path, "  quick:\n    preset: small\n")
    code, out, err = _dry_run(capsys, path, "quick")
    assert code == 0, err
    suite = load_suite(path)
    replicate = next(r for r in suite_replicates(suite, "quick") if r.system.variant.id == "uniform")
    spec = replicate_spec(suite, replicate, "quick", "minilm")
    small = get_method("uniform").spec("small")
    tiny = get_method("uniform").spec("tiny")
    # the suite's own train settings win; what it leaves to the preset comes from 'small', not 'tiny'
    assert spec.lr == 0.001 and spec.steps == 300
    assert small.query_max_length != tiny.query_max_length
    assert (spec.query_max_length, spec.doc_max_length) == (small.query_max_length, small.doc_max_length)


def test_a_misspelt_preset_is_refused_at_its_key(tmp_path, capsys):
    path = _suite(tmp_path, "  quick:\n    preset: smal\n")
    code, _, err = _dry_run(capsys, path, "quick")
    assert code == 2
    line = path.read_text().splitlines().index("    preset: smal") + 1
    assert f"line {line}, column 5: scales.quick.preset: variant 'uniform': scale 'quick': preset 'smal' is not " \
           "a preset of method 'uniform' (presets: tiny, small, paper); did you mean 'small'?" in err


def test_replicate_spec_refuses_rather_than_falling_back(tmp_path):
    suite = load_suite(_suite(tmp_path, "  quick:\n"))      # parsing alone does not check methods
    replicate = next(iter(suite_replicates(suite, "quick")))
    with pytest.raises(ConfigError, match="scale 'quick' is not a preset of method 'uniform'"):
        replicate_spec(suite, replicate, "quick", "minilm")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_suite_still_validates(path):
    suite = load_suite(path)
    for scale, cfg in suite.scales.items():
        for variant in suite.variants:
            if variant.method != NO_TRAINING:     # every trained variant starts from a preset of its method
                assert method_preset(get_method(variant.method), scale, cfg.preset_scale) in \
                    get_method(variant.method).presets
        try:        # methods, presets and specs; no data folders or models are needed
            validate_plan(suite, scale, check_resources=False)
        except SuitePlanError as exc:
            # coco_dr's 'reported' table layout has no columns at 'paper-large' (a table problem of its own)
            assert not [p for p in exc.problems if "preset" in p.message], str(exc)


def test_dry_run_json_of_a_preset_scale(tmp_path, capsys):
    path = _suite(tmp_path, "  quick:\n    preset: tiny\n")
    code = main(["run", str(path), "--scale", "quick", "--dry-run", "--format", "json",
                 "--results-root", str(tmp_path / "results")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)
