"""The released COCO-DR pipeline as stages (COCO pretraining -> BM25 warm-up -> ANCE episodes) and the
paper-vs-code clustering modes (paper 001 §4.2 / §5.1; OpenMatch/COCO-DR warmup/, ANCE/)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.method import get_method
from methods.clusters import kmeans_assign

# Two directions, each at several norms: dot-product (spherical) K-means groups by direction, L2 K-means by norm.
POINTS = np.array([[1, 0], [10, 0], [0, 1], [0, 10], [2, 0.1], [0.1, 2]], dtype=np.float32)
DIRECTION = np.array([0, 0, 1, 1, 0, 1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dot_kmeans_groups_by_direction_l2_does_not(seed):
    dot = kmeans_assign(POINTS, 2, 50, 10, seed, metric="dot")
    assert (dot == DIRECTION).all() or (dot == 1 - DIRECTION).all()
    l2 = kmeans_assign(POINTS, 2, 50, 10, seed, metric="l2")
    assert not ((l2 == DIRECTION).all() or (l2 == 1 - DIRECTION).all())
    with pytest.raises(ConfigError, match="metric"):
        kmeans_assign(POINTS, 2, 5, 1, seed, metric="cosine")


COCO = {"preset": "tiny", "train": {"steps": 7, "lr": 0.002, "model": "condenser-stand-in"},
        "options": {"corpora": ["synthetic:tdro/eval/cjk_qa"]}}
WARMUP = {"preset": "tiny", "train": {"steps": 5, "lr": 0.0002, "batch_size": 8}, "options": {"k": 2}}


def test_warmup_stage_runs_coco_first_and_fine_tuning_mines_from_it():
    idro = get_method("idro")
    spec = idro.spec("tiny", model="tiny-model", seed=3,
                     method_options={"coco": COCO, "warmup": WARMUP, "ance_refresh_steps": 4,
                                     "ance_warmup": "model"})
    (warm,) = idro.stages(spec)
    assert (warm.name, warm.method, warm.starts_from) == ("warmup", "dro-erm", True)
    assert (warm.spec.steps, warm.spec.lr, warm.spec.batch_size, warm.spec.seed) == (5, 0.0002, 8, 3)
    assert warm.spec.model == "tiny-model"
    opts = dict(warm.spec.method_options)
    assert opts["ance_refresh_steps"] == 0 and opts["k"] == 2 and "warmup" not in opts    # BM25 negatives only
    assert warm.sources["lr"] == "the suite's warmup option (train.lr)"
    assert warm.sources["options.k"] == "the suite's warmup option (options.k)"
    # COCO runs before the warm-up, from its own model (the paper's COCO starts from Condenser)
    (coco,) = get_method("dro-erm").stages(warm.spec)
    assert (coco.name, coco.method, coco.starts_from) == ("coco", "coco", True)
    assert (coco.spec.steps, coco.spec.lr, coco.spec.model, coco.spec.seed) == (7, 0.002, "condenser-stand-in", 3)
    assert coco.sources["model"] == "the suite's coco option (train.model)"
    # without a warm-up the fine-tuning trains COCO itself, as before
    (only,) = idro.stages(idro.spec("tiny", model="m", method_options={"coco": COCO}))
    assert only.name == "coco" and only.sources["steps"] == "the suite's coco option (train.steps)"
    assert idro.stages(idro.spec("tiny", model="m")) == []
    with pytest.raises(ConfigError, match="option warmup must be a mapping"):
        idro.stages(idro.spec("tiny", model="m", method_options={"warmup": {"lr": 1}}))


def test_ance_warmup_model_refreshes_at_step_zero(tmp_path):
    """``ance_warmup: model``: the first episode's negatives are mined with the starting model (the released
    episode 1 after the BM25 warm-up), later episodes as usual; ``data`` keeps the collection's at step 0."""
    calls: list[tuple[str, int]] = []

    class Negatives:
        def warmup(self, ctx, directory):
            calls.append(("warmup", ctx.step))

        def refresh(self, ctx, directory):
            calls.append(("refresh", ctx.step))

    class Ctx:
        step = 0

    for kind, first in (("model", "refresh"), ("data", "warmup")):
        method = get_method("dro-erm")
        method.negatives, method.negative_steps, method.cluster_steps = Negatives(), {0, 4}, set()
        method.mine_first = kind == "model"
        calls.clear()
        for step in (0, 4):
            Ctx.step = step
            method.run_episode(Ctx(), tmp_path)
        assert calls == [(first, 0), ("refresh", 4)]
