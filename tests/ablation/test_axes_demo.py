"""The axes_demo suite end to end (slow): sweep + 3 seeds + checkpoints + a BM25 row on the synthetic world.

Checks real numbers against direct computations: the checkpoint cells equal evaluating the saved
checkpoint's model directly (nothing retrained), the BM25 row equals ``evaluate_model("bm25")`` on the
same benchmark, the table's ``mean ± sd`` is the mean and sample sd of the seeds' stored metrics, and the
sweep and learning-curve tables and plots are written next to ``table.md``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.ablation.axes import FinishedSuite, suite_systems
from harness.ablation.paths import report_dir
from harness.ablation.runner import run_suite
from harness.ablation.spec import load_suite
from harness.store import load_result

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("axes_demo")
    suite = load_suite("axes_demo")
    outcome = run_suite(suite, "tiny", root, progress=False)
    assert outcome.complete, outcome.pending
    return suite, root, outcome


def test_tables_and_plots_are_written(finished):
    suite, root, outcome = finished
    folder = report_dir(root, "axes_demo", "tiny")
    for name in ("table.md", "table.tex", "sweep.md", "sweep.tex", "sweep.png", "sweep.pdf", "curve.md", "curve.png"):
        assert (folder / name).stat().st_size > 0, name
    text = (folder / "table.md").read_text(encoding="utf-8")
    assert "±" in text and "averaged over the seeds" in text and "Uniform (lr=0.003)" in text
    assert "step 10" in text and "step 30 (final)" in text      # the curve section appended


def test_table_mean_and_sd_are_those_of_the_seeds(finished):
    suite, root, outcome = finished
    folder = report_dir(root, "axes_demo", "tiny")
    values = [json.loads((folder / "results" / f"uniform@lr=0.003@seed={s}" / "cjk_qa" / "metrics.json")
                         .read_text(encoding="utf-8"))["ndcg@10"] for s in (1, 2, 3)]
    expected = f"{np.mean(values) * 100:.1f} ± {np.std(values, ddof=1) * 100:.1f}"
    assert expected in outcome.markdown


def test_checkpoints_are_evaluated_from_the_saved_runs(finished, tmp_path):
    from harness.method import get_method
    from harness.pipeline import ModelSpec, evaluate_model
    from harness.train.result import Checkpoint

    suite, root, outcome = finished
    cells = {c["variant"]: c for c in outcome.summary["cells"]}
    cell = cells["uniform@lr=0.001@seed=2"]
    assert cell["steps"] == [10, 20] and cell["final_step"] == 30
    workdir = root / cell["dir"]
    log = [json.loads(line) for line in (workdir / "train_log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in log] == list(range(1, 31))            # trained once, 30 steps
    ckpt = Checkpoint.load(workdir)
    runner_ckpt = type(ckpt)(**{**ckpt.__dict__, "path": workdir / "checkpoints" / "step-00000010" / "model",
                                "step": 10})
    finished_suite = FinishedSuite(suite, "tiny", root)
    from harness.ablation.benchmarks import load_benchmark_ref

    ref = next(b for b in suite.scale("tiny").benchmarks if b.id == "latin_qa")
    loaded = load_benchmark_ref(ref, suite.metrics)
    direct = evaluate_model(ModelSpec("ckpt", encoder=get_method("uniform").encoder(runner_ckpt)), loaded,
                            tmp_path / "direct")
    stored = finished_suite.stored("uniform@lr=0.001@seed=2@step=10", "latin_qa")
    np.testing.assert_allclose(stored.evaluation.per_query["ndcg@10"], direct.evaluation.per_query["ndcg@10"])
    final = finished_suite.stored("uniform@lr=0.001@seed=2", "latin_qa")
    assert final.evaluation.aggregate["ndcg@10"] != stored.evaluation.aggregate["ndcg@10"]
    bm25 = evaluate_model(ModelSpec("bm25"), loaded, tmp_path / "bm25")
    row = load_result(report_dir(root, "axes_demo", "tiny") / "results" / "bm25" / "latin_qa")
    assert row.evaluation.aggregate == bm25.evaluation.aggregate
    assert [s.id for s in suite_systems(suite)] == ["uniform@lr=0.001", "uniform@lr=0.003", "bm25"]


def test_layouts_of_the_suite_file_render(finished):
    from harness.ablation.layout import layout_figure, render_layout

    suite, root, _ = finished
    for name in ("main", "lr-sweep", "curve", "per-benchmark"):
        assert render_layout(suite, "tiny", root, name).rows
    for name in ("lr-sweep", "curve"):
        assert layout_figure(suite, "tiny", root, name).axes
    assert Path(root).exists()
