"""A suite's smoke scale runs its paper recipe unchanged on stand-ins: every setting of every smoke cell is the
paper cell's, except the model (through the stand-ins) and what the limits cap (steps with warmup's share,
batch size, lengths); stages a method trains first inherit the caps.  No training here (the runs are under
the ``smoke`` marker, tests/smoke)."""
from __future__ import annotations

import dataclasses
import textwrap

import pytest

from harness.ablation.axes import replicates, suite_systems
from harness.ablation.cells import replicate_spec
from harness.ablation.spec import NO_TRAINING, load_suite
from harness.errors import ConfigError
from harness.method import get_method
from harness.method.stages import flatten_stages
from harness.train.spec import TrainSpec

PAPER_SUITES = ("tdro", "peg", "coco_dr", "splade", "mining")
CAPPED = {"model", "steps", "warmup_steps", "batch_size", "grad_accum", "query_max_length", "doc_max_length",
          "limits", "method_options",
          # intermediate checkpoints are not borrowed by a smoke scale (spec._borrow_recipes): their saving follows
          "save_every", "save_initial", "keep_checkpoints"}


def _specs(suite, scale: str) -> dict[str, TrainSpec]:
    out = {}
    for system in suite_systems(suite):
        if system.variant.method == NO_TRAINING:
            continue
        cfg = suite.scale(scale)
        model = system.variant.model_at(scale) or cfg.model
        out[system.id] = replicate_spec(suite, replicates(suite, system, scale)[0], scale, model)
    return out


@pytest.mark.parametrize("name", PAPER_SUITES)
def test_smoke_cells_run_the_paper_recipe(name):
    suite = load_suite(name)
    smoke, paper = _specs(suite, "smoke"), _specs(suite, "paper")
    assert smoke.keys() == paper.keys() and smoke
    limits = suite.scale("smoke").limits
    for system, spec in smoke.items():
        reference = paper[system]
        for f in dataclasses.fields(TrainSpec):
            if f.name not in CAPPED:
                assert getattr(spec, f.name) == getattr(reference, f.name), (system, f.name)
        assert spec.limits == limits
        assert spec.steps == min(reference.steps, limits["steps"])
        assert spec.batch_size <= limits["batch_size"] and spec.doc_max_length <= limits["doc_max_length"]
        # warmup keeps its share of the steps (at least one step when the recipe warms up)
        assert (spec.warmup_steps > 0) == (reference.warmup_steps > 0)
        # method options: the paper's, with models through the stand-ins (and the variant's own smoke options)
        cfg = suite.scale("smoke")
        variant_smoke = next(s for s in suite_systems(suite) if s.id == system).variant.scales["smoke"]
        for option, value in spec.method_options.items():
            if option in (variant_smoke.get("options") or {}) or option in cfg.train.get("method_options", {}):
                continue
            assert value == cfg.stand_in(reference.method_options.get(option, value)), (system, option)


def test_tdro_smoke_keeps_the_paper_pieces():
    spec = _specs(load_suite("tdro"), "smoke")["relative"]
    assert (spec.pooling, spec.append_eos, spec.schedule, spec.temperature) == ("last", True, "cosine", 0.002)
    assert spec.lora is None and spec.symmetric_doc_prompt      # the released scripts: full fine-tuning
    # stage 1 of the released script (7 hard negatives, 4 accumulation steps, mixed batches), capped the same way
    stages = {p.stage.name: p.stage for p in flatten_stages(get_method("tdro"), spec, None)}
    stage1 = stages["stage1"].spec
    assert (stage1.n_hard_negatives, stage1.grad_accum, stage1.sampling) == (7, 4, "mixed")
    assert stage1.steps == 4 and stage1.batch_size == 8 and stage1.limits == spec.limits
    assert stages["reference"].spec.steps == 4 and stages["reference"].spec.limits == spec.limits


def test_coco_pretraining_stage_is_capped_too():
    spec = _specs(load_suite("coco_dr"), "smoke")["coco"]
    coco = next(p.stage for p in flatten_stages(get_method("dro-erm"), spec, None))
    assert coco.method == "coco" and coco.spec.steps == 4      # the paper recipe: 129,000 steps
    (corpus,) = coco.spec.method_options["corpora"]          # the stand-in corpus, resolved to its folder
    assert corpus.endswith("eval/cjk_qa")


def test_limits_cap_and_keep_the_schedule_shape():
    spec = TrainSpec(steps=1000, warmup_steps=100, batch_size=2048, grad_accum=4, query_max_length=128,
                     doc_max_length=512, limits={"steps": 20, "batch_size": 10, "doc_max_length": 64})
    assert (spec.steps, spec.warmup_steps, spec.batch_size, spec.grad_accum) == (20, 2, 8, 4)
    assert (spec.query_max_length, spec.doc_max_length) == (128, 64)
    assert spec.replace(lr=1e-3).steps == 20                                  # idempotent through replace
    assert TrainSpec(steps=3, warmup_steps=1, limits={"steps": 20}).steps == 3   # a cap never raises a value
    with pytest.raises(ConfigError, match="unknown lr"):
        TrainSpec(limits={"lr": 1})
    with pytest.raises(ConfigError, match="positive integers"):
        TrainSpec(limits={"steps": 0})


def test_specs_without_limits_keep_their_keys():
    # the limits field enters a key only when set: every key computed before it existed is unchanged
    assert "limits" not in TrainSpec().config_dict()
    assert TrainSpec().fingerprint() == "42d3be3812732c61595d9d25"


def _suite(tmp_path, smoke: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""\
        name: s
        version: 1
        baseline: u
        variants:
          - {id: u, method: uniform}
        scales:
          tiny:
            model: synthetic:default/tiny-bert
            data: [synthetic:default]
            benchmarks:
              - {id: syn, suite: synthetic, dataset_dir: "synthetic:default/eval"}
          smoke:
            model: synthetic:default/tiny-bert
            data: [synthetic:default]
            benchmarks:
              - {id: syn, suite: synthetic, dataset_dir: "synthetic:default/eval"}
        """) + textwrap.indent(textwrap.dedent(smoke), "    "), encoding="utf-8")
    return str(path)


def test_bad_smoke_scales_name_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"s.yaml:17:5: scales.smoke.recipe: .*recipe 'tinny' is not another "
                                          r"scale.*did you mean 'tiny'"):
        load_suite(_suite(tmp_path, "recipe: tinny\n"))
    with pytest.raises(ConfigError, match=r"limits: unknown 'step' \(did you mean 'steps'\?\)"):
        load_suite(_suite(tmp_path, "recipe: tiny\nlimits: {step: 2}\n"))
