"""Composable losses (harness.method.compose): a loss-only method in 40 lines, wrapped by tDRO's and GroupDRO's
reweighting from a suite file, without a new class."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.cli import main
from harness.errors import ConfigError
from harness.method import get_method
from harness.method.compose import Composed, compose
from harness.train.logs import read_log

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread")

TRAIN = {"steps": 8, "batch_size": 16, "warmup_steps": 1, "n_hard_negatives": 1, "lr": 1e-3,
         "use_instructions": False, "seed": 3}
EQUAL = {name: 1.0 for name in ("latin_qa", "latin_synonyms", "cyrillic_news", "cjk_qa", "latin_noisy", "thai_sts")}


def test_the_loss_only_method_fits_in_40_lines():
    source = (REPO / "methods" / "debiased.py").read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 40
    assert "class " in source and source.count("def ") == 2          # the kernel and ``losses``: nothing else


def _suite(path: Path) -> Path:
    base = {"base": "debiased", "base_options": {"tau_plus": 0.1}}
    raw = {"name": "composed", "version": 1, "description": "a loss-only method under two reweightings",
           "baseline": "debiased", "metrics": ["ndcg@10"], "stats": {"test": "randomization", "seed": 0},
           "variants": [
               {"id": "debiased", "method": "debiased", "options": {"tau_plus": 0.1}},
               # tDRO's loss transfer with equal weights multiplies every loss by k * 1/k = 1: the debiased run
               {"id": "tdro-equal", "method": "tdro", "options": {**base, "weights": EQUAL, "transfer": "loss"}},
               # tDRO as the paper runs it: stage 1 (and its reference) first, then the reweighted debiased loss
               {"id": "tdro", "method": "tdro",
                "options": {**base, "transfer": "loss", "stage1": {"steps": 4}, "reference": {"steps": 4}}},
               # GroupDRO on the debiased run's recipe (its own presets are COCO-DR's: dot product, [CLS], ...)
               {"id": "groupdro", "method": "groupdro", "options": {**base, "k": 2, "eta": 1.0},
                "train": {"temperature": 0.05, "pooling": "mean", "similarity": "cos", "normalize": None,
                          "sampling": "homogeneous", "in_batch_negatives": True, "cross_batch_negatives": True}}],
           "scales": {"tiny": {"model": "synthetic:default/tiny-bert", "data": ["synthetic:default"], "train": TRAIN,
                               "benchmarks": [{"id": "latin_qa", "suite": "synthetic", "max_queries": 30,
                                               "dataset_dir": "synthetic:default/eval/latin_qa"}]}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_suite_file_wraps_the_loss_with_tdro_and_groupdro(tmp_path):
    suite_file = _suite(tmp_path / "composed.yaml")
    root = tmp_path / "results"
    assert main(["run", str(suite_file), "--results-root", str(root), "--no-progress"]) == 0
    cells = {c.variant.id: c for c in expand_train_cells(load_suite(str(suite_file)), "tiny")}
    assert {c.method for c in cells.values()} == {"debiased", "tdro", "groupdro"}      # registered methods only
    logs = {v: read_log(root / "cells" / "train" / c.key / "train_log.jsonl") for v, c in cells.items()}
    loss = {v: [r["loss"] for r in log] for v, log in logs.items()}
    assert len(loss["debiased"]) == TRAIN["steps"]
    # tDRO around the debiased loss with multipliers 1 is the debiased run, step for step
    assert loss["tdro-equal"] == pytest.approx(loss["debiased"], rel=1e-6)
    # GroupDRO's first step sees the same model and batch: the same per-sample (debiased) losses, reweighted
    assert logs["groupdro"][0]["infonce"] == pytest.approx(logs["debiased"][0]["infonce"], rel=1e-6)
    assert not np.allclose(loss["groupdro"], loss["debiased"])
    weights = np.load(root / "cells" / "train" / cells["groupdro"].key / "method" / "cluster_weights.npy")
    assert weights.shape == (2,) and not np.allclose(weights, 0.5)
    transfer = json.loads((root / "cells" / "train" / cells["tdro"].key / "method" / "transfer.json").read_text())
    assert transfer["weights"] == "stage 1 (final)"
    multipliers = list(transfer["loss_multipliers"].values())
    assert not np.allclose(multipliers, 1.0) and loss["tdro"] != pytest.approx(loss["debiased"], rel=1e-6)
    table = (root / "suites" / "composed" / "tiny" / "table.md").read_text()
    assert all(v in table for v in ("tdro-equal", "groupdro"))


def test_groupdro_around_splade_reads_and_encodes_like_splade():
    from harness.encoders.heads import SparseHead

    groupdro = get_method("groupdro")
    composed = compose(groupdro, groupdro.resolve_options({"base": "splade", "base_options": {"lambda_q": 0.01}}))
    assert isinstance(composed, Composed) and composed.name == "groupdro"
    spec = groupdro.spec("tiny", model=get_method("splade").spec("tiny").model, method_options={"base": "splade"})
    assert isinstance(composed.representation_head(spec), SparseHead)
    assert composed.base_options["lambda_q"] == 0.01 and composed.stages is not None


def test_language_topic_weights_wrap_a_base_too():
    mined = get_method("mined")
    composed = compose(mined, mined.resolve_options({"base": "debiased", "weights": "constant"}))
    assert isinstance(composed, Composed) and composed.base.name == "debiased"
    assert composed.reduce.__func__ is type(mined).reduce          # the weighting is the wrapper's


def test_bad_compositions_are_refused():
    tdro = get_method("tdro")
    with pytest.raises(ConfigError, match="unknown method 'debiasd'.*debiased"):
        compose(tdro, tdro.resolve_options({"base": "debiasd"}))
    with pytest.raises(ConfigError, match="tau_plus"):
        compose(tdro, tdro.resolve_options({"base": "debiased", "base_options": {"tau_plus": 1.5}}))
    with pytest.raises(ConfigError, match="is the method itself"):
        compose(tdro, tdro.resolve_options({"base": "tdro"}))
    with pytest.raises(ConfigError, match="wraps a base of its own"):
        compose(tdro, tdro.resolve_options({"base": "groupdro", "base_options": {"base": "debiased"}}))
