"""Every resolved setting of every cell and stage carries its source and the kind of that source (paper,
official code, METHODS.md, the suite file, or a harness default); ``--strict-provenance`` refuses a run whose
number-changing settings rest on a harness default alone, listing each."""
from __future__ import annotations

import json
import textwrap

import pytest

from harness.ablation.provenance import (
    SOURCE_KINDS,
    provenance_counts,
    resolved_settings,
    source_kind,
    strict_provenance_problems,
)
from harness.ablation.spec import load_suite
from harness.cli import main


@pytest.mark.parametrize("source, kind", [
    ("tdro.yaml:41", "suite"),
    ("my-suite.yml:7", "suite"),
    ("the suite's tdro option stage1", "suite"),
    ("method peg preset 'paper' (paper 002 §3.1 (alpha = 0.5))", "paper"),
    ("method peg default (harness default: the spec's temperature (paper 002 §3.1: 0.01))", "harness"),
    ("method splade preset 'paper' (naver/splade conf/train/config/splade.yaml (weight decay 0.01))", "code"),
    ("method mined preset 'paper' (METHODS.md 5.2 item 3: the released scripts pass no --lora)", "spec"),
    ("TrainSpec default", "harness"),
    ("method tdro stage stage1", "harness"),
    ("METHODS.md 1.4 (the released stage-1 script)", "spec"),
    ("", "harness"),
])
def test_source_kinds(source, kind):
    assert source_kind(source) == kind


def test_stages_are_listed_with_their_declared_sources():
    settings = resolved_settings(load_suite("tdro"), "tiny")
    stage1 = {s.name: s for s in settings if s.system == "relative" and s.stage == "stage 1 (tdro-weights, relative)"}
    # stage 1 of the released scripts: mixed batches, hard negatives only (METHODS.md 1.4)
    assert stage1["train.sampling"].value == "mixed" and stage1["train.sampling"].kind == "spec"
    assert stage1["train.in_batch_negatives"].value is False
    assert stage1["train.in_batch_negatives"].source.startswith("METHODS.md 1.4")
    # a value the stage keeps from its owner keeps the owner's source
    own = {s.name: s for s in settings if s.system == "relative" and s.stage is None}
    assert stage1["train.lr"].value == own["train.lr"].value and stage1["train.lr"].source == own["train.lr"].source
    # the reference run stage 1 needs is listed below it
    assert any(s.stage == "stage 1 (tdro-weights, relative) / reference (uniform)" for s in settings)
    counts = provenance_counts(settings)
    assert counts["total"] == len(settings) == sum(counts[k] for k in SOURCE_KINDS)


def _suite(tmp_path, extra_train: str = "") -> str:
    path = tmp_path / "strict.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: strict
        version: 1
        baseline: uniform
        variants:
          - id: uniform
            method: uniform
        metrics: [ndcg@10]
        scales:
          tiny:
            model: synthetic:default/tiny-bert
            data: [synthetic:default]
            train: {{steps: 2, batch_size: 4{extra_train}}}
            benchmarks:
              - {{id: syn, suite: synthetic, dataset_dir: "synthetic:default/eval"}}
        """), encoding="utf-8")
    return str(path)


def test_a_suite_file_line_replaces_a_harness_default(tmp_path):
    plain = resolved_settings(load_suite(_suite(tmp_path)), "tiny")
    eps = next(s for s in plain if s.name == "train.adam_eps")
    assert eps.kind == "harness" and eps in strict_provenance_problems(plain)
    given = resolved_settings(load_suite(_suite(tmp_path, ", adam_eps: 1.0e-6")), "tiny")
    eps = next(s for s in given if s.name == "train.adam_eps")
    assert eps.value == 1e-6 and eps.source == "strict.yaml:12" and eps.kind == "suite"
    assert eps not in strict_provenance_problems(given)
    problems = strict_provenance_problems(given)
    assert len(problems) == len(strict_provenance_problems(plain)) - 1
    # logging settings change no number and None is a switch left off: neither is a problem
    assert all(p.name != "train.log_every" and p.value is not None and p.value != {} for p in problems)


def test_strict_provenance_refuses_and_lists(tmp_path, capsys):
    suite = _suite(tmp_path)
    assert main(["run", suite, "--scale", "tiny", "--dry-run", "--strict-provenance",
                 "--results-root", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "change numbers and rest only on a harness default" in err
    assert "uniform: train.adam_eps = 1e-08  <- TrainSpec default" in err
    assert not (tmp_path / "r").exists()          # refused before any work


def test_dry_run_json_lists_every_resolved_setting(tmp_path, capsys):
    assert main(["run", "tdro", "--dry-run", "--scale", "tiny", "--results-root", str(tmp_path),
                 "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    provenance = plan["provenance"]
    settings = provenance["settings"]
    assert provenance["counts"]["total"] == len(settings)
    assert {s["kind"] for s in settings} <= set(SOURCE_KINDS)
    assert provenance["harness_defaults"] == sum(
        1 for s in settings if s["kind"] == "harness" and s["value"] is not None and s["value"] != {}
        and s["name"] not in ("train.log_every", "train.tensorboard", "train.progress"))
    top60 = next(s for s in settings if s["system"] == "top60" and s["stage"] is None
                 and s["name"] == "options.percent")
    assert top60["value"] == 60 and top60["kind"] == "suite"


def test_each_result_manifest_keeps_the_settings_and_their_sources(tmp_path, capsys):
    path = tmp_path / "strict.yaml"
    _suite(tmp_path)
    text = path.read_text().replace('"synthetic:default/eval"', '"synthetic:default/eval/latin_qa"')
    path.write_text(text.replace("    method: uniform\n", "    method: uniform\n  - id: hn-only\n    method: uniform\n"
                                 "    train: {in_batch_negatives: false}\n", 1))
    assert main(["run", str(path), "--scale", "tiny", "--results-root", str(tmp_path / "r"), "--no-progress"]) == 0
    cells = [json.loads(m.read_text())["cell"] for m in (tmp_path / "r" / "cells" / "eval").glob("*/manifest.json")]
    record = next(c for c in cells if c["variant"] == "uniform")["settings"]
    steps = next(s for s in record if s["name"] == "train.steps" and s["stage"] is None)
    assert steps == {"stage": None, "name": "train.steps", "value": 2, "source": "strict.yaml:15", "kind": "suite"}
    expected = [{k: v for k, v in s.__dict__.items() if k != "system"}
                for s in resolved_settings(load_suite(str(path)), "tiny") if s.system == "uniform"]
    assert json.loads(json.dumps(expected, default=str)) == record
