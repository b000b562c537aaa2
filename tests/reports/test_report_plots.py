"""Plots: the plotted data is read back from the Axes; files are written, sized and deterministic."""
from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest
from scipy import stats

from harness.errors import InputError
from harness.evaluation_result import EvaluationResult
from reports.plots import (
    dataset_weight_figure,
    ema,
    per_query_difference_figure,
    per_query_differences,
    read_training_log,
    read_weights,
    save_figure,
    scalar_series,
    t_interval,
    training_curves_figure,
)


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _paper_table8(papers_dir) -> dict[str, dict[str, float]]:
    """The domain weights of paper 000's Table 8 (the numbers behind its Figure 3)."""
    text = (papers_dir / "000_ada95d63021a91bc.txt").read_text(encoding="utf-8")
    block = text[text.index("Dataset (25 in total)"):text.index("Table 8: Detailed domain weights")]
    rows = re.findall(r"^(\S+) (0\.\d{4}) (0\.\d{4}) (0\.\d{4}) (0\.\d{4})$", block, re.M)
    assert len(rows) == 25
    variants = ["Baseline", "tDRO (proxy/ref)", "proxy - ref", "proxy"]
    return {v: {r[0]: float(r[k + 1]) for r in rows} for k, v in enumerate(variants)}


def test_dataset_weight_bars_from_paper_000_table8(papers_dir, tmp_path):
    weights = _paper_table8(papers_dir)
    fig = dataset_weight_figure(weights, reference=1 / 25, title="Domain weights (paper 000, Figure 3)")
    ax = fig.axes[0]
    assert len(ax.containers) == 4
    datasets = list(weights["Baseline"])
    assert [t.get_text() for t in ax.get_xticklabels()] == datasets
    for container, values in zip(ax.containers, weights.values()):
        assert [bar.get_height() for bar in container] == [values[d] for d in datasets]
    tdro = {d: bar.get_height() for d, bar in zip(datasets, ax.containers[1])}
    assert tdro["miracl"] == 0.1314 and tdro["AllNLI"] == 0.0005
    # grouped: the four bars of a dataset sit side by side around its tick
    first = [c[0] for c in ax.containers]
    centres = [bar.get_x() + bar.get_width() / 2 for bar in first]
    assert centres == pytest.approx([-0.3, -0.1, 0.1, 0.3])
    assert ax.lines[0].get_ydata()[0] == pytest.approx(0.04)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["reference 0.04", *weights]

    paths = save_figure(fig, tmp_path / "weights")
    assert [p.name for p in paths] == ["weights.png", "weights.pdf"]
    assert _png_size(paths[0]) == (1200, 450)
    assert paths[1].read_bytes().startswith(b"%PDF") and paths[1].stat().st_size > 5000
    first_png, first_pdf = paths[0].read_bytes(), paths[1].read_bytes()
    save_figure(dataset_weight_figure(weights, reference=1 / 25, title="Domain weights (paper 000, Figure 3)"),
                tmp_path / "weights")
    assert paths[0].read_bytes() == first_png and paths[1].read_bytes() == first_pdf
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.pdf", "weights.png"]   # no temp files left


def test_dataset_weights_refuse_incomplete_variants():
    with pytest.raises(ValueError, match="variant 'b' lacks 'y'"):
        dataset_weight_figure({"a": {"x": 0.5, "y": 0.5}, "b": {"x": 1.0}})
    with pytest.raises(ValueError, match="has 'z', which is not among"):
        dataset_weight_figure({"a": {"x": 1.0}, "b": {"x": 0.5, "z": 0.5}})


def test_read_weights(tmp_path):
    good = tmp_path / "w.json"
    good.write_text(json.dumps({"miracl": 0.0588235, "nq": 0}))
    assert read_weights(good) == {"miracl": 0.0588235, "nq": 0.0}
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 0.5,\n "b": -1}')
    with pytest.raises(InputError, match="weight of 'b' must be a finite number >= 0"):
        read_weights(bad)
    bad.write_text('{"a": 0.5,\n "b": }')
    with pytest.raises(InputError) as info:
        read_weights(bad)
    assert info.value.line == 2


def test_ema_hand_computed():
    assert ema([1.0, 0.0, 0.0, 4.0], 0.5).tolist() == [1.0, 0.5, 0.25, 2.125]
    assert ema([3.0, 1.0], 0.0).tolist() == [3.0, 1.0]
    with pytest.raises(ValueError, match="smoothing weight"):
        ema([1.0], 1.0)


