"""Paper 001 Figure 5(a) (§5.4 "Pretraining versus Zero-Shot") as the coco_dr layout ``figure5a`` (kind
``coco-gain``): COCO's contrastive-loss reduction per target corpus against the zero-shot gain.  Hand oracles for
the arithmetic and the batches; the layout on the tiny stand-ins with a fabricated finished COCO stage and stored
evaluations, each loss equal to :func:`methods.coco.coco_loss` on the same batches and each gain to the stored
per-query means."""
from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.ablation import load_suite
from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.ablation.layouts.coco_gain import (
    contrastive_loss,
    correlations,
    loss_batches,
    loss_reduction,
    relative_gain,
)
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir, train_cell_dir
from harness.ablation.spec import parse_suite
from harness.data.run import Run
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.io.results_layout import TRAIN_DONE_FILE
from harness.protocol import ProtocolCard
from harness.store import write_result
from methods.coco import coco_loss
from methods.dro_shift import span_pairs

SUITE = Path(__file__).resolve().parents[2] / "suites" / "ablations" / "coco_dr.yaml"
TASKS = ["cjk_qa", "latin_qa", "latin_synonyms", "cyrillic_news"]
QIDS = [f"q{i}" for i in range(8)]


def test_reduction_and_gain_arithmetic():
    # §5.4's example: the loss halved is a 50% reduction; 0.50 -> 0.61 nDCG@10 is a 22% gain
    assert loss_reduction(2.0, 1.0) == pytest.approx(0.5)
    assert relative_gain(0.61, 0.50) == pytest.approx(0.22)
    assert loss_reduction(1.0, 1.25) == pytest.approx(-0.25) and relative_gain(0.4, 0.5) == pytest.approx(-0.2)
    assert math.isnan(loss_reduction(0.0, 1.0)) and math.isnan(relative_gain(0.3, 0.0))


def test_loss_batches_are_seeded_equal_sized_and_disjoint():
    batches = loss_batches(10, 4, seed=0)
    assert [len(b) for b in batches] == [4, 4]                       # the incomplete last batch is dropped
    assert len(set(batches[0]) | set(batches[1])) == 8 and set(batches[0]).isdisjoint(batches[1])
    assert loss_batches(10, 4, seed=0) == batches and loss_batches(10, 4, seed=1) != batches
    assert sorted(loss_batches(3, 4, seed=0)[0]) == [0, 1, 2]        # fewer pairs than a batch: one batch


def test_contrastive_loss_hand_oracle():
    # a0 = b0 = e1, a1 = b1 = e2: each span sees its partner at logit 1 and two others at 0, so every span's loss
    # is log(2 + e) - 1 (paper 001's oracle C1, 0.551445)
    x = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    assert contrastive_loss(x, x.copy(), [[0, 1]]) == pytest.approx(math.log(2 + math.e) - 1, rel=1e-6)
    assert contrastive_loss(x, x.copy(), [[0, 1]]) == pytest.approx(0.551445, abs=1e-6)
    # over several batches: the mean of each batch's loss, each over that batch's pairs only
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(6, 3)).astype(np.float32)
    batches = [[4, 0, 2], [1, 5, 3]]
    expected = np.mean([float(coco_loss(torch.from_numpy(a[i]), torch.from_numpy(b[i]))) for i in batches])
    assert contrastive_loss(a, b, batches) == pytest.approx(expected, rel=1e-6)


def test_correlations_over_finite_tasks():
    points = [{"reduction": r, "gain": g} for r, g in [(0.1, 0.02), (0.2, 0.05), (0.3, 0.03), (0.5, 0.22),
                                                         (math.nan, 0.1)]]
    corr = correlations(points)
    assert corr["n"] == 4
    from scipy import stats

    x, y = [0.1, 0.2, 0.3, 0.5], [0.02, 0.05, 0.03, 0.22]
    assert corr["pearson"][0] == pytest.approx(stats.pearsonr(x, y)[0])
    assert corr["spearman"][0] == pytest.approx(0.8)                 # ranks 1,2,3,4 vs 1,3,2,4: 1 - 6*2/60
    assert correlations(points[:2]) == {"n": 2, "pearson": None, "spearman": None}


def _fabricate(root: Path, suite) -> tuple[str, Path, dict[tuple[str, str], float]]:
    """A finished tiny run: the COCO stage (the base model with every weight perturbed, seeded) and stored
    per-query nDCG@10 of coco-idro and idro on every task."""
    from transformers import AutoModel, AutoTokenizer

    from harness.ablation.cells import expand_train_cells
    from harness.encoders.refs import resolve_model
    from harness.method import get_method
    from harness.method.stages import flatten_stages

    cell = next(c for c in expand_train_cells(suite, "tiny") if c.variant.id == "coco")
    (planned,) = [p for p in flatten_stages(get_method(cell.method), cell.train_spec, cell.data_fingerprint)
                  if p.stage.name == "coco"]
    path, _ = resolve_model(cell.model)
    run = train_cell_dir(root, planned.key)
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
    report = report_dir(root, suite.name, "tiny")
    report.mkdir(parents=True)
    rng = np.random.default_rng(3)
    means = {}
    for variant in ("coco-idro", "idro"):
        for bench in TASKS:
            values = rng.uniform(0.1, 0.9, len(QIDS))
            means[(variant, bench)] = float(values.mean())
            write_result(cell_result_dir(report, variant, bench), run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                         evaluation=EvaluationResult(QIDS, {"ndcg@10": values}),
                         card=ProtocolCard(suite="synthetic", dataset=bench, metrics=("ndcg@10",)), manifest={})
    cells = [{"variant": v, "key": f"k-{v}"} for v in ("coco-idro", "idro")]
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return str(cell.model), model_dir, means


