"""Small numpy retrieval helpers for the synthetic-world tests (independent of the generator).

Spaced scripts are tokenised on word characters; unspaced ones (CJK, Thai) into
character bigrams, as Lucene's CJK analyzer does.
"""
from __future__ import annotations

import itertools
import math
import re

import numpy as np

_WORD = re.compile(r"\w+")

# Margin above chance nDCG@10 for "at chance level": with one random label among ~300
# documents and 60 queries, the mean of a random ranking has a standard deviation of
# about 0.011, so 0.045 is about four standard deviations.
CHANCE_MARGIN = 0.045


def tokens(text: str, spaced: bool) -> list[str]:
    text = text.casefold()
    if spaced:
        return _WORD.findall(text)
    chars = [c for c in text if c.isalnum() or "\u0e00" <= c <= "\u0e7f"]
    return [a + b for a, b in itertools.pairwise(chars)]


def contains(text: str, word: str, spaced: bool) -> bool:
    """Word-level containment for spaced scripts, substring containment for unspaced ones."""
    text, word = text.casefold(), word.casefold()
    return word in _WORD.findall(text) if spaced else word in text


def bm25_scores(query_texts, doc_texts, spaced: bool, k1: float = 0.9, b: float = 0.4) -> np.ndarray:
    """Score matrix (queries x docs) with Lucene's BM25 formula."""
    docs = [tokens(t, spaced) for t in doc_texts]
    vocab: dict[str, int] = {}
    for toks in docs:
        for t in toks:
            vocab.setdefault(t, len(vocab))
    tf = np.zeros((len(docs), len(vocab)))
    for i, toks in enumerate(docs):
        for t in toks:
            tf[i, vocab[t]] += 1
    lengths = tf.sum(1)
    df = (tf > 0).sum(0)
    idf = np.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
    weights = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[:, None] / lengths.mean()))
    scores = np.zeros((len(query_texts), len(docs)))
    for qi, q in enumerate(query_texts):
        cols = [vocab[t] for t in tokens(q, spaced) if t in vocab]
        if cols:
            scores[qi] = weights[:, cols].sum(1)
    return scores


def ndcg_at_10(scores: np.ndarray, doc_ids: list[str], qrels: list[dict[str, int]]) -> np.ndarray:
    """Binary-gain nDCG@10 per query; ties broken by doc id descending (trec_eval order)."""
    out = np.zeros(len(qrels))
    for qi, rel in enumerate(qrels):
        ranked = sorted(range(len(doc_ids)), key=lambda j: (scores[qi, j], doc_ids[j]), reverse=True)[:10]
        dcg = sum(1 / math.log2(r + 2) for r, j in enumerate(ranked) if rel.get(doc_ids[j], 0) > 0)
        n_rel = sum(v > 0 for v in rel.values())
        ideal = sum(1 / math.log2(r + 2) for r in range(min(10, n_rel)))
        out[qi] = dcg / ideal if ideal else 0.0
    return out


def random_ndcg_at_10(n_docs: int, n_rel: int = 1) -> float:
    """Expected nDCG@10 of a random ranking with one relevant document among ``n_docs``."""
    assert n_rel == 1
    return sum(1 / math.log2(r + 2) for r in range(min(10, n_docs))) / n_docs