def _write_log(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    return path


def test_training_curves_overlay_runs_with_resume_and_smoothing(tmp_path):
    log_a = _write_log(tmp_path / "a.jsonl", [{"step": s, "loss": 4.0 - s, "lr": 1e-4 * (s + 1)} for s in range(4)])
    # run b was interrupted after step 2 and resumed from its step-1 checkpoint: steps 2.. logged twice
    records_b = [{"step": 0, "loss": 5.0}, {"step": 1, "loss": 4.0}, {"step": 2, "loss": 9.9},
                 {"step": 2, "loss": 3.0, "lr": 2e-4}, {"step": 3, "loss": 2.0, "eval_ndcg": 0.4}]
    log_b = _write_log(tmp_path / "b.jsonl", records_b)
    runs = {"uniform": read_training_log(log_a), "tdro": read_training_log(log_b)}
    assert scalar_series(runs["tdro"], "loss")[1].tolist() == [5.0, 4.0, 3.0, 2.0]   # last record of step 2 kept

    fig = training_curves_figure(runs, scalars=("loss", "lr"), smoothing=0.5, log_scale=("lr",))
    loss_ax, lr_ax = fig.axes
    raw_a, smooth_a, raw_b, smooth_b = loss_ax.lines
    assert raw_a.get_xdata().tolist() == [0, 1, 2, 3] and raw_a.get_ydata().tolist() == [4.0, 3.0, 2.0, 1.0]
    assert smooth_a.get_ydata().tolist() == [4.0, 3.5, 2.75, 1.875]
    assert smooth_b.get_ydata().tolist() == [5.0, 4.5, 3.75, 2.875]
    assert raw_a.get_alpha() == 0.3 and smooth_a.get_label() == "uniform" and smooth_b.get_label() == "tdro"
    assert raw_a.get_color() == smooth_a.get_color() != smooth_b.get_color()
    assert lr_ax.get_yscale() == "log" and loss_ax.get_yscale() == "linear"
    assert lr_ax.lines[2].get_xdata().tolist() == [2]                               # only step 2 logs lr in run b
    assert lr_ax.get_xlabel() == "step" and loss_ax.get_ylabel() == "loss"
    png, _ = save_figure(fig, tmp_path / "curves")
    assert _png_size(png) == (800, 600)


def test_training_curves_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "loss": 1.0}\n{"step": "1", "loss": 0.5}\n')
    with pytest.raises(InputError) as info:
        read_training_log(bad)
    assert info.value.line == 2 and "'step' must be an integer" in info.value.problem
    bad.write_text('{"step": 0, "loss": 1.0}\n\n{"step": 1, loss}\n')
    with pytest.raises(InputError) as info:
        read_training_log(bad)
    assert info.value.line == 3
    with pytest.raises(ValueError, match="no run logs 'acc'"):
        training_curves_figure({"a": [{"step": 0, "loss": 1.0}]}, scalars=("acc",))
    with pytest.raises(ValueError, match="run 'a', step 0: 'loss' is not a number"):
        training_curves_figure({"a": [{"step": 0, "loss": "nan?"}]})


def test_per_query_difference_plot_marks_mean_and_ci(tmp_path):
    d = np.array([-0.2, 0.0, 0.1, 0.1, 0.3])
    low, high = t_interval(d)
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / np.sqrt(5)
    assert (low, high) == pytest.approx((0.06 - half, 0.06 + half))
    fig = per_query_difference_figure(d, metric="nDCG@10", bins=5)
    hist_ax, sorted_ax = fig.axes
    bins = [p for p in hist_ax.patches[:5]]
    assert sum(p.get_height() for p in bins) == 5
    assert hist_ax.lines[0].get_xdata()[0] == pytest.approx(0.06)               # the mean
    span = hist_ax.patches[-1]
    assert (span.get_x(), span.get_x() + span.get_width()) == pytest.approx((low, high))
    heights = [p.get_height() for p in sorted_ax.patches[:5]]
    assert heights == [-0.2, 0.0, 0.1, 0.1, 0.3]
    assert sorted_ax.lines[0].get_ydata()[0] == pytest.approx(0.06)
    assert sorted_ax.get_title() == "3 wins / 1 ties / 1 losses"
    # a CI from elsewhere (e.g. the paired bootstrap) is drawn as given
    fig = per_query_difference_figure(d, ci=(-0.01, 0.2))
    assert (fig.axes[0].patches[-1].get_x(), fig.axes[0].patches[-1].get_width()) == pytest.approx((-0.01, 0.21))
    png, pdf = save_figure(fig, tmp_path / "diffs")
    assert _png_size(png) == (1000, 400) and pdf.stat().st_size > 0


def test_per_query_differences_align_by_query_id():
    a = EvaluationResult(["q1", "q2", "q3"], {"ndcg@10": np.array([0.5, 0.2, 1.0])})
    b = EvaluationResult(["q3", "q1", "q2"], {"ndcg@10": np.array([0.0, 0.75, 0.2])})
    ids, diff = per_query_differences(a, b, "ndcg@10")
    assert ids == ["q1", "q2", "q3"] and diff.tolist() == [0.25, 0.0, -1.0]
    c = EvaluationResult(["q1", "q2"], {"ndcg@10": np.array([0.5, 0.2])})
    with pytest.raises(ValueError, match="1 queries only in the first result and 0 only in the second"):
        per_query_differences(a, c, "ndcg@10")
