"""Released checkpoints and zero-shot baselines as rows of the paper suites (tdro Table 3/4, peg Tables 1-4,
mining Tables 1/14): at the paper scales each row evaluates its hub model with the registry's encoding (pooling,
normalisation, prompts, EOS, each with a source); below paper scale every such row of a suite is one shared cell
(the scale's untrained backbone), so the tiny default run grows by one evaluation, not one per row."""
from __future__ import annotations

import json

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.ablation.resolve import resolve_model as resolve_suite_model
from harness.cli import main
from harness.encoders.refs import resolve_model

TDRO = {"mcontriever": "facebook/mcontriever-msmarco",
        "me5-large-inst": "intfloat/multilingual-e5-large-instruct", "e5-mistral": "intfloat/e5-mistral-7b-instruct",
        "released-llama3-8b-top70": "tdro-llm/s2-tdro-Llama-3-8B-top70",
        "released-qwen0.5b-baseline": "tdro-llm/s0-baseline-Qwen1.5-0.5B",
        "released-qwen0.5b-top70": "tdro-llm/s2-tdro-Qwen1.5-0.5B-top70",
        "released-qwen0.5b-reweighting": "tdro-llm/s2-tdro-Qwen1.5-0.5B-curr"}
PEG = {"peg-released": "TownsWu/PEG", "bge-large-zh": "BAAI/bge-large-zh", "bge-base-zh": "BAAI/bge-base-zh",
       "m3e-base": "moka-ai/m3e-base"}
MINING = {"zs-mbert": "bert-base-multilingual-cased", "zs-mdpr": "castorini/mdpr-tied-pft-msmarco",
          "zs-mcontriever": "facebook/mcontriever-msmarco", "zs-me5-large": "intfloat/multilingual-e5-large",
          "zs-bge-m3": "BAAI/bge-m3"}
ROWS = {"tdro": TDRO, "peg": PEG, "mining": MINING}
PAPER_SCALES = {"tdro": ["paper", "paper-1.8b", "paper-4b", "paper-7b", "paper-mistral-7b", "paper-llama3-8b",
                         "paper-as-written"],
                "peg": ["paper", "paper-public"],
                "mining": ["paper", "paper-mbert", "paper-mdpr", "paper-me5", "paper-cos", "paper-4x12"]}


def _none_cells(suite, scale):
    return {c.variant.id: c for c in expand_train_cells(suite, scale, load_data=False) if c.method == "none"}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_paper_scale_evaluates_the_hub_models(name):
    suite = load_suite(name)
    for scale in PAPER_SCALES[name]:
        cells = _none_cells(suite, scale)
        assert {vid: c.model for vid, c in cells.items()} == ROWS[name], scale
        assert len({c.key for c in cells.values()}) == len(ROWS[name])          # one cell per released model


@pytest.mark.parametrize("name,scale,model", [("tdro", "tiny", "synthetic:tdro/tiny-bert"),
                                              ("tdro", "small", "minilm"),
                                              ("tdro", "smoke", "synthetic:tdro/tiny-decoder"),
                                              ("peg", "tiny", "synthetic:peg/tiny-bert"),
                                              ("peg", "small", "minilm"),
                                              ("peg", "smoke", "synthetic:peg/tiny-bert"),
                                              ("mining", "tiny", "synthetic:peg/tiny-bert"),
                                              ("mining", "small", "minilm")])
def test_below_paper_scale_the_rows_share_one_untrained_cell(name, scale, model):
    cells = _none_cells(load_suite(name), scale)
    assert set(cells) == set(ROWS[name])
    assert {c.model for c in cells.values()} == {resolve_suite_model(model)}
    assert len({c.key for c in cells.values()}) == 1                            # evaluated once for all rows
    # the smoke scale runs the paper recipe: tdro's mContriever keeps its own prompts (none) there, so its
    # evaluation has a key of its own while its (untrained) training cell is the shared one
    own = {v for v, c in cells.items() if c.variant_evaluation}
    assert own == ({"mcontriever"} if (name, scale) == ("tdro", "smoke") else set())


def test_mining_smoke_keeps_the_retrievers_stand_in_for_me5():
    cells = _none_cells(load_suite("mining"), "smoke")
    assert cells["zs-me5-large"].model == "minilm"      # the smoke stand-in of mE5-large (the mining retriever)
    assert {cells[v].model for v in ("zs-mbert", "zs-mdpr", "zs-mcontriever", "zs-bge-m3")} == {
        resolve_suite_model("synthetic:peg/tiny-bert")}


