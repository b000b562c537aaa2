"""Reranking protocols: score exactly each query's candidate list with a dense encoder.

A benchmark whose loader puts ``meta["candidates"]`` (``{query id: [doc id, ...]}``) is
scored this way instead of by retrieval over the whole corpus (C-MTEB's reranking tasks).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from harness.data.run import Run
from harness.errors import InputError

if TYPE_CHECKING:
    from harness.benchmark import LoadedBenchmark


def score_candidates(encoder, loaded: LoadedBenchmark, batch_size: int | None = None) -> Run:
    """Score every candidate of every query with a dense encoder (the reranking protocol)."""
    candidates: Mapping[str, list[str]] = loaded.meta["candidates"]
    corpus = loaded.dataset.corpus
    position = {d: i for i, d in enumerate(corpus.ids)}
    passages = corpus.passages()
    doc_ids = sorted({d for docs in candidates.values() for d in docs})
    missing = [d for d in doc_ids if d not in position]
    if missing:
        raise InputError(corpus.source, f"{len(missing)} candidate document(s) not in the corpus, e.g. {missing[0]!r}")
    qpos = {q: i for i, q in enumerate(loaded.dataset.queries.ids)}
    query_ids = [q for q in candidates if q in qpos]
    kwargs = {"batch_size": batch_size} if batch_size else {}
    q_emb = np.asarray(encoder.encode_queries([loaded.dataset.queries.texts[qpos[q]] for q in query_ids], **kwargs))
    d_emb = np.asarray(encoder.encode_docs([passages[position[d]] for d in doc_ids], **kwargs))
    drow = {d: i for i, d in enumerate(doc_ids)}
    qs, ds, ss = [], [], []
    for qi, q in enumerate(query_ids):
        rows = [drow[d] for d in candidates[q]]
        scores = d_emb[rows] @ q_emb[qi]
        qs.extend([q] * len(rows))
        ds.extend(candidates[q])
        ss.extend(scores.tolist())
    return Run.from_arrays(qs, ds, ss, name="rerank")
