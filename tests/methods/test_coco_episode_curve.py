"""Paper 001's per-episode curve (Figure 4 / Figure 6) from a tiny run of the released pipeline's shape: a BM25
warm-up stage, then a fine-tuning with ANCE episodes at steps 0, 2, 4 of 6, its checkpoints [0, 2, 4] kept.

Epi-1 is the fine-tuning's step-0 checkpoint, i.e. the warm-up stage's model (paper 001 Figure 4: "Epi-1 stands for
the result after BM25 warmup"): its stored evaluation equals evaluating the warm-up stage's finished model directly,
and Epi-2 .. Epi-4 are the checkpoints at steps 2, 4 and the finished run (slow: three trainings, 4 evaluations).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.ablation.layout import layout_figure, render_layout
from harness.ablation.runner import run_suite
from harness.ablation.spec import parse_suite

pytestmark = pytest.mark.slow

TRAIN = {"batch_size": 8, "lr": 0.001, "use_instructions": False, "seed": 42, "query_max_length": 32,
         "doc_max_length": 64, "pooling": "mean", "similarity": "cos", "normalize": True, "temperature": 0.05,
         "in_batch_negatives": True}
RAW = {
    "name": "coco_episode_curve", "version": 1, "description": "Epi-1 .. Epi-4 on a tiny warm-up + ANCE run",
    "baseline": "baseline",
    "variants": [{"id": "baseline", "label": "Fine-tuning baseline", "method": "dro-erm",
                  "options": {"warmup": {"preset": "tiny", "train": {**TRAIN, "steps": 4, "warmup_steps": 1}}},
                  "checkpoints": [0, 2, 4]},
                 {"id": "bm25", "label": "BM25", "method": "none", "model": "bm25"}],
    "metrics": ["ndcg@10"],
    "stats": {"test": "randomization", "correction": "holm", "alpha": 0.05, "seed": 0, "aggregate": "pooled"},
    "scales": {"tiny": {
        "model": "synthetic:tdro/tiny-bert",
        "data": [{"path": "synthetic:tdro", "domains": ["latin_qa", "latin_synonyms"]}],
        "train": {**TRAIN, "steps": 6, "warmup_steps": 1,
                  "method_options": {"k": 2, "niter": 5, "nredo": 1, "blocks": 1, "loss": "trainer",
                                     "ance_refresh_steps": 2, "ance_warmup": "model", "ance_depth": 20,
                                     "ance_keep": 5}},
        "benchmarks": [{"id": "latin_qa", "suite": "synthetic", "dataset_dir": "synthetic:tdro/eval/latin_qa"}]}},
    "table": {"default": "main", "layouts": {
        "main": {"rows": ["baseline", "bm25"], "columns": [{"benchmark": "latin_qa", "metric": "ndcg@10"}]},
        "episodes": {"kind": "curve", "columns": [{"benchmark": "latin_qa", "metric": "ndcg@10"}],
                     "options": {"variants": ["baseline"], "labels": ["Epi-1", "Epi-2", "Epi-3", "Epi-4"]}}}},
}


def test_epi1_is_the_warmup_model_on_the_episode_curve(tmp_path):
    from harness.ablation.benchmarks import load_benchmark_ref
    from harness.ablation.paths import report_dir
    from harness.method import get_method
    from harness.pipeline import ModelSpec, evaluate_model
    from harness.store import load_result
    from harness.train.result import Checkpoint

    path = tmp_path / "coco_episode_curve.yaml"
    path.write_text(json.dumps(RAW), encoding="utf-8")
    suite = parse_suite(RAW, path)
    root = tmp_path / "results"
    outcome = run_suite(suite, "tiny", root, progress=False)
    assert outcome.complete, outcome.pending
    cell = {c["variant"]: c for c in outcome.summary["cells"]}["baseline"]
    assert cell["steps"] == [0, 2, 4] and cell["final_step"] == 6
    workdir = root / cell["dir"]
    # the step-0 checkpoint was written by the fine-tuning from the warm-up stage's model, before any step
    info = json.loads((workdir / "checkpoints" / "step-00000000" / "model" / "training.json")
                      .read_text(encoding="utf-8"))
    assert info["step"] == 0
    warm_dir = info["base_model"]
    warm = Checkpoint.load(Path(warm_dir).parent)
    assert warm.step == 4 and warm.method == "dro-erm"

    ref = suite.scale("tiny").benchmarks[0]
    loaded = load_benchmark_ref(ref, suite.metrics)
    direct = evaluate_model(ModelSpec("warmup", encoder=get_method("dro-erm").encoder(warm)), loaded,
                            tmp_path / "direct")
    results = report_dir(root, suite.name, "tiny") / "results"
    stored = {s: load_result(results / (f"baseline@step={s}" if s is not None else "baseline") / "latin_qa")
              for s in (0, 2, 4, None)}
    np.testing.assert_allclose(stored[0].evaluation.per_query["ndcg@10"], direct.evaluation.per_query["ndcg@10"])

    table = render_layout(suite, "tiny", root, "episodes")
    assert [r.label for r in table.rows] == ["Epi-1 (step 0)", "Epi-2 (step 2)", "Epi-3 (step 4)", "Epi-4 (step 6)"]
    values = [stored[s].evaluation.aggregate["ndcg@10"] for s in (0, 2, 4, None)]
    assert [r.cells["latin_qa/ndcg@10"].value for r in table.rows] == pytest.approx(values, abs=1e-12)
    assert len(set(values)) > 1                                   # the episodes moved the model
    lines = layout_figure(suite, "tiny", root, "episodes").axes[0].get_lines()
    assert list(lines[0].get_xdata()) == [0.0, 2.0, 4.0, 6.0]
    assert lines[0].get_ydata() == pytest.approx([v * 100 for v in values])
