"""The tdro suite's paper scales: Table 3's six backbones (stage 1 stays on the Qwen1.5-0.5B proxy and is shared),
and the paper-as-written scale (the paper's text where the released code differs), without the user's data."""
from __future__ import annotations

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.method import get_method

BACKBONES = {"paper": "Qwen/Qwen1.5-0.5B", "paper-1.8b": "Qwen/Qwen1.5-1.8B", "paper-4b": "Qwen/Qwen1.5-4B",
             "paper-7b": "Qwen/Qwen1.5-7B", "paper-mistral-7b": "mistralai/Mistral-7B-v0.1",
             "paper-llama3-8b": "meta-llama/Meta-Llama-3-8B"}
ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def suite():
    return load_suite("tdro")


def _stage1(spec):
    (stage,) = get_method("tdro").stages(spec)
    return stage.spec


def _cells(suite, scale):
    return {c.variant.id: c for c in expand_train_cells(suite, scale, load_data=False)}


def test_six_backbones_share_one_stage1_on_the_proxy(suite):
    stage1_keys, reference_keys = set(), set()
    for scale, model in BACKBONES.items():
        cells = _cells(suite, scale)
        assert cells["baseline"].spec.model == model and cells["top70"].spec.model == model
        s1 = _stage1(cells["top70"].spec)
        assert s1.model == "Qwen/Qwen1.5-0.5B"                               # the proxy, whatever the backbone
        assert (s1.n_hard_negatives, s1.grad_accum, s1.sampling, s1.in_batch_negatives) == (7, 4, "mixed", False)
        stage1_keys.add(s1.fingerprint())
        reference_keys.add(repr(s1.method_options["reference"]))
        spec = cells["ratio"].spec
        assert (spec.batch_size, spec.lr, spec.min_lr_ratio, spec.warmup_steps, spec.steps) == (2048, 1e-4, 0.1, 100,
                                                                                                  1000)
        assert (spec.temperature, spec.pooling, spec.append_eos, spec.precision, spec.seed) == (0.002, "last", True,
                                                                                                 "bf16", 42)
        assert (spec.sampling, spec.in_batch_negatives, spec.cross_batch_negatives) == ("homogeneous", True, True)
    assert len(stage1_keys) == 1 and len(reference_keys) == 1            # trained once for all six backbones


def test_paper_as_written_takes_the_papers_side_of_each_disagreement(suite):
    code, paper = _cells(suite, "paper"), _cells(suite, "paper-as-written")
    assert code["top70"].spec.lora is None and code["top70"].spec.symmetric_doc_prompt
    spec = paper["top70"].spec
    assert (spec.lora.r, spec.lora.alpha, spec.lora.dropout) == (8, 32, 0.1)
    assert spec.lora.target_modules == ALL_PROJECTIONS                 # not peft's default (q_proj, v_proj)
    assert spec.symmetric_doc_prompt is False and spec.gradcache_chunk_size == 64
    assert code["relative"].spec.method_options["mode"] == "code"
    assert paper["relative"].spec.method_options["mode"] == "paper"
    # the baseline is the reference in both: LoRA reaches the stage-1 reference run too
    s1 = _stage1(spec)
    assert s1.lora.target_modules == ALL_PROJECTIONS
    assert s1.method_options["reference"]["lora"]["target_modules"] == ALL_PROJECTIONS


def test_every_paper_benchmark_carries_the_papers_instruction_and_its_own_metrics(suite):
    from suites.benchmarks.prompts import query_prompt

    wiki = "Instruct: Given a question, retrieve Wikipedia passages that answer the question\nQuery: "
    for scale in ("paper", "paper-7b", "paper-as-written"):
        refs = suite.scale(scale).benchmarks
        assert len(refs) == 69
        for ref in refs:
            assert ref.options["query_prompt"] == query_prompt(ref.id), ref.id
            if ref.suite == "mkqa":
                assert ref.options["metrics"] == ["acc@10", "acc@100"]          # no nDCG@10: MKQA has no qrels
            elif ref.suite == "miracl":
                assert ref.options["metrics"] == ["ndcg@10", "recall@100"]
    by_id = {r.id: r.options["query_prompt"] for r in suite.scale("paper").benchmarks}
    assert by_id["miracl-yo"] == by_id["mkqa-zh-tw"] == by_id["nq"] == wiki
    assert by_id["arguana"] == "Instruct: Given a claim, find documents that refute the claim\nQuery: "
    assert by_id["cqadupstack-tex"].startswith("Instruct: Given a question, retrieve detailed question descriptions")
    assert by_id["webis-touche2020"].endswith("persuasive arguments that answer the question\nQuery: ")


def test_dry_run_lists_only_acc_for_mkqa(capsys, tmp_path):
    import json

    from harness.cli import main

    assert main(["run", "tdro", "--scale", "paper", "--dry-run", "--format", "json",
                 "--results-root", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    bench = {b["id"]: b for b in plan["benchmarks"]}
    assert bench["mkqa-ja"]["metrics"] == ["acc@10", "acc@100"] and not bench["mkqa-ja"]["protocol_metrics_added"]
    assert bench["miracl-ja"]["metrics"] == ["ndcg@10", "recall@100"]
    assert bench["scifact"]["metrics"] == ["ndcg@10"] and bench["scifact"]["protocol_metrics_added"]
