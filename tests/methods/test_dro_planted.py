"""Planted query clusters at tiny scale: two large easy clusters and a small hard one (METHODS.md 2.2, 2.3).

Training set (one source, so the clusters are latent and found by the methods' K-means): 96 + 96 easy
queries ``river river <colour> <filler>`` / ``mountain mountain <colour> <filler>`` whose positive repeats
the colour, and 32 hard queries whose animal word is diluted among six ``ocean`` markers; every document
is one word (positive: the query's word; negative: another of its cluster's words).  Mean pooling makes
the easy clusters start ahead (a shared token already aligns) while the hard one must be learned.

What holds here (measured, asserted): K-means on the initial model isolates the hard cluster; GroupDRO
raises its weight (greedy: 1/alpha on almost every step; sagawa: above the easy clusters and rising);
iDRO in code mode keeps its weights within ~15% of uniform, since ``e = rho * mean_j RTG_ij`` with
rho = 0.05 bounds the log-ratio of two weights by about 2 rho max(l)^(2 beta) / (1 - ema).  What does not
hold in this world (printed, not asserted): more weight on the small hard cluster does not lower its
held-out loss below the uniform baseline after 40 steps.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from harness.data.collections import TrainingData, TrainingSource
from harness.data.training import TrainingRow
from harness.method import get_method
from harness.train.spec import TrainSpec
from methods.clusters import triplet_losses
from methods.groupdro import GroupDRO
from methods.idro import IDRO

pytestmark = pytest.mark.usefixtures("one_thread")

COLOURS = "red blue green yellow black white brown pink gray orange purple silver gold".split()
ANIMALS = "cat dog horse cow sheep goat pig duck".split()
FILLERS = "the a of and".split()
EASY, HARD = ("river", "mountain"), "ocean"


def rows(marker: str, n: int, rng: random.Random) -> list[TrainingRow]:
    words, repeat = (ANIMALS, 6) if marker == HARD else (COLOURS, 2)
    out = []
    for _ in range(n):
        i, j = rng.sample(range(len(words)), 2)
        query = " ".join([marker] * repeat + [words[i], rng.choice(FILLERS)])
        pos, neg = ((w if marker == HARD else f"{w} {rng.choice(FILLERS)} {w}") for w in (words[i], words[j]))
        out.append(TrainingRow(query, [pos], [neg]))
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from trainutil import make_tiny_bert

    rng = random.Random(0)
    train = [*rows(EASY[0], 96, rng), *rows(EASY[1], 96, rng), *rows(HARD, 32, rng)]
    truth = np.array([0] * 96 + [1] * 96 + [2] * 32)
    order = list(range(len(train)))
    rng.shuffle(order)
    data = TrainingData([TrainingSource("planted", [train[i] for i in order], fingerprint="planted-v1")])
    held = {"hard": rows(HARD, 64, random.Random(1)), "easy": rows(EASY[0], 64, random.Random(2))}
    model = str(make_tiny_bert(tmp_path_factory.mktemp("bert"), dropout=0.0))
    spec = IDRO.spec("tiny", model=model, pooling="mean", batch_size=64, steps=40, warmup_steps=2, lr=2e-3,
                     query_max_length=16, doc_max_length=16, progress=False,
                     method_options={"k": 3, "niter": 20, "nredo": 5, "blocks": 1})
    return data, truth[order], held, spec


def held_out_losses(model_dir: str, spec: TrainSpec, held) -> dict[str, float]:
    from harness.encoders.backbone import tokenize
    from harness.train.model import build_model

    net, tok, _ = build_model(spec.replace(model=model_dir), trainable=False)
    out = {}
    with torch.no_grad():
        for name, triplets in held.items():
            q = net(**dict(tokenize(tok, [r.query for r in triplets], 16)))
            p = net(**dict(tokenize(tok, [t for r in triplets for t in (r.pos[0], r.neg[0])], 16)))
            out[name] = float(triplet_losses(q, p, "dot", 1.0).mean())
    return out


def recording(cls):
    """The method, recording per step its weights and which clusters the batch held."""

    class Recording(cls):
        name = cls.name

        def reduce(self, out, ctx):
            self.present.append(self.cluster_means(out)[2].cpu().numpy())
            return super().reduce(out, ctx)

        def on_step_end(self, ctx):
            self.history.append(self.weights.detach().cpu().numpy().copy())

    method = Recording()
    method.present, method.history = [], []
    return method


@pytest.fixture(scope="module")
def uniform(world, tmp_path_factory):
    data, _, held, spec = world
    plain = TrainSpec.from_dict({**spec.to_dict(), "method_options": {}})   # the same recipe, mean loss
    ckpt = get_method("uniform").train(plain, data, tmp_path_factory.mktemp("uniform"))
    return held_out_losses(str(ckpt.path), spec, held), held_out_losses(spec.model, spec, held)


@pytest.mark.parametrize("label,cls,options", [("idro-code", IDRO, {}), ("groupdro-sagawa", GroupDRO, {}),
                                               ("groupdro-greedy", GroupDRO, {"variant": "greedy"})])
def test_small_hard_cluster(world, uniform, tmp_path, label, cls, options):
    data, truth, held, spec = world
    method = recording(cls)
    ckpt = method.train(spec.replace(method_options=options), data, tmp_path)
    clusters = method.assignment
    hard = int(np.bincount(clusters[truth == 2]).argmax())
    assert set(clusters[truth == 2]) == {hard} and set(truth[clusters == hard]) == {2}    # isolated, exactly
    every = np.array(method.present).all(axis=1)
    weights = np.array(method.history)[every]
    mean = weights.mean(axis=0)
    easy = np.delete(mean, hard)
    losses, initial = held_out_losses(str(ckpt.path), spec, held), uniform[1]
    print(f"\n{label}: mean weights on {every.sum()} steps with every cluster present {mean.round(3)} "
          f"(hard cluster {hard}); held-out triplet loss hard {losses['hard']:.3f} / easy {losses['easy']:.3f}; "
          f"uniform {uniform[0]['hard']:.3f} / {uniform[0]['easy']:.3f}; initial model {initial['hard']:.3f} / "
          f"{initial['easy']:.3f}")
    assert initial["hard"] > initial["easy"] and uniform[0]["hard"] > uniform[0]["easy"]   # planted difficulty
    assert losses["hard"] < initial["hard"] and losses["easy"] < initial["easy"]           # learnable
    if label == "groupdro-greedy":
        assert np.isclose(weights[:, hard], 1 / 0.2).mean() >= 0.9 and mean[hard] > 5 * easy.max()
    elif label == "groupdro-sagawa":
        assert mean[hard] > easy.max() and weights[-1, hard] > weights[0, hard]
    else:
        assert abs(mean[hard] * 3 - 1) < 0.15 and np.abs(weights * 3 - 1).max() < 0.15
