"""Loading a suite's benchmarks, with the seeded query/corpus subsets small scales use.

Subsets change the protocol, so their parameters go into the card (``extra``) and
its data hash: a subset result is never compared with a full-benchmark result.
"""
from __future__ import annotations

import hashlib

import numpy as np

from harness.ablation.resolve import require_resolved, resolve_path
from harness.ablation.spec import BenchmarkRef
from harness.benchmark import LoadedBenchmark, data_hash, get_suite

SUBSET_SEED = 20240521


def _rng(*parts: object) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def load_benchmark_ref(ref: BenchmarkRef, metrics: list[str]) -> LoadedBenchmark:
    """Load one benchmark of a suite file, apply its subset options, add the table metrics to the card
    (unless the benchmark states its own ``metrics`` option: its protocol may not produce the others)."""
    suite = get_suite(ref.suite)
    directory = resolve_path(ref.dataset_dir)
    require_resolved(str(directory), f"benchmark {ref.id!r}: dataset_dir")
    loaded = suite.load(directory, **ref.options)
    if "metrics" not in ref.options:     # a benchmark stating its own metrics keeps them (MKQA: Acc@k only)
        wanted = tuple(dict.fromkeys(tuple(loaded.card.metrics) + tuple(metrics)))
        loaded.card = loaded.card.with_(metrics=wanted)
    if ref.max_queries or ref.corpus_sample is not None:
        loaded = subset_benchmark(loaded, ref.max_queries, ref.corpus_sample)
    return loaded


def subset_benchmark(loaded: LoadedBenchmark, max_queries: int | None, corpus_sample: int | None) -> LoadedBenchmark:
    """Keep ``max_queries`` random judged queries, and all their judged documents plus
    ``corpus_sample`` random other documents (None: the whole corpus).  Seeded by the data hash."""
    ds = loaded.dataset
    seed_base = loaded.card.data_hash
    qids = sorted(ds.qrels.query_list())
    if max_queries and max_queries < len(qids):
        keep = _rng(seed_base, "queries", SUBSET_SEED).choice(len(qids), size=max_queries, replace=False)
        qids = sorted(qids[i] for i in keep)
    qrels = ds.qrels.subset(qids)
    queries = ds.queries.subset(qids)
    corpus = ds.corpus
    if corpus_sample is not None:
        judged = set(qrels.doc_ids.tolist())
        others = [d for d in corpus.ids if d not in judged]
        take = min(corpus_sample, len(others))
        picked = _rng(seed_base, "corpus", SUBSET_SEED).choice(len(others), size=take, replace=False)
        corpus = corpus.subset(judged | {others[i] for i in picked})
    ds.corpus, ds.queries, ds.qrels = corpus, queries, qrels
    answers = {q: a for q, a in (loaded.answers or {}).items() if q in set(qids)} if loaded.answers else None
    extra = dict(loaded.card.extra)
    extra.update({"subset_max_queries": max_queries, "subset_corpus_sample": corpus_sample,
                  "subset_seed": SUBSET_SEED})
    subset = [f"subset={max_queries},{corpus_sample}"]
    loaded.card = loaded.card.with_(extra=extra, data_hash=data_hash(ds, answers, subset))
    loaded.answers = answers
    loaded.meta = {k: v for k, v in loaded.meta.items() if not k.startswith("_")}
    return loaded