# about 30-65 s on 2 CPU cores (the tiny world, two encoders, four corpora); the oracles above stay in the default run
@pytest.mark.slow
def test_figure5a_on_the_tiny_stand_ins(tmp_path):
    from transformers import AutoTokenizer

    from harness.ablation.benchmarks import load_benchmark_ref
    from harness.encoders.hf import load_encoder
    from harness.encoders.refs import resolve_model

    suite = load_suite(SUITE)
    base, trained, means = _fabricate(tmp_path, suite)
    table = render_layout(suite, "tiny", tmp_path, "figure5a")
    labels = {b.id: b.label for b in suite.scale("tiny").benchmarks}
    assert [r.label for r in table.rows] == [labels[t] for t in TASKS]
    assert [c.key for c in table.columns] == ["loss/before", "loss/after", "loss/reduction", "ndcg@10/without",
                                              "ndcg@10/with", "ndcg@10/gain"]
    # direct computation: the same pairs (the first model's tokenizer), the same batches, COCO's loss of each model
    # (the tiny COCO stage's encoding: mean pooling, no normalisation, 32 tokens)
    refs = {b.id: b for b in suite.scale("tiny").benchmarks}
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(base)[0])
    encoders = [load_encoder(m, pooling="mean", normalize=False, doc_max_length=32, query_max_length=32)
                for m in (base, str(trained))]
    reductions, gains = [], []
    for row, bench in zip(table.rows, TASKS):
        texts = load_benchmark_ref(refs[bench], ["ndcg@10"]).dataset.corpus.passages()
        a, b = span_pairs(texts, tokenizer, documents=64, span_tokens=12, early_close=0.1, seed=0)
        assert len(a) == 64
        batches = loss_batches(64, 32, seed=0)
        losses = []
        for encoder in encoders:
            x, y = torch.from_numpy(encoder.encode_docs(a)), torch.from_numpy(encoder.encode_docs(b))
            losses.append(float(np.mean([float(coco_loss(x[i], y[i])) for i in batches])))
        assert row.cells["loss/before"].value == pytest.approx(losses[0], rel=1e-6)
        assert row.cells["loss/after"].value == pytest.approx(losses[1], rel=1e-6)
        assert row.cells["loss/reduction"].value == pytest.approx(100 * (losses[0] - losses[1]) / losses[0], rel=1e-6)
        without, with_ = means[("idro", bench)], means[("coco-idro", bench)]
        assert row.cells["ndcg@10/without"].value == pytest.approx(without, rel=1e-12)
        assert row.cells["ndcg@10/with"].value == pytest.approx(with_, rel=1e-12)
        assert row.cells["ndcg@10/gain"].value == pytest.approx(100 * (with_ - without) / without, rel=1e-9)
        reductions.append((losses[0] - losses[1]) / losses[0])
        gains.append((with_ - without) / without)
        # in-batch negatives of 2 x 32 spans: a loss is positive and the two models differ
        assert losses[0] > 0 and losses[1] > 0 and losses[0] != pytest.approx(losses[1])
    from scipy import stats

    note = next(n for n in table.notes if n.startswith("Correlation"))
    assert f"Pearson r = {stats.pearsonr(reductions, gains)[0]:.3f}" in note
    assert f"Spearman rho = {stats.spearmanr(reductions, gains)[0]:.3f}" in note and "4 tasks" in note
    assert any("prints no numbers for Figure 5(a)" in n for n in table.notes)
    figure = layout_figure(suite, "tiny", tmp_path, "figure5a")
    ax = figure.axes[0]
    assert len(ax.collections[0].get_offsets()) == 4 and len(ax.texts) == 4
    assert any(line.get_label() == "least-squares fit" for line in ax.lines)


def test_figure5a_at_paper_scale_scores_every_beir_task_with_the_paper_models():
    suite = load_suite(SUITE)
    for scale, batch in (("paper", 1600), ("paper-large", 800)):
        layout = load_layout(suite, scale, "figure5a")
        assert layout.kind == "coco-gain" and len(layout.columns) == 18
        assert {c.metric for c in layout.columns} == {"ndcg@10"} and "CQADupStack" in {c.benchmark for c in
                                                                                        layout.columns}
        encoders = layout.options["encoders"]
        assert (encoders["before"]["variant"], encoders["before"]["stage"], encoders["before"]["point"]) == \
            ("baseline", "warmup", "start")
        assert (encoders["after"]["variant"], encoders["after"]["stage"], encoders["after"]["point"]) == \
            ("coco", "warmup/coco", "end")
        assert layout.options["gain"] == {"with": "coco-idro", "without": "idro"}
        assert layout.options["batch_size"] == batch


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(batchsize=8), "unknown option"),
    (lambda o: o.update(gain={"with": "ghost", "without": "idro"}), "gain 'with' variant 'ghost' is not a variant"),
    (lambda o: o["encoders"]["after"].update(variant="ghost"), "encoder variant 'ghost' is not a variant"),
    (lambda o: o["encoders"].pop("before"), "'encoders' must be"),
    (lambda o: o.update(batch_size=0), "'batch_size' must be an integer >= 1"),
])
def test_figure5a_options_are_checked(change, message):
    raw = copy.deepcopy(load_suite(SUITE).raw)
    change(raw["table"]["layouts"]["figure5a"]["scales"]["tiny"]["options"])
    with pytest.raises(ConfigError, match=f"layout 'figure5a'.*{message}"):
        load_layout(parse_suite(raw, SUITE), "tiny", "figure5a")
