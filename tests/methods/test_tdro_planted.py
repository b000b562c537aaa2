"""Planted structure at ``tiny`` scale (synthetic ``WorldSpec.tdro()``), with the suite's own stage-1 settings.

The world has easy domains, a small hard-but-learnable domain (``latin_synonyms``) and a
large noise domain (``latin_noisy``: random positives, so its loss stays high).  The
paper's "Yahoo" effect: a ``proxy``-only measurement up-weights the high-loss domain;
the ``relative`` measurement (proxy over the frozen uniform reference) down-weights it,
so Top-k% selection keeps the learnable domains and drops the noise.

The fast test runs the proxy-only stage 1 (no reference needed, seconds); the slow one
trains the uniform reference (the suite's baseline cell, 300 steps) and the relative
stage 1.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.method import Method, get_method
from methods.tdro import select_top, stage1_spec

pytestmark = pytest.mark.usefixtures("one_thread")

NOISE, HARD = "latin_noisy", "latin_synonyms"


@pytest.fixture(scope="module")
def suite_cells():
    from harness.ablation import load_suite
    from harness.ablation.cells import expand_train_cells

    return {c.variant.id: c for c in expand_train_cells(load_suite("tdro"), "tiny")}


def learned_weights(cell, root: Path) -> dict[str, float]:
    """Stage 1 of a suite cell, trained (with its reference) under ``root`` like the runner would."""
    from harness.data.collections import load_training_data

    method = get_method("tdro")
    spec = stage1_spec(cell.spec, method.resolve_options(dict(cell.spec.method_options))).replace(progress=False)
    weights = get_method("tdro-weights")
    weights.cells_root = root
    data = load_training_data(cell.data_entries)
    ckpt = weights.train(spec, data, root / Method.run_key("tdro-weights", spec, data))
    return json.loads((ckpt.workdir / "method" / "curr_weights.json").read_text())


def test_proxy_measure_up_weights_the_noise_domain(tmp_path, suite_cells):
    alpha = learned_weights(suite_cells["proxy"], tmp_path)
    k = len(alpha)
    assert max(alpha, key=alpha.get) == NOISE
    assert alpha[NOISE] > 1.5 / k                   # well above uniform
    assert sum(alpha.values()) == pytest.approx(1.0)


@pytest.mark.slow
def test_relative_down_weights_noise_and_top_k_keeps_learnable(tmp_path, suite_cells):
    relative = learned_weights(suite_cells["relative"], tmp_path)
    proxy = learned_weights(suite_cells["proxy"], tmp_path)
    names, k = list(relative), len(relative)
    assert relative[NOISE] < 1 / k < proxy[NOISE]                      # the "Yahoo" effect
    assert relative[NOISE] < relative[HARD]
    ranked = sorted(names, key=relative.get, reverse=True)
    assert ranked.index(NOISE) >= k // 2                               # bottom half under relative
    assert sorted(names, key=proxy.get, reverse=True)[0] == NOISE      # top under proxy
    for percent in (50, 60, 70):                                       # Top-k% keeps the learnable, drops the noise
        kept = {n for n, w in zip(names, select_top(np.array([relative[n] for n in names]), percent)) if w > 0}
        assert HARD in kept and NOISE not in kept, (percent, kept)
