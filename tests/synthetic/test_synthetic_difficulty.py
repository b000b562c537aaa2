"""Planted difficulty, measured: lexical scoring and a small trained bag-of-words model.

* BM25 (numpy, Lucene formula): easy domains score high nDCG@10, the hard domain
  (hidden synonyms) scores far lower, the noise domain is at chance level.
* A mean-pooled embedding bag trained with InfoNCE (hard + in-batch negatives) on
  the training rows: the hard domain's test nDCG@10 rises well above its BM25
  score (learnable), while the noise domain stays at chance and its loss on rows
  never trained on stays at the random level log(1 + m) (unlearnable).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from synthetic_bow import CHANCE_MARGIN, bm25_scores, ndcg_at_10, random_ndcg_at_10, tokens


def _bm25_ndcg(data) -> float:
    spaced = data.language.script.spaced
    passages = [f"{t} {x}".strip() for _, t, x in data.corpus]
    scores = bm25_scores([q for _, q in data.queries], passages, spaced)
    return float(ndcg_at_10(scores, [i for i, _, _ in data.corpus], [data.qrels[q] for q, _ in data.queries]).mean())


def test_bm25_separates_easy_hard_and_noise(world):
    ndcg = {name: _bm25_ndcg(data) for name, data in world.domains.items()}
    print("BM25 nDCG@10:", {k: round(v, 3) for k, v in ndcg.items()})
    for name, data in world.domains.items():
        if data.spec.role == "easy":
            assert ndcg[name] > 0.8, (name, ndcg[name])
    assert ndcg["latin_synonyms"] < 0.1
    chance = random_ndcg_at_10(len(world.domains["latin_noisy"].corpus))
    assert ndcg["latin_noisy"] < chance + CHANCE_MARGIN


class _BagModel:
    """Mean-pooled token embeddings, L2-normalised (what a tiny encoder can at least learn)."""

    def __init__(self, world, dim: int = 32, seed: int = 0):
        self.vocab: dict[str, int] = {}
        self.cache: dict[tuple[str, str], list[int]] = {}
        self.spaced = {n: d.language.script.spaced for n, d in world.domains.items()}
        for name, data in world.domains.items():
            for text in self._texts(data):
                self.ids(text, name)
        gen = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.EmbeddingBag(len(self.vocab) + 1, dim, mode="mean")
        with torch.no_grad():
            self.emb.weight.copy_(torch.randn(self.emb.weight.shape, generator=gen) * 0.1)

    @staticmethod
    def _texts(data):
        for row in data.train_rows:
            yield row["query"]
            yield from row["pos"] + row["neg"]
        for _, t, x in data.corpus:
            yield f"{t} {x}".strip()
        for _, q in data.queries:
            yield q

    def ids(self, text: str, domain: str) -> list[int]:
        key = (text, domain)
        if key not in self.cache:
            toks = tokens(text, self.spaced[domain])
            self.cache[key] = [self.vocab.setdefault(t, len(self.vocab) + 1) for t in toks] or [0]
        return self.cache[key]

    def encode(self, texts: list[str], domain: str) -> torch.Tensor:
        lists = [self.ids(t, domain) for t in texts]
        flat = torch.tensor([i for ids in lists for i in ids])
        offsets = torch.tensor([0] + np.cumsum([len(ids) for ids in lists])[:-1].tolist())
        return torch.nn.functional.normalize(self.emb(flat, offsets), dim=-1)


def _losses(model, rows, domain, tau, in_batch: bool) -> torch.Tensor:
    """Per-row InfoNCE; candidates are the row's own passages, plus the batch's if ``in_batch``."""
    m = len(rows[0]["neg"])
    q = model.encode([r["query"] for r in rows], domain)
    p = model.encode([x for r in rows for x in r["pos"][:1] + r["neg"]], domain)
    logits = q @ p.T / tau
    target = torch.arange(len(rows)) * (m + 1)
    if not in_batch:
        own = torch.zeros_like(logits, dtype=torch.bool)
        for i in range(len(rows)):
            own[i, i * (m + 1):(i + 1) * (m + 1)] = True
        logits = logits.masked_fill(~own, float("-inf"))
    return torch.nn.functional.cross_entropy(logits, target, reduction="none")


def _test_ndcg(model, data) -> float:
    with torch.no_grad():
        q = model.encode([t for _, t in data.queries], data.name)
        d = model.encode([f"{t} {x}".strip() for _, t, x in data.corpus], data.name)
        scores = (q @ d.T).numpy()
    return float(ndcg_at_10(scores, [i for i, _, _ in data.corpus], [data.qrels[q] for q, _ in data.queries]).mean())


STEPS_PER_DOMAIN = 60


@pytest.fixture(scope="module")
def trained(world):
    """Train on all domains (one domain per batch, uniform), holding out 100 rows per domain."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _BagModel(world)
        held_out = {n: d.train_rows[-100:] for n, d in world.domains.items()}
        train = {n: d.train_rows[:-100] for n, d in world.domains.items()}
        tau = 0.05
        with torch.no_grad():
            before = {n: (_test_ndcg(model, d), _losses(model, held_out[n], n, tau, False).mean().item())
                      for n, d in world.domains.items()}
        opt = torch.optim.Adam(model.emb.parameters(), lr=0.02)
        rng = np.random.default_rng(0)
        names = list(world.domains)
        for step in range(STEPS_PER_DOMAIN * len(names)):
            name = names[step % len(names)]
            rows = [train[name][i] for i in rng.choice(len(train[name]), 32, replace=False)]
            loss = _losses(model, rows, name, tau, True).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            after = {n: (_test_ndcg(model, d), _losses(model, held_out[n], n, tau, False).mean().item())
                     for n, d in world.domains.items()}
    finally:
        torch.set_num_threads(threads)
    return before, after


def test_training_learns_the_hard_domain_but_not_the_noise(world, trained):
    before, after = trained
    print("nDCG@10 / held-out HN loss before:", {k: (round(a, 3), round(b, 3)) for k, (a, b) in before.items()})
    print("nDCG@10 / held-out HN loss after: ", {k: (round(a, 3), round(b, 3)) for k, (a, b) in after.items()})
    bm25_hard = _bm25_ndcg(world.domains["latin_synonyms"])
    # Hard but learnable: clearly above its lexical score and its untrained score.
    assert after["latin_synonyms"][0] > max(0.15, bm25_hard + 0.1, before["latin_synonyms"][0] + 0.1)
    assert after["latin_synonyms"][1] < before["latin_synonyms"][1] - 0.3
    # Easy domains: test nDCG rises, loss on unseen rows ends well below the random level.
    random_loss = math.log(1 + world.spec.domain("latin_qa").n_hard_negatives)
    for name, data in world.domains.items():
        if data.spec.role == "easy":
            assert after[name][0] > before[name][0] + 0.05 and after[name][1] < 0.6 * random_loss, name
    # Noise: test nDCG stays at chance and the held-out loss stays at (or above) the random level.
    chance = random_ndcg_at_10(len(world.domains["latin_noisy"].corpus))
    assert after["latin_noisy"][0] < chance + CHANCE_MARGIN
    assert after["latin_noisy"][1] > 0.95 * random_loss
