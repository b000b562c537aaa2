"""Planted query clusters at tiny scale: two large easy clusters and a small hard one (METHODS.md 2.2, 2.3).

**The world.**  One source (so the clusters are latent and found by the methods' K-means): 96 + 96 + 32
queries ``<marker> <marker> <colour> <filler>`` with the markers ``river`` / ``mountain`` / ``ocean``.  Every
document is ``<colour> <tag>`` and each cluster has its own pair of tags: the positive repeats the query's
colour with the cluster's good tag (``north`` / ``left`` / ``up``), the one negative is, at random, the same
colour with the bad tag (``south`` / ``right`` / ``down``) or another colour with the good tag.  A cluster is
solved by matching the colour and preferring its own good tag; the three tag rules do not conflict.  The
model is the tiny random BERT trained through **LoRA of rank 2** (frozen embeddings): the three rules compete
for the same small capacity, so what the loss weights give each cluster decides how well it learns - the
setting DRO is made for.  The 32-query cluster is the hard one by its share (1/7 of the batches' loss under
the mean).  K-means on the initial model isolates it exactly (asserted).  Held out: 64 new queries of the
hard cluster and 64 of the first easy one, each ranked against all its domain's held-out documents (MRR).

**Measured** (hard / easy MRR, 60 steps at lr 2e-3, 5 seeds of world and run; the test uses seed 0):

| row | seed 0 | 1 | 2 | 3 | 4 | mean hard weight, seed 0 |
|---|---|---|---|---|---|---|
| dro-erm (the mean) | 0.246 / 0.684 | 0.258 / 0.588 | 0.285 / 0.611 | 0.277 / 0.767 | 0.240 / 0.614 | (1/7) |
| iDRO code, released rho 0.05 | 0.334 / 0.636 | 0.318 / 0.612 | 0.418 / 0.613 | 0.365 / 0.742 | 0.312 / 0.609 | 0.334 |
| iDRO code, rho 2 | 0.334 / 0.636 | 0.327 / 0.611 | 0.433 / 0.612 | 0.367 / 0.741 | 0.323 / 0.606 | 0.341 |
| iDRO code, rho 5 | 0.334 / 0.636 | 0.310 / 0.611 | 0.441 / 0.603 | 0.428 / 0.758 | 0.347 / 0.605 | 0.352 |
| iDRO paper, tau 1 | 0.334 / 0.634 | 0.329 / 0.612 | 0.436 / 0.613 | 0.367 / 0.742 | 0.320 / 0.611 | 0.368 |
| GroupDRO sagawa, eta 1 | 0.403 / 0.611 | 0.435 / 0.581 | 0.485 / 0.596 | 0.483 / 0.717 | 0.362 / 0.604 | 0.813 |
| GroupDRO greedy | 0.393 / 0.621 | 0.443 / 0.578 | 0.485 / 0.580 | 0.463 / 0.715 | 0.378 / 0.612 | 0.887 (share) |

Every reweighting row retrieves the hard cluster better than ``dro-erm`` on every seed, at a small cost on
the easy one: the robust trade-off.  Most of iDRO's gain is the cluster-balanced average itself (the hard
cluster gets about 1/K of the loss instead of 1/7; the released rho 0.05 keeps the weights within 2% of
uniform, see below); the rules that tilt the weights far (sagawa with a large step, greedy) gain most.
At lr 5e-3 the same holds on 5 seeds for iDRO (both modes) and greedy; sagawa at eta 1 loses one seed.

**What does not show it** (measured in an earlier version of this world: full fine-tuning, a hard cluster
made hard by diluting its content word among six markers): more weight on the hard cluster raised its
weight but *lowered* its held-out MRR under every rule (dro-erm 0.899 vs 0.72-0.76).  There the hard
queries needed the skill the easy ones teach, capacity was ample, and upweighting 32 of 224 queries only
traded that shared signal for noise - unregularised reweighting does not buy worst-group generalisation
without a trade-off to arbitrate (Sagawa et al., 2020).  And where the clusters' rules *conflict* (the same
tags preferred the other way round), iDRO lowers the hard cluster's weight: its update rewards clusters
whose gradients align with the others' (METHODS.md 2.2), so it is not a worst-group rule.

**Why iDRO's code update stays near uniform at the released rho** (not a bug: ``idro_step`` meets the
oracles I1-I3 and the per-cluster gradients equal one backward per cluster).  With h⁰ = ones and
``h = h_prev^ema exp(e) / Z``, the log-ratio of two weights obeys ``|d_t| <= ema |d_t-1| + |e_i - e_j|`` with
``e_i = rho/K Σ_j l_i^β l_j^β cos_ij``, so it stays below ``2 rho max(l)^(2 beta) / (1 - ema)``: 0.1 at rho 0.05.
The weights rise visibly with ``rho`` of a few units (the paper leaves its temperature free; the code's rho is
1/tau on normalised gradients, times K) or in paper mode with tau of about 1.
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
from methods.idro import IDRO

pytestmark = pytest.mark.usefixtures("one_thread")

COLOURS = "red blue green yellow black white brown pink gray orange purple silver gold".split()
FILLERS = "the a of and".split()
# cluster marker -> (good tag, bad tag); the last one is the small hard cluster
TAGS = {"river": ("north", "south"), "mountain": ("left", "right"), "ocean": ("up", "down")}
EASY, HARD = ("river", "mountain"), "ocean"
K = 3
# label -> (method, options): the reweighting rows, each at a setting under which its hard weight rises
ROWS = {"idro-code": ("idro", {"rho": 5.0}), "idro-paper": ("idro", {"mode": "paper", "tau": 1.0}),
        "groupdro-sagawa": ("groupdro", {"eta": 1.0}), "groupdro-greedy": ("groupdro", {"variant": "greedy"})}


def rows(marker: str, n: int, rng: random.Random) -> list[TrainingRow]:
    good, bad = TAGS[marker]
    out = []
    for _ in range(n):
        i, j = rng.sample(range(len(COLOURS)), 2)
        query = " ".join([marker, marker, COLOURS[i], rng.choice(FILLERS)])
        neg = f"{COLOURS[i]} {bad}" if rng.random() < 0.5 else f"{COLOURS[j]} {good}"
        out.append(TrainingRow(query, [f"{COLOURS[i]} {good}"], [neg]))
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
    held = {"hard": rows(HARD, 64, random.Random(100)), "easy": rows(EASY[0], 64, random.Random(200))}
    model = str(make_tiny_bert(tmp_path_factory.mktemp("bert"), dropout=0.0))
    spec = IDRO.spec("tiny", model=model, pooling="mean", batch_size=64, steps=60, warmup_steps=2, lr=2e-3,
                     query_max_length=16, doc_max_length=16, progress=False, seed=0,
                     lora={"r": 2, "alpha": 4, "dropout": 0.0},
                     method_options={"k": K, "niter": 20, "nredo": 5, "blocks": 1})
    return data, truth[order], held, spec


def held_out(model_dir: str, spec: TrainSpec, held) -> dict[str, dict[str, float]]:
    """Per held-out domain: the mean triplet loss, and the MRR of each query's positive among all the
    domain's held-out documents (the retrieval metric)."""
    from harness.encoders.backbone import tokenize
    from harness.train.model import build_model

    net, tok, _ = build_model(spec.replace(model=model_dir), trainable=False)
    out = {}
    with torch.no_grad():
        for name, triplets in held.items():
            q = net(**dict(tokenize(tok, [r.query for r in triplets], 16)))
            p = net(**dict(tokenize(tok, [t for r in triplets for t in (r.pos[0], r.neg[0])], 16)))
            docs = sorted({t for r in triplets for t in (r.pos[0], r.neg[0])})
            scores = q @ net(**dict(tokenize(tok, docs, 16))).T
            gold = scores[torch.arange(len(triplets)), torch.tensor([docs.index(r.pos[0]) for r in triplets])]
            ranks = (scores > gold[:, None]).sum(dim=1) + 1
            out[name] = {"loss": float(triplet_losses(q, p, "dot", 1.0).mean()),
                         "mrr": float((1.0 / ranks.float()).mean())}
    return out


