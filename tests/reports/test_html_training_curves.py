"""The HTML report's training curves (each trained system's train_log.jsonl) and language names."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.ablation.html_report import _train_log
from harness.ablation.paths import train_cell_dir
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result
from reports.html.figures import training_curve_plot
from reports.languages import language_label
from reports.plots import read_training_log, scalar_series


def _log(path, losses):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": i + 1, "loss": v, "lr": 1e-4 * (i + 1) / len(losses)}) + "\n"
                            for i, v in enumerate(losses)))
    return path


def test_a_linked_result_leads_to_its_training_log(tmp_path):
    log = _log(train_cell_dir(tmp_path, "k123") / "train_log.jsonl", [1.0, 0.5])
    result = write_result(tmp_path / "linked", run=None, evaluation=EvaluationResult(["q"], {"ndcg@10": [0.5]}),
                          card=ProtocolCard(dataset="d"), manifest={"cell": {"train_key": "k123"}})
    assert _train_log(tmp_path, result) == log
    untrained = write_result(tmp_path / "bm25", run=None, evaluation=EvaluationResult(["q"], {"ndcg@10": [0.5]}),
                             card=ProtocolCard(dataset="d"), manifest={"cell": {"train_key": None}})
    assert _train_log(tmp_path, untrained) is None


def test_the_curves_plot_every_trained_system_and_skip_missing_logs(tmp_path):
    logs = {"uniform": _log(tmp_path / "a.jsonl", [1.0, 0.8, 0.6]),
            "tDRO": _log(tmp_path / "b.jsonl", [1.1, 0.7, 0.4]), "gone": tmp_path / "missing.jsonl"}
    plot = training_curve_plot(logs)
    assert plot is not None and plot.data.startswith(b"\x89PNG") and "2 trained system(s)" in plot.title
    steps, values = scalar_series(read_training_log(logs["tDRO"]), "loss")
    assert steps.tolist() == [1, 2, 3] and np.allclose(values, [1.1, 0.7, 0.4])
    assert training_curve_plot({"gone": tmp_path / "missing.jsonl"}) is None


@pytest.mark.parametrize(("code", "label"), [("sw", "Swahili (sw)"), ("zh_cn", "Chinese (simplified) (zh_cn)"),
                                             ("ZH", "Chinese (ZH)"), ("xx", "xx")])
def test_language_labels(code, label):
    assert language_label(code) == label


def test_only_the_loss_is_smoothed(tmp_path):
    from reports.plots import training_curves_figure

    logs = {"a": [{"step": i, "loss": float(i % 3), "lr": 1e-4 * i} for i in range(1, 61)]}
    fig = training_curves_figure(logs, scalars=("loss", "lr"), smoothing=0.9, smoothed=("loss",))
    loss_axis, lr_axis = fig.axes
    assert len(loss_axis.lines) == 2 and len(lr_axis.lines) == 1          # raw + EMA; the schedule raw only
    assert lr_axis.lines[0].get_ydata().tolist() == [1e-4 * i for i in range(1, 61)]


def test_difference_plots_pair_queries_as_the_suite_tests_did():
    """A BM25 row answering fewer queries than the baseline (coco_dr tiny: 4 Thai queries with no indexable term):
    with the suite's ``missing: zero`` the plot pools the same differences the paired test used (0 for the
    unanswered queries); with ``error`` it refuses, as the statistics would."""
    import numpy as np
    import pytest

    from harness.evaluation_result import EvaluationResult
    from harness.stats.align import align
    from reports.html.figures import difference_plots
    from reports.html.model import SystemInfo

    qids = [f"q{i}" for i in range(6)]
    base = EvaluationResult(qids, {"ndcg@10": np.linspace(0.1, 0.6, 6)})
    short = EvaluationResult(qids[:4], {"ndcg@10": np.array([0.9, 0.2, 0.4, 0.0])})
    systems = [SystemInfo("base", "Baseline"), SystemInfo("bm25", "BM25")]
    results = {("base", "b"): base, ("bm25", "b"): short}
    (plot,) = difference_plots(systems, ["b"], "ndcg@10", results, missing="zero")
    assert "(6 queries, 1 benchmark(s))" in plot.title
    paired = align(base, short, metric="ndcg@10", missing="zero")
    assert paired.missing_in_system == 2 and paired.diff[-2:] == pytest.approx([-0.5, -0.6])
    with pytest.raises(ValueError, match="2 queries only in the first result"):
        difference_plots(systems, ["b"], "ndcg@10", results)
