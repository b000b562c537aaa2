"""Reference implementation of DuReader-Retrieval's official metric definitions, for tests."""
from __future__ import annotations


def official_dureader(reference: dict[str, set[str]], candidates: dict[str, list[str]]) -> dict[str, float]:
    """DuReader-Retrieval's evaluation.py semantics: MRR@10 over ranked queries, recall@k = hit rate."""
    mrr, hit1, hit50 = 0.0, 0, 0
    for q, ranked in candidates.items():
        if q not in reference:
            continue
        ranked = ranked[:50]
        for i, d in enumerate(ranked[:10]):
            if d in reference[q]:
                mrr += 1 / (i + 1)
                break
        first = next((i for i, d in enumerate(ranked) if d in reference[q]), None)
        if first is not None:
            hit50 += 1
            hit1 += first == 0
    return {"mrr@10": mrr / len(candidates), "success@1": hit1 / len(reference), "success@50": hit50 / len(reference)}