def recording(name: str):
    """The method, recording per step its weights and which clusters the batch held."""
    cls = type(get_method(name))

    class Recording(cls):                                           # type: ignore[valid-type,misc]
        def reduce(self, out, ctx):
            self.present.append(self.cluster_means(out)[2].cpu().numpy())
            return super().reduce(out, ctx)

        def on_step_end(self, ctx):
            self.history.append(self.weights.detach().cpu().numpy().copy())

    Recording.name = cls.name
    method = Recording()
    method.present, method.history = [], []
    return method


@pytest.fixture(scope="module")
def runs(world, tmp_path_factory):
    """Trained rows by label, each trained once on first use: (method with its history, held-out numbers)."""
    data, _, held, spec = world
    cache: dict[str, tuple] = {}

    def run(label: str):
        if label not in cache:
            name, options = ("dro-erm", {}) if label == "dro-erm" else \
                ("idro", {}) if label == "idro-code-default" else ROWS[label]
            method = recording(name)
            ckpt = method.train(spec.replace(method_options={**spec.method_options, **options}), data,
                                tmp_path_factory.mktemp(label))
            cache[label] = (method, held_out(str(ckpt.path), spec, held))
        return cache[label]

    return run


def hard_weights(method, truth):
    """(index of the hard cluster, weights per step with every cluster present, their mean)."""
    clusters = method.assignment
    hard = int(np.bincount(clusters[truth == 2]).argmax())
    assert set(clusters[truth == 2]) == {hard} and set(truth[clusters == hard]) == {2}    # isolated, exactly
    every = np.array(method.present).all(axis=1)
    weights = np.array(method.history)[every]
    assert every.sum() >= 30
    return hard, weights, weights.mean(axis=0)


