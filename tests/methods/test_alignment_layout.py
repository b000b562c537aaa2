"""Paper 001 Figure 5(b) (Appendix H) as the coco_dr layout ``figure5b`` (kind ``alignment-uniformity``): COCO-style
positive pairs, the models of the training plan (a stage's start and end) and the layout on the tiny stand-ins
with a fabricated finished COCO stage, each number equal to a direct computation."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.ablation import load_suite
from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.ablation.paths import train_cell_dir
from harness.errors import ConfigError
from harness.io.results_layout import TRAIN_DONE_FILE
from methods.dro_shift import alignment, span_pairs, uniformity

SUITE = Path(__file__).resolve().parents[2] / "suites" / "ablations" / "coco_dr.yaml"


class WordTokenizer:
    """One token per whitespace-separated word (enough for the chunking rule)."""

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[0] * len(t.split()) for t in texts]}


def test_span_pairs_are_two_distinct_chunks_of_one_document():
    docs = ["One two x. Three four y. Five six z.", "Single sentence only.", "A b c. D e f. G h i. J k l."]
    first, second = span_pairs(docs, WordTokenizer(), documents=5, span_tokens=3, early_close=0.0, seed=1)
    # (a first chunk of <= 2 tokens drops a document, the released rule: hence three-word sentences)
    # the one-sentence document gives no pair; each other gives one, two different chunks of the same document
    assert len(first) == len(second) == 2
    chunks = {0: ["One two x.", "Three four y.", "Five six z."], 2: ["A b c.", "D e f.", "G h i.", "J k l."]}
    owners = sorted(next(d for d, c in chunks.items() if a in c and b in c) for a, b in zip(first, second))
    assert owners == [0, 2] and all(a != b for a, b in zip(first, second))
    # seeded: the same pairs again; at most `documents` pairs
    assert span_pairs(docs, WordTokenizer(), documents=5, span_tokens=3, early_close=0.0, seed=1) == (first, second)
    assert len(span_pairs(docs, WordTokenizer(), documents=1, span_tokens=3, early_close=0.0)[0]) == 1


def _coco_stage_key(suite, scale):
    from harness.ablation.cells import expand_train_cells
    from harness.method import get_method
    from harness.method.stages import flatten_stages

    cell = next(c for c in expand_train_cells(suite, scale) if c.variant.id == "coco")
    (planned,) = [p for p in flatten_stages(get_method(cell.method), cell.train_spec, cell.data_fingerprint)
                  if p.stage.name == "coco"]
    return planned.key, cell.model


def _fabricate_coco_run(root: Path, key: str, base: str) -> Path:
    """A finished COCO stage whose model is the base model with every weight perturbed (seeded)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from harness.encoders.refs import resolve_model

    path, _ = resolve_model(base)
    run = train_cell_dir(root, key)
    model_dir = run / "model"
    shutil.copytree(path, model_dir)
    model = AutoModel.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(path).save_pretrained(model_dir)
    (run / TRAIN_DONE_FILE).write_text(json.dumps({"model_dir": "model", "method": "coco", "step": 100,
                                                   "spec_fingerprint": "x", "data_fingerprint": "y"}))
    return model_dir


