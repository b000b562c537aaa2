"""Slow: the tiny BERT itself learns the planted structure (the premise of tiny-scale ablations).

Uniform round-robin over domains, InfoNCE (1 hard negative + in-batch), mean pooling.
Expected: the hard domain's training loss falls and its test nDCG@10 rises; the noise
domain's loss does not fall and its nDCG@10 stays at chance.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_bow import CHANCE_MARGIN, ndcg_at_10, random_ndcg_at_10
from transformers import AutoModel, AutoTokenizer

STEPS = 300
BATCH = 16


def _encode(model, tok, texts, max_length):
    batch = tok(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def _ndcg(model, tok, data):
    with torch.no_grad():
        docs = _encode(model, tok, [f"{t} {x}".strip() for _, t, x in data.corpus], 64)
        queries = _encode(model, tok, [q for _, q in data.queries], 32)
    ids = [i for i, _, _ in data.corpus]
    return float(ndcg_at_10((queries @ docs.T).numpy(), ids, [data.qrels[q] for q, _ in data.queries]).mean())


@pytest.mark.slow
def test_tiny_bert_learns_hard_domain_not_noise(world, tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModel.from_pretrained(tiny_bert)
        model.eval()
        before = {n: _ndcg(model, tok, d) for n, d in world.domains.items()}
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        rng = np.random.default_rng(0)
        names = list(world.domains)
        losses: dict[str, list[float]] = {n: [] for n in names}
        for step in range(STEPS):
            name = names[step % len(names)]
            rows = world.domains[name].train_rows
            batch = [rows[i] for i in rng.choice(len(rows), BATCH, replace=False)]
            q = _encode(model, tok, [r["query"] for r in batch], 32)
            p = _encode(model, tok, [x for r in batch for x in r["pos"][:1] + r["neg"][:1]], 64)
            loss = torch.nn.functional.cross_entropy(q @ p.T / 0.05, torch.arange(BATCH) * 2)
            losses[name].append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        after = {n: _ndcg(model, tok, d) for n, d in world.domains.items()}
    first = {n: float(np.mean(v[:5])) for n, v in losses.items()}
    last = {n: float(np.mean(v[-5:])) for n, v in losses.items()}
    print("loss first/last:", {n: (round(first[n], 2), round(last[n], 2)) for n in names})
    print("nDCG@10 before/after:", {n: (round(before[n], 3), round(after[n], 3)) for n in names})
    assert last["latin_synonyms"] < first["latin_synonyms"] - 1.0
    assert after["latin_synonyms"] > before["latin_synonyms"] + 0.05
    assert last["latin_noisy"] > first["latin_noisy"] - 0.3
    assert last["latin_noisy"] > 2 * max(last[n] for n in names if n != "latin_noisy")
    assert after["latin_noisy"] < random_ndcg_at_10(len(world.domains["latin_noisy"].corpus)) + CHANCE_MARGIN
    for name, data in world.domains.items():
        if data.spec.role == "easy":
            assert after[name] > before[name] + 0.1 and last[name] < first[name] - 1.0, name