@pytest.mark.parametrize("label", list(ROWS))
def test_the_small_hard_cluster_gains_weight(world, runs, label):
    _, truth, _, _ = world
    method, numbers = runs(label)
    hard, weights, mean = hard_weights(method, truth)
    easy = np.delete(mean, hard)
    print(f"\n{label}: mean weights on {len(weights)} steps with every cluster present {mean.round(3)} (hard "
          f"cluster {hard}), last {weights[-1].round(3)}; held-out hard/easy loss {numbers['hard']['loss']:.3f} / "
          f"{numbers['easy']['loss']:.3f}, MRR {numbers['hard']['mrr']:.3f} / {numbers['easy']['mrr']:.3f}")
    share = mean[hard] / mean.sum()             # greedy's weights do not sum to 1
    assert share > 1 / K and mean[hard] > easy.max()
    if label == "groupdro-greedy":
        assert np.isclose(weights[:, hard], 1 / 0.2).mean() >= 0.9 and mean[hard] > 5 * easy.max()
    elif label == "groupdro-sagawa":
        assert weights[-1, hard] > weights[0, hard]
    else:
        assert share > 1.05 / K
    assert numbers["hard"]["loss"] < 0.69 and numbers["easy"]["loss"] < 0.69      # learnable (ln 2 at chance)


def test_idro_code_update_stays_near_uniform_at_the_released_rho(world, runs):
    _, truth, _, _ = world
    method, _ = runs("idro-code-default")
    hard, weights, mean = hard_weights(method, truth)
    print(f"\nidro-code rho 0.05: mean weights {mean.round(4)} (hard cluster {hard}); max deviation from 1/K "
          f"{np.abs(weights * K - 1).max():.4f}")
    # the bound 2 rho max(l)^(2 beta) / (1 - ema) on the log-ratio of two weights, with losses below ln 2 + 0.2
    bound = 2 * 0.05 * (np.log(2) + 0.2) ** 0.5 / 0.9
    assert np.abs(np.log(weights[:, :, None] / weights[:, None, :])).max() <= bound
    assert np.abs(weights * K - 1).max() < 0.02


@pytest.mark.parametrize("label", list(ROWS))
def test_the_small_hard_cluster_retrieves_better_than_dro_erm(runs, label):
    """The acceptance's planted claim: reweighting buys the small hard cluster better held-out retrieval
    than the plain mean, here where the clusters compete for a small capacity (module docstring)."""
    _, base = runs("dro-erm")
    _, numbers = runs(label)
    print(f"\n{label}: held-out hard MRR {numbers['hard']['mrr']:.3f} vs dro-erm {base['hard']['mrr']:.3f}; "
          f"easy {numbers['easy']['mrr']:.3f} vs {base['easy']['mrr']:.3f}")
    assert numbers["hard"]["mrr"] > base["hard"]["mrr"] + 0.05
    assert numbers["hard"]["loss"] < base["hard"]["loss"]
    assert numbers["easy"]["mrr"] > base["easy"]["mrr"] - 0.1        # a small price on the easy cluster