def test_registry_encodes_each_model_as_its_authors_do():
    def settings(hub):
        path, d = resolve_model(hub)
        assert path == hub
        return d
    me5 = settings("intfloat/multilingual-e5-large")
    assert (me5.pooling, me5.normalize, me5.query_prompt, me5.doc_prompt) == ("mean", True, "query: ", "passage: ")
    m3 = settings("BAAI/bge-m3")
    assert (m3.pooling, m3.normalize, m3.query_prompt) == ("cls", True, "")
    for hub in ("bert-base-multilingual-cased", "castorini/mdpr-tied-pft-msmarco"):
        d = settings(hub)
        assert (d.pooling, d.normalize, d.query_prompt, d.doc_prompt) == ("cls", False, "", "")
    peg = settings("TownsWu/PEG")
    assert (peg.pooling, peg.query_prompt, peg.query_max_length, peg.doc_max_length) == (
        "cls", "为这个句子生成表示以用于检索相关文章：", 64, 256)
    assert settings("BAAI/bge-large-zh").query_prompt == peg.query_prompt
    for hub in ("tdro-llm/s2-tdro-Llama-3-8B-top70", "tdro-llm/s0-baseline-Qwen1.5-0.5B",
                "tdro-llm/s2-tdro-Qwen1.5-0.5B-top70", "tdro-llm/s2-tdro-Qwen1.5-0.5B-curr"):
        d = settings(hub)       # tdro-llm/tdro scripts: last token after an appended EOS, cosine
        assert (d.pooling, d.append_eos, d.normalize) == ("last", True, True)
    e5m = settings("intfloat/e5-mistral-7b-instruct")
    assert (e5m.pooling, e5m.append_eos, e5m.normalize) == ("last", True, True)


def test_mining_paper_dry_run_lists_the_rows_with_no_setting_on_a_harness_default(capsys):
    assert main(["run", "mining", "--scale", "paper", "--dry-run", "--format", "json", "--strict-provenance"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["provenance"]["harness_defaults"] == 0
    models = {s["system"]: s["value"] for s in data["settings"] if s["name"] == "model" and s["system"] in MINING}
    # a setting equal to the baseline's is not listed: BGE-M3 is the paper scale's own backbone
    assert models == {vid: hub for vid, hub in MINING.items() if hub != "BAAI/bge-m3"}
    none_cells = [c for c in data["cells"] if c["method"] == "none"]
    assert sorted(c["variant"] for c in none_cells) == sorted(MINING)


@pytest.mark.slow       # writes a result per (row, benchmark): about a minute per layout on a loaded machine
@pytest.mark.parametrize("name,layout,rows,printed", [
    ("mining", "table1", list(MINING), "Printed in paper 004, Table 1"),
    ("mining", "table14", list(MINING), "Printed in paper 004, Table 14"),
    ("tdro", "table4", ["mcontriever", "me5-large-inst", "e5-mistral", "released-llama3-8b-top70"],
     "Printed in paper 000 (Tab. 4)"),
])
def test_paper_layouts_show_the_rows_beside_the_printed_ones(tmp_path, name, layout, rows, printed):
    """On a finished run written as the runner writes it, each released row's cells are its own per-query means
    and the printed rows follow them."""
    import numpy as np

    from harness.ablation.axes import replicates, suite_systems
    from harness.ablation.layout import render_layout
    from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
    from harness.data.run import Run
    from harness.evaluation_result import EvaluationResult
    from harness.protocol import ProtocolCard
    from harness.store import write_result

    suite, qids, metrics = load_suite(name), [f"q{i}" for i in range(5)], ("ndcg@10", "recall@100", "acc@100")
    rng, report, cells, scores = np.random.default_rng(0), report_dir(tmp_path, name, "paper"), [], {}
    report.mkdir(parents=True)
    for system in suite_systems(suite):
        for replicate in replicates(suite, system, "paper"):
            cells.append({"variant": replicate.id, "key": f"k-{replicate.id}"})
            for bench in suite.scale("paper").benchmarks:
                values = {m: rng.random(len(qids)) for m in metrics}
                scores[(replicate.id, bench.id)] = values
                write_result(cell_result_dir(report, replicate.id, bench.id),
                             run=Run.from_arrays(qids[:1], ["d1"], [1.0]), evaluation=EvaluationResult(qids, values),
                             card=ProtocolCard(suite=bench.suite, dataset=bench.id, metrics=metrics), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": name, "cells": cells}), encoding="utf-8")
    table = render_layout(suite, "paper", tmp_path, layout)
    labels = [r.label for r in table.rows]
    wanted = [suite.variant(v).label for v in rows]
    first = labels.index(wanted[0])
    assert labels[first:first + len(wanted)] == wanted
    assert all(r.group == printed for r in table.rows[first + len(wanted):])             # the printed rows follow
    column = table.columns[1] if name == "mining" else table.columns[0]     # mining: ar; tdro: the MIRACL average
    bench = "ar" if name == "mining" else None
    for vid, row in zip(rows, table.rows[first:first + len(wanted)]):
        value = row.cells[column.key].value
        if bench is not None:
            metric = "ndcg@10" if layout == "table1" else "recall@100"
            assert value == pytest.approx(scores[(vid, bench)][metric].mean())
        else:
            assert value is not None
