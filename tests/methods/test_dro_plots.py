"""The DRO trace (method/dro_trace.npz) and its heat map: reports.plots_dro, the layout kinds of
harness/ablation/layouts/dro.py (cluster-weights table and figure, refusals), ``harness table suite ... --figure``."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from harness.ablation import load_suite
from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.cli import main
from harness.errors import ConfigError, InputError
from methods.clusters import write_trace
from reports.plots_dro import cluster_weight_figure, read_trace, worst_cluster_loss


def trace_arrays():
    weights = np.array([[1.0, 1.0, 1.0], [0.9, 1.2, 1.0], [0.8, 1.5, 0.9], [0.7, 1.9, 0.8]], dtype=np.float32)
    losses = np.array([[0.5, 1.0, np.nan], [0.4, 1.2, 0.3], [np.nan, np.nan, np.nan], [0.2, 0.9, 0.6]],
                      dtype=np.float32)
    counts = np.array([[3, 2, 0], [2, 2, 1], [0, 0, 0], [2, 1, 2]], dtype=np.int32)
    sizes = np.array([[10, 4, 6]] * 2 + [[9, 5, 6]] * 2, dtype=np.int32)
    return {"weights": weights, "losses": losses, "counts": counts, "sizes": sizes}


def test_trace_round_trip_worst_loss_and_heat_map(tmp_path):
    write_trace(tmp_path / "dro_trace.npz", trace_arrays())
    trace = read_trace(tmp_path / "dro_trace.npz")
    assert trace["steps"].tolist() == [1, 2, 3, 4]
    worst = worst_cluster_loss(trace)
    assert np.allclose(worst[[0, 1, 3]], [1.0, 1.2, 0.9]) and np.isnan(worst[2])
    fig = cluster_weight_figure(trace, "title")
    image = fig.axes[0].images[0].get_array()
    share = trace["weights"] / trace["weights"].sum(axis=1, keepdims=True)
    assert np.allclose(np.asarray(image), share.T)                              # clusters x steps, per-step shares
    raw = cluster_weight_figure(trace, normalise=False).axes[0].images[0].get_array()
    assert np.allclose(np.asarray(raw), trace["weights"].T)


def test_bad_trace_files_are_named(tmp_path):
    with pytest.raises(InputError, match="no DRO trace here"):
        read_trace(tmp_path / "missing.npz")
    arrays = trace_arrays()
    del arrays["sizes"]
    np.savez(tmp_path / "partial.npz", steps=np.arange(1, 5), **arrays)
    with pytest.raises(InputError, match="partial.npz.*missing array\\(s\\) sizes"):
        read_trace(tmp_path / "partial.npz")
    arrays = trace_arrays()
    arrays["losses"] = arrays["losses"][:, :2]
    np.savez(tmp_path / "shape.npz", steps=np.arange(1, 5), **arrays)
    with pytest.raises(InputError, match="array 'losses' has shape \\(4, 2\\), expected \\(4, 3\\)"):
        read_trace(tmp_path / "shape.npz")
    (tmp_path / "text.npz").write_text("not numpy")
    with pytest.raises(InputError, match="text.npz"):
        read_trace(tmp_path / "text.npz")


def finished(root, variant="coco-idro"):
    summary = root / "suites" / "coco_dr" / "tiny" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"cells": [{"variant": variant, "key": "k1"}]}))
    write_trace(root / "cells" / "train" / "k1" / "method" / "dro_trace.npz", trace_arrays())


def test_cluster_weights_layout_table_and_figure(tmp_path):
    finished(tmp_path)
    suite = load_suite("coco_dr")
    table = render_layout(suite, "tiny", tmp_path, "weights-heatmap")
    assert [r.label for r in table.rows] == ["cluster 0", "cluster 1", "cluster 2"]
    assert table.rows[1].cells["final"].value == pytest.approx(1.9)
    assert table.rows[1].cells["share"].value == pytest.approx(1.9 / 3.4)
    assert table.rows[0].cells["loss"].value == pytest.approx(np.mean([0.5, 0.4, 0.2]))
    assert table.rows[2].cells["size"].value == "6"
    assert layout_figure(suite, "tiny", tmp_path, "weights-heatmap").axes[0].images
    stem = tmp_path / "figs" / "heat"
    assert main(["table", "suite", "coco_dr", "--scale", "tiny", "--results-root", str(tmp_path), "--layout",
                 "weights-heatmap", "--figure", str(stem)]) == 0
    assert (tmp_path / "figs" / "heat.png").stat().st_size > 0 and (tmp_path / "figs" / "heat.pdf").exists()
    with pytest.raises(ConfigError, match="no cell for variant 'coco-greedy'"):
        render_layout(suite, "tiny", tmp_path, "greedy-heatmap")


def test_cluster_weights_layout_refuses_two_variants_or_a_method_without_clusters():
    suite = load_suite("coco_dr")
    bad = copy.deepcopy(suite)
    bad.raw["table"]["layouts"]["weights-heatmap"]["columns"] = ["coco-idro", "idro"]
    with pytest.raises(ConfigError, match="shows one variant; its columns name 2"):
        load_layout(bad, "tiny", "weights-heatmap")
    other = copy.deepcopy(suite)
    other.variant("idro").method = "uniform"
    other.raw["table"]["layouts"]["weights-heatmap"]["columns"] = ["idro"]
    with pytest.raises(ConfigError, match="trained by 'uniform', which keeps no cluster weights"):
        load_layout(other, "tiny", "weights-heatmap")


def test_dataset_rows_layout_refuses_unknown_options_and_labels():
    suite = load_suite("coco_dr")
    assert load_layout(suite, "tiny", "table2").options["labels"]["coco"] == "-iDRO"
    bad = copy.deepcopy(suite)
    bad.raw["table"]["layouts"]["table2"]["options"] = {"metric": "ndcg@10", "colour": "red"}
    with pytest.raises(ConfigError, match="unknown option\\(s\\) colour; options: metric, labels"):
        load_layout(bad, "tiny", "table2")
    bad.raw["table"]["layouts"]["table2"]["options"] = {"labels": {"coco-greedy": "x"}}
    with pytest.raises(ConfigError, match="labels must map the layout's column variants"):
        load_layout(bad, "tiny", "table2")