def test_figure5b_on_the_tiny_stand_ins(tmp_path):
    from harness.ablation.benchmarks import load_benchmark_ref
    from harness.encoders.hf import load_encoder

    suite = load_suite(SUITE)
    layout = load_layout(suite, "tiny", "figure5b")
    key, base = _coco_stage_key(suite, "tiny")
    trained = _fabricate_coco_run(tmp_path, key, base)
    table = render_layout(suite, "tiny", tmp_path, "figure5b")
    assert [r.label for r in table.rows] == ["tiny-bert (COCO's initialisation)", "COCO pretrained"]
    assert [c.key for c in table.columns] == ["cjk_qa/align", "cjk_qa/uniform", "latin_qa/align", "latin_qa/uniform",
                                              "Mean/align", "Mean/uniform"]
    # direct computation: the same pairs (chunked with the first model's tokenizer), each model's embeddings
    refs = {b.id: b for b in suite.scale("tiny").benchmarks}
    from transformers import AutoTokenizer

    from harness.encoders.refs import resolve_model
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(base)[0])
    for row, model in zip(table.rows, (base, str(trained))):
        encoder = load_encoder(model, pooling="mean", doc_max_length=32, query_max_length=32)
        means = {"align": [], "uniform": []}
        for bench in ("cjk_qa", "latin_qa"):
            texts = load_benchmark_ref(refs[bench], ["ndcg@10"]).dataset.corpus.passages()
            a, b = span_pairs(texts, tokenizer, documents=32, span_tokens=12, early_close=0.1, seed=0)
            assert len(a) == 32
            x, y = encoder.encode_docs(a), encoder.encode_docs(b)
            expected = {"align": alignment(x, y), "uniform": uniformity(x)}
            for m, v in expected.items():
                assert row.cells[f"{bench}/{m}"].value == pytest.approx(v, rel=1e-6)
                means[m].append(v)
        for m in ("align", "uniform"):
            assert row.cells[f"Mean/{m}"].value == pytest.approx(np.mean(means[m]), rel=1e-6)
    # the start and the end are different models: different numbers; both metrics in their ranges
    assert table.rows[0].cells["cjk_qa/align"].value != pytest.approx(table.rows[1].cells["cjk_qa/align"].value)
    for row in table.rows:
        assert 0.0 <= row.cells["Mean/align"].value <= 4.0 and -4.0 <= row.cells["Mean/uniform"].value <= 0.0
    figure = layout_figure(suite, "tiny", tmp_path, "figure5b")
    assert len(figure.axes[0].collections) == 4          # per corpus and mean, for each of the 2 models
    assert layout.kind == "alignment-uniformity"


def test_figure5b_at_paper_scale_names_the_paper_models_and_every_beir_corpus():
    suite = load_suite(SUITE)
    layout = load_layout(suite, "paper", "figure5b")
    assert [e["label"] for e in layout.options["encoders"]] == [
        "Condenser", "COCO-DR w/o COCO (coCondenser)", "COCO-DR (COCO pretrained)"]
    assert len(layout.columns) == 36 and {c.metric for c in layout.columns} == {"align", "uniform"}
    assert "CQADupStack" in {c.benchmark for c in layout.columns}


def test_figure5b_options_are_checked():
    import copy

    suite = load_suite(SUITE)
    raw = copy.deepcopy(suite.raw)
    entry = raw["table"]["layouts"]["figure5b"]["scales"]["tiny"]
    entry["options"]["encoders"][0]["variant"] = "ghost"
    from harness.ablation.spec import parse_suite

    with pytest.raises(ConfigError, match="encoder variant 'ghost' is not a variant"):
        load_layout(parse_suite(raw, SUITE), "tiny", "figure5b")
    raw = copy.deepcopy(suite.raw)
    raw["table"]["layouts"]["figure5b"]["scales"]["tiny"]["columns"][0]["metric"] = "ndcg@10"
    with pytest.raises(ConfigError, match="metric must be one of align, uniform"):
        load_layout(parse_suite(raw, SUITE), "tiny", "figure5b")


def test_a_missing_stage_is_named(tmp_path):
    from harness.ablation.cells import expand_train_cells
    from harness.ablation.layouts.alignment import encoder_model

    suite = load_suite(SUITE)
    cells = {c.variant.id: c for c in expand_train_cells(suite, "tiny")}
    with pytest.raises(ConfigError, match="has no stage 'warmup'"):
        encoder_model(suite, "tiny", tmp_path, {"variant": "coco", "stage": "warmup/coco"}, cells)
    # the baseline's start is the scale's model; a stage not yet trained is refused by name
    assert encoder_model(suite, "tiny", tmp_path, {"variant": "baseline", "point": "start"}, cells)[0] == \
        cells["baseline"].train_spec.model
    with pytest.raises(ConfigError, match="no finished training run"):
        encoder_model(suite, "tiny", tmp_path, {"variant": "coco", "stage": "coco"}, cells)
