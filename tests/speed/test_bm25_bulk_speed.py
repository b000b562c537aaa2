"""BM25 search speed on SciFact (5,183 documents, 300 test queries, top 1000, one thread each), in one
pytest-benchmark run: ours (``BM25Index.search``, hits across the JVM bridge in bulk) against

* ``json-per-query``: the search before the bulk transfer (one JSON string per query;
  tests/retrieval/bm25_json_reference.py), on the same index;
* ``pyserini``: Pyserini's ``LuceneSearcher.batch_search`` on the same index (it loads every hit's
  stored document to read its id);
* ``bm25s``: bm25s on its own index, with PyStemmer's English Snowball stemmer and English stop
  words, k1 0.9, b 0.4, Lucene's idf: the same BM25, another tokeniser (Lucene's analyzer uses
  the Porter stemmer and Lucene's stop words), hence nDCG@10 0.6762 against our 0.6789.

Ours is the benchmark target; the others run in the untimed pedantic ``setup`` of the same round,
timed by hand (tests/train/benchutil.py), so load from other processes hits every side alike.  Clock:
this process's CPU seconds (the JVM's threads included).  Each timed call goes from the query texts to
the hits (ours to a sorted ``Run``, the others to their native results).  Indexes are built (or loaded
from the cache) before timing.  Reported: queries per second of each (best round), per-round cost
ratios ours/other (median and spread), nDCG@10 of each; asserted: ratios only, never absolute numbers.
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest
from benchutil import PairedTimes, interleaved_rounds

K = 1000
ROUNDS = 5

pytestmark = [pytest.mark.benchmark, pytest.mark.slow, pytest.mark.needs_shared]


def _json_search():
    """The search before the bulk transfer (its file sits with the retrieval tests that use it as oracle)."""
    path = Path(__file__).resolve().parents[1] / "retrieval" / "bm25_json_reference.py"
    spec = importlib.util.spec_from_file_location("bm25_json_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.json_search


def test_bm25_search_against_json_per_query_pyserini_and_bm25s(benchmark, shared_data):
    import bm25s
    import Stemmer

    from harness.benchmark import get_suite
    from harness.data.run import Run
    from harness.pipeline import load_benchmark
    from harness.retrieval.bm25 import BM25Index

    loaded = load_benchmark(shared_data / "scifact", "beir")
    loaded.card = loaded.card.with_(metrics=("ndcg@10",))
    corpus, queries = loaded.dataset.corpus, loaded.dataset.queries
    qids, texts = list(queries.ids), list(queries.texts)
    index = BM25Index.build(corpus)

    json_search = _json_search()
    from pyserini.search.lucene import LuceneSearcher

    lucene = LuceneSearcher(str(index.path))
    lucene.set_bm25(0.9, 0.4)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    retriever.index(bm25s.tokenize(corpus.passages(), stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    corpus_ids = np.asarray(corpus.ids)

    def bm25s_search():
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(tokens, k=K, show_progress=False, n_threads=1)

    others = {"json-per-query": lambda: json_search(index, queries, k=K),
              "pyserini": lambda: lucene.batch_search(texts, qids, k=K, threads=1),
              "bm25s": bm25s_search}

    def ours():
        return index.search(queries, k=K, threads=1)

    # Warm-up (JIT, caches) and the runs' quality, untimed.
    def to_run(name, out):
        if name == "pyserini":
            rows = [(q, h.docid, h.score) for q in qids for h in out.get(q, [])]
            return Run.from_arrays([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        if name == "bm25s":
            docs, scores = out
            return Run.from_arrays(np.repeat(np.asarray(qids), docs.shape[1]), corpus_ids[docs.ravel()],
                                   scores.ravel())
        return out

    runs = {name: to_run(name, search()) for name, search in {**others, "ours": ours}.items()}
    ndcg = {name: get_suite("beir").evaluate(loaded, run).aggregate["ndcg@10"] for name, run in runs.items()}
    assert runs["ours"].doc_ids.tolist() == runs["json-per-query"].doc_ids.tolist()
    assert runs["ours"].scores.tolist() == runs["json-per-query"].scores.tolist()
    assert ndcg["ours"] == pytest.approx(0.6789, abs=5e-5) and ndcg["pyserini"] == pytest.approx(0.6789, abs=5e-5)
    assert ndcg["bm25s"] == pytest.approx(0.6762, abs=5e-4)

    times: dict[str, list[float]] = {name: [] for name in others}

    def run_others() -> None:
        for name, search in others.items():
            started = time.process_time()
            search()
            times[name].append(time.process_time() - started)

    _, _, ours_times = interleaved_rounds(benchmark, run_others, ours, ROUNDS, clock=time.process_time)
    n = len(qids)
    qps = {"ours": n / min(ours_times), **{name: n / min(t) for name, t in times.items()}}
    paired = {name: PairedTimes(t, ours_times) for name, t in times.items()}   # cost ratios ours / other
    benchmark.extra_info.update({
        "queries": n, "documents": len(corpus), "k": K, "clock": "process CPU seconds",
        "bm25s_backend": str(getattr(retriever, "backend", "?")),
        "ours_cpu_s": ours_times, **{f"{name}_cpu_s": t for name, t in times.items()},
        "queries_per_s": {name: round(v, 1) for name, v in qps.items()},
        "ndcg@10": {name: round(v, 6) for name, v in ndcg.items()},
        "cost_ratio_ours_over": {name: {"median": round(p.median, 4), "spread": round(p.spread, 4),
                                        "rounds": [round(r, 4) for r in p.ratios]} for name, p in paired.items()}})
    print(f"\nSciFact BM25, {n} queries, top {K}, 1 thread, CPU s; queries/s (best round): "
          + ", ".join(f"{name} {v:.1f}" for name, v in qps.items())
          + "; nDCG@10: " + ", ".join(f"{name} {v:.4f}" for name, v in ndcg.items()))
    for name, p in paired.items():
        print(f"  ours vs {name}: {p.summary()}")
    # Measured here in two runs (1 thread, a 2-core machine under load 9-13, CPU seconds, 5 rounds):
    # ours 361 / 388 q/s, json-per-query 111 / 121, pyserini 38.5 / 39.8, bm25s 3064 / 2809; cost
    # ratios ours/other, median (spread): json-per-query 0.284 (0.108) / 0.318 (0.112), pyserini 0.122
    # (0.052) / 0.106 (0.022), bm25s 7.5 (5.9) / 6.5 (2.7) (bm25s's ~0.1 s rounds are noisy).  The
    # bounds leave the spread and more.  bm25s is not bounded: a numba scorer over 5k documents'
    # sparse matrix, no Lucene postings or JVM, and a different tokeniser.
    paired["json-per-query"].assert_at_most(0.8, "bulk transfer vs the JSON string per query")
    paired["pyserini"].assert_at_most(0.5, "our search vs Pyserini's batch_search")
