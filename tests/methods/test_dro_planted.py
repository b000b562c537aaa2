"""Planted query clusters at tiny scale: two large easy clusters and a small hard one (METHODS.md 2.2, 2.3).

Training set (one source, so the clusters are latent and found by the methods' K-means): 96 + 96 easy
queries ``river river <colour> <filler>`` / ``mountain mountain <colour> <filler>`` whose positive repeats
the colour, and 32 hard queries whose animal word is diluted among six ``ocean`` markers; every document
is one word (positive: the query's word; negative: another of its cluster's words).  Mean pooling makes
the easy clusters start ahead (a shared token already aligns) while the hard one must be learned.
K-means on the initial model isolates the hard cluster exactly (asserted).

**Why iDRO's code update stays at uniform weights** (not a bug: ``idro_step`` meets the oracles I1-I3,
the per-cluster gradients equal one backward per cluster, and GroupDRO greedy with alpha = 1 reproduces
``dro-erm`` bit for bit on this world - measured).  With h⁰ = ones and ``h = h_prev^ema exp(e) / Z``, the
log-ratio of two weights obeys ``|d_t| <= ema |d_t-1| + |e_i - e_j|`` with ``e_i = rho/K Σ_j l_i^β l_j^β
cos_ij``, so it stays below ``2 rho max(l)^(2 beta) / (1 - ema)``.  Logged per step here: cluster means
about 0.34 (hard) and 0.13 (easy), gradient cosines 0.07-0.31, so the rows of RTG differ by about 0.07 and
``rho = 0.05`` tilts the weights by ``0.05 * 0.07 / 0.9 = 0.4%``: (0.334, 0.333, 0.333) on average.  The
released update is cluster-balanced averaging (METHODS.md 2.2, "Consequence"): the small hard cluster
gets 1/K of the loss instead of its 1/7 share of the queries, but no more.  Settings under which its weight
rises, within what the paper leaves free (its temperature tau is not reported; the code's rho is 1/tau on
normalised gradients, times K): ``rho = 2`` in code mode; ``tau = 5`` in paper mode (raw gradient dots,
no ema: the weights accumulate).

**What does not hold** (measured, an expected failure below): more weight on the small hard cluster does
not improve its held-out retrieval over the ``dro-erm`` baseline - every reweighting row is *below* it.
Measured hard MRR (8 candidate documents), this world at seed 42 (the test): dro-erm 0.899; iDRO code rho
0.05 / rho 2 / paper tau 5: 0.756 / 0.756 / 0.748; GroupDRO sagawa / greedy: 0.756 / 0.719 (easy MRR
0.55-0.58 for all).  Seeds 0, 1, 2 - dro-erm 0.81 / 0.86 / 0.88, iDRO code 0.77 and 0.84 (seeds 1, 2),
sagawa 0.77 / 0.84, greedy 0.70 / 0.74.  Variants, dro-erm / iDRO code / greedy: 80 steps at lr 1e-3
0.84 / 0.78 / 0.79; 240 + 240 + 48 queries 0.85 / 0.74 / 0.68 (80 steps: 0.95 / 0.90 / 0.80); 16 hard
queries 0.43 / 0.39 / 0.40; a hard cluster that must learn an association (cat -> mouse, dog -> bone, ...: no
shared token; 240 + 240 + 48 queries) 0.95 / 0.86 (rho 2) / 0.76, sagawa 0.90, and at 80 steps 0.93 / 0.88 /
0.93 (a tie).  Only where the hard cluster's rule conflicts with the easy clusters' (the same animals; easy
positives repeat the animal, hard ones are its associate and half the hard negatives repeat the animal)
does reweighting help a little, and only while under-trained: at 40 steps, seeds 0 / 1, dro-erm 0.354 /
0.354, iDRO code rho 2 0.352 / 0.372, sagawa 0.354 / 0.375, greedy 0.403 / 0.398 (easy MRR 0.59 -> 0.55);
at 80 steps dro-erm learns the conflict and leads again: 0.93 / 0.88 vs iDRO 0.77 / 0.91, rho 2 0.75 / 0.85,
paper tau 5 0.65 / 0.63, sagawa 0.77 / 0.91, greedy 0.58 / 0.68.
The greedy rule, which trains almost only the hard cluster (weight 1/alpha = 5 vs 0.01), is the worst on
it, which points to the cause: the hard queries need the skill the easy ones teach (match the content
word, ignore the repeated marker), and upweighting 32 of 224 queries trades that shared signal for
gradient noise from a few examples - unregularised reweighting does not buy worst-group generalisation,
as Sagawa et al. (2020) found for GroupDRO without strong regularisation.
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
ANIMALS = "cat dog horse cow sheep goat pig duck".split()
FILLERS = "the a of and".split()
EASY, HARD = ("river", "mountain"), "ocean"
K = 3
# label -> (method, options): the reweighting rows, each at the setting under which its hard weight rises
ROWS = {"idro-code": ("idro", {"rho": 2.0}), "idro-paper": ("idro", {"mode": "paper", "tau": 5.0}),
        "groupdro-sagawa": ("groupdro", {}), "groupdro-greedy": ("groupdro", {"variant": "greedy"})}


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


@pytest.mark.parametrize("label", [pytest.param(label, marks=[] if label in ("idro-code", "groupdro-sagawa")
                                                else [pytest.mark.slow]) for label in ROWS])
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


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="measured: every reweighting row retrieves the small hard cluster worse than "
                                       "dro-erm on this world (module docstring)")
@pytest.mark.parametrize("label", list(ROWS))
def test_the_small_hard_cluster_retrieves_better_than_dro_erm(runs, label):
    _, base = runs("dro-erm")
    _, numbers = runs(label)
    print(f"\n{label}: held-out hard MRR {numbers['hard']['mrr']:.3f} vs dro-erm {base['hard']['mrr']:.3f}; "
          f"easy {numbers['easy']['mrr']:.3f} vs {base['easy']['mrr']:.3f}")
    assert numbers["hard"]["mrr"] > base["hard"]["mrr"]
