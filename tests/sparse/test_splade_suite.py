"""The `splade` ablation suite file (suites/ablations/splade.yaml): valid at every scale, in seconds.

The suite itself runs under ``pytest -m "ablation and splade" --scale tiny`` (slow); these checks
only load and plan it (no weights loaded, nothing trained).
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from harness.ablation.cells import expand_train_cells
from harness.ablation.layout import layout_names, load_layout
from harness.ablation.spec import load_suite
from harness.ablation.validate import load_validated, validate_plan
from harness.cli import main
from harness.train.plan import compute_estimate, estimate_parameters, read_model_config

# BERT-base (bert-base-uncased's config.json): what paper 003's SPLADE starts from.
BERT_BASE = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "intermediate_size": 3072,
             "num_attention_heads": 12, "vocab_size": 30522}


def test_the_suite_plan_validates_at_every_scale():
    """The file, variants, method options, metrics, benchmarks and layouts; no model or data is opened."""
    suite = load_suite("splade")
    assert set(suite.scales) == {"tiny", "smoke", "small", "paper"} and suite.baseline == "splade"
    for scale in suite.scales:
        validate_plan(suite, scale, check_resources=False)


@pytest.mark.needs_shared
def test_the_small_scale_validates_with_its_real_training_data(shared_data):
    suite = load_validated("splade", "small")
    cells = {c.variant.id: c for c in expand_train_cells(suite, "small", load_data=False)}
    entry = suite.scale("small").data[0]
    assert entry["negatives_run"].endswith("scifact-train-bm25-top10.trec.gz")
    from harness.ablation.resolve import resolve_data_entry
    from harness.data.collections import load_training_data

    data = load_training_data([resolve_data_entry(e) for e in suite.scale("small").data])
    sizes = dict(zip(data.names, data.sizes))
    assert sizes == {"scifact-train": 809, "msmarco": 100}
    # Every SciFact train query has BM25 negatives (the top 10 minus its judged documents).
    rows = data.sources[0].rows
    assert all(1 <= len(r.neg) <= 10 for r in rows) and sum(len(r.neg) for r in rows) > 7000
    assert cells["splade"].spec is not None and cells["splade"].spec.model == "splade-tiny"


def test_variants_differ_only_in_their_ablated_options():
    suite = load_suite("splade")
    cells = {c.variant.id: c for c in expand_train_cells(suite, "tiny", load_data=False)}
    base = cells["splade"].train_spec
    assert cells["splade-sum"].train_spec.method_options == {**base.method_options, "pooling": "sum"}
    sweep = [v for v in cells if v.startswith("lambda-")]
    assert len(sweep) == 4
    lambdas = []
    for vid in sweep:
        spec = cells[vid].train_spec
        opts = spec.method_options
        assert opts["lambda_q"] == opts["lambda_d"]
        assert dataclasses.replace(spec, method_options={}) == dataclasses.replace(base, method_options={})
        lambdas.append(opts["lambda_q"])
    assert lambdas == sorted(lambdas) and len(set(lambdas)) == 4
    untrained = {v: c.model for v, c in cells.items() if not c.trains}
    # the released SPLADE++ / SPLADE-v3 rows evaluate the shipped SPLADE-tiny below paper scale, the dense echo
    # row (Table 2's Echo Embeddings Mistral) the tiny decoder through the same dense echo encoder
    assert untrained == {"splade-tiny": "splade-tiny", "bm25": "bm25", "minilm": "minilm",
                         "spladepp": "splade-tiny", "spladev3": "splade-tiny", "echo-dense": "tiny-decoder-echo-dense"}
    paper = {c.variant.id: c.model for c in expand_train_cells(suite, "paper", load_data=False) if not c.trains}
    assert paper["echo-dense"] == "jspringer/echo-mistral-7b-instruct-lasttoken"
    # SPLADE++-style candidates (naver's InBatchPairwiseNLL) with the BM25 negative; the decoder rows: the paper's
    for vid, cell in cells.items():
        if cell.trains:
            opts = cell.train_spec.method_options
            expected = "paper" if cell.method == "echo-splade" else "official"
            assert opts["candidates"] == expected, vid
            assert cell.train_spec.n_hard_negatives == (0 if expected == "paper" else 1), vid


def test_paper_scale_has_paper_003s_settings():
    suite = load_suite("splade")
    assert suite.scale("paper").dry_run_only
    for cell in expand_train_cells(suite, "paper", load_data=False):
        if not cell.trains:
            continue
        s = cell.train_spec
        backbone = "mistralai/Mistral-7B-v0.3" if cell.method == "echo-splade" else "bert-base-uncased"
        assert (s.model, s.batch_size, s.query_max_length, s.doc_max_length) == (backbone, 512, 256, 256)
        if cell.method == "echo-splade" and s.lora is not None:      # QLoRA r 16, alpha 8, dropout 0.1
            assert (s.lora.r, s.lora.alpha, s.lora.dropout) == (16, 8, 0.1)
            assert s.method_options["quantization"] == "4bit"
        assert (s.lr, s.warmup_steps, s.steps, s.schedule) == (2e-5, 6000, 150_000, "linear")
        assert s.n_hard_negatives == 0 and s.in_batch_negatives          # in-batch negatives only
        assert s.method_options["lambda_warmup_steps"] == 50_000
        assert (s.similarity, s.temperature) == ("dot", 1.0)
        assert s.method_options["candidates"] == "paper"                   # SpladeRankingLoss: in-batch only
        # where the paper is silent, naver/splade's trainer: AdamW eps 1e-6, weight decay 0.01, no clipping
        assert (s.adam_eps, s.weight_decay, s.max_grad_norm, s.grad_accum) == (1e-6, 0.01, 0.0, 1)
    released = {c.variant.id: c.model for c in expand_train_cells(suite, "paper", load_data=False) if not c.trains}
    assert released["spladepp"] == "naver/splade-cocondenser-ensembledistil"
    assert released["spladev3"] == "naver/splade-v3"


def test_smoke_scale_runs_the_flops_ramp_and_the_decoder_stand_in():
    suite = load_suite("splade")
    cells = {c.variant.id: c for c in expand_train_cells(suite, "smoke", load_data=False)}
    assert cells["splade"].train_spec.method_options["lambda_warmup_steps"] == 4
    assert cells["echo-lora"].model == "tiny-decoder-untied" and cells["echo-lora"].train_spec.lora is not None
    assert cells["spladepp"].model == cells["spladev3"].model == "splade-tiny"


def test_paper_dry_run_prints_the_plan(capsys):
    assert main(["run", "splade", "--scale", "paper", "--dry-run", "--results-root", "unused-results"]) == 0
    out = capsys.readouterr().out
    trained = [line for line in out.splitlines() if "method=splade" in line]
    assert len(trained) == 6
    assert all("model=bert-base-uncased steps=150000 batch=512" in line and "lengths=256/256" in line
               for line in trained)
    assert len(re.findall(r"benchmark \S+\s+suite=beir", out)) == 13


def test_paper_compute_estimate_for_bert_base():
    """The GPU-hours of one paper cell from BERT-base's architecture (harness/train/plan.py's formula)."""
    cell = next(c for c in expand_train_cells(load_suite("splade"), "paper", load_data=False) if c.trains)
    params = estimate_parameters(BERT_BASE)
    assert params == {"non_embedding": 84_934_656, "total": 84_934_656 + 30522 * 768}
    estimate = compute_estimate(cell.train_spec, params["non_embedding"])
    assert estimate["tokens"] == 150_000 * 512 * (256 + 256)          # query + positive, no hard negative
    # 8 FLOPs per parameter and token (training with gradient checkpointing) at 40% of 989 TFLOPS.
    assert estimate["gpu_hours"] == pytest.approx(8 * 84_934_656 * 150_000 * 512 * 512 / (0.4 * 989e12) / 3600)
    assert 18.7 < estimate["gpu_hours"] < 18.8


def test_paper_dry_run_prints_gpu_hours(capsys):
    assert read_model_config("bert-base-uncased") is not None
    assert main(["run", "splade", "--scale", "paper", "--dry-run", "--results-root", "unused-results"]) == 0
    assert "GPU-h" in capsys.readouterr().out


def test_every_layout_loads_at_every_scale():
    suite = load_suite("splade")
    names, default = layout_names(suite)
    assert default == "table1" and set(names) == {"table1", "ablations", "lambda", "reported", "table1-reported",
                                                    "table2-reported"}
    for scale in suite.scales:
        if suite.scale(scale).recipe is not None:
            continue        # a smoke scale's table is the plain comparison table (it checks the code path)
        for name in names:
            layout = load_layout(suite, scale, name)
            assert layout.columns
    # Paper 003's Table 1: BEIR datasets as rows, systems as columns (baselines first).
    table1 = load_layout(suite, "paper", "table1")
    assert table1.kind == "breakdown" and [c.benchmark for c in table1.columns] == ["bm25", "minilm", "splade-tiny",
                                                                                    "splade", "echo-lora"]
    paper = suite.scale("paper")
    assert [b.label for b in paper.benchmarks] == [
        "TREC-COVID", "NFCorpus", "NQ", "HotpotQA", "FiQA-2018", "ArguAna", "Touché-2020", "Quora", "DBPedia",
        "SCIDOCS", "FEVER", "Climate-FEVER", "SciFact"]
    assert all(b.suite == "beir" for b in paper.benchmarks) and len(paper.aggregates["BEIR-13"]) == 13


def test_table_layouts_name_every_printed_system_and_dataset():
    """Tables 1 and 2 of paper 003: every printed column is a reported row; at paper scale every BEIR-13 dataset
    row and the average are columns."""
    suite = load_suite("splade")
    t1 = load_layout(suite, "paper", "table1-reported")
    printed = [g.reported.reported.column for g in t1.rows if g.reported is not None]
    assert printed == ["BM25", "ColBERTv2", "SPLADE++", "Spladev3", "ElserV2", "Bert-base +Sent-Trans",
                       "Echo-Mistral +Sent-Trans"]
    assert [c.reported_row for c in t1.columns] == [
        "TREC-COVID", "NFCorpus", "NQ", "HotpotQA", "FiQA-2018", "ArguAna", "Touché-2020", "Quora", "DBPedia",
        "SCIDOCS", "FEVER", "Climate-FEVER", "SciFact", "Avg"]
    t2 = load_layout(suite, "paper", "table2-reported")
    assert [g.reported.reported.column for g in t2.rows if g.reported is not None] == [
        "LLM2Vec Mistral Supervised", "Echo Embeddings Mistral", "Echo-Mistral SPLADE"]


@pytest.mark.parametrize("layout,rows,printed", [
    ("table1-reported", ["bm25", "spladepp", "spladev3", "splade", "echo-lora"],
     {"BM25": 0.4402, "SPLADE++": 0.5072, "Echo-Mistral +Sent-Trans": 0.5507}),
    ("table2-reported", ["echo-lora", "plain-lora", "echo-full", "echo-dense"],
     {"LLM2Vec Mistral Supervised": 0.576, "Echo Embeddings Mistral": 0.5669, "Echo-Mistral SPLADE": 0.5507}),
])
def test_tables_1_and_2_render_from_a_finished_tiny_run(tmp_path, capsys, layout, rows, printed):
    """Tables 1 and 2 at tiny scale on a finished run written as the runner writes it: our rows' cells are their
    own per-query means (Avg: the pooled mean over both benchmarks' queries), the printed rows follow with paper
    003's numbers in the Avg column (stand-in data at tiny: shown, not comparable), and the markdown renders."""
    import json

    import numpy as np

    from harness.ablation.axes import replicates, suite_systems
    from harness.ablation.layout import render_layout
    from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
    from harness.data.run import Run
    from harness.evaluation_result import EvaluationResult
    from harness.protocol import ProtocolCard
    from harness.store import write_result

    suite, qids, metrics = load_suite("splade"), [f"q{i}" for i in range(6)], ("ndcg@10", "recall@100")
    rng, report, cells, scores = np.random.default_rng(3), report_dir(tmp_path, "splade", "tiny"), [], {}
    report.mkdir(parents=True)
    for system in suite_systems(suite):
        for replicate in replicates(suite, system, "tiny"):
            cells.append({"variant": replicate.id, "key": f"k-{replicate.id}"})
            for bench in suite.scale("tiny").benchmarks:
                values = {m: rng.random(len(qids)) for m in metrics}
                scores[(replicate.id, bench.id)] = values
                write_result(cell_result_dir(report, replicate.id, bench.id),
                             run=Run.from_arrays(qids[:1], ["d1"], [1.0]), evaluation=EvaluationResult(qids, values),
                             card=ProtocolCard(suite=bench.suite, dataset=bench.id, metrics=metrics), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": "splade", "cells": cells}), encoding="utf-8")
    table = render_layout(suite, "tiny", tmp_path, layout)
    labels = [r.label for r in table.rows]
    wanted = [suite.variant(v).label for v in rows]
    first = labels.index(wanted[0])      # table 2 shows the baseline (SPLADE max) first: the tests compare to it
    assert labels[first:first + len(wanted)] == wanted and first == (0 if "splade" in rows else 1)
    ours, printed_rows = table.rows[first:first + len(wanted)], table.rows[first + len(wanted):]
    assert printed_rows and all(r.group == "Printed in paper 003" for r in printed_rows)
    keys = {tuple(c.key.split("/")): c.key for c in table.columns}     # "<benchmark>/<metric>"
    for vid, row in zip(rows, ours):
        qa, syn = scores[(vid, "latin_qa")]["ndcg@10"], scores[(vid, "latin_synonyms")]["ndcg@10"]
        assert row.cells[keys[("latin_qa", "ndcg@10")]].value == pytest.approx(qa.mean())
        assert row.cells[keys[("latin_synonyms", "ndcg@10")]].value == pytest.approx(syn.mean())
        assert row.cells[keys[("Avg", "ndcg@10")]].value == pytest.approx(np.concatenate([qa, syn]).mean())
    avg = keys[("Avg", "ndcg@10")]
    shown = {r.label: r.cells[avg].value for r in printed_rows}
    for column, value in printed.items():
        assert shown[f"{column} (paper 003, Tab. {layout[5]})"] == pytest.approx(value), (column, shown)
    assert main(["table", "suite", "splade", "--scale", "tiny", "--layout", layout,
                 "--results-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(suite.variant(v).label in out for v in rows) and "§" in out
