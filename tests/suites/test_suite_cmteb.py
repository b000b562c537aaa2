"""C-MTEB: protocol facts from mteb's task definitions, local data layouts, reranking, and parity
of our metrics with mteb's own retrieval scoring."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from optional_extras import require_extra

from harness.benchmark import get_suite
from harness.data.run import Run
from harness.errors import InputError
from suites.benchmarks import cmteb
from suites.groupings import CMTEB_RERANKING, CMTEB_RETRIEVAL

require_extra("mteb")           # the extra 'cmteb': skipped without it (failed under make test)


def test_twelve_tasks_defined_by_mteb():
    for name in CMTEB_RETRIEVAL + CMTEB_RERANKING:
        d = cmteb.task_definition(name)
        assert d["name"] == name and d["hf_path"].startswith("mteb/") and len(d["revision"]) == 40
    assert cmteb.task_definition("T2Retrieval")["exclude_self"] is True
    assert cmteb.task_definition("DuRetrieval")["exclude_self"] is False
    assert cmteb.task_definition("CovidRetrieval")["main_score"] == "ndcg_at_10"
    rerank = cmteb.task_definition("cmedqav2")          # alias, case-insensitive
    assert rerank["kind"] == "reranking" and rerank["main_score"] == "map_at_1000" and rerank["split"] == "test"
    assert cmteb.task_definition("T2Reranking")["split"] == "dev"


def write_hub_layout(root: Path, split: str, reranking: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for folder in ("corpus", "queries", "data") + (("top_ranked",) if reranking else ()):
        (root / folder).mkdir(parents=True)
    pq.write_table(pa.table({"id": ["d1", "d2", "d3", "q1"], "title": ["", "标题", "", ""],
                             "text": ["北京是首都", "上海是城市", "广州在南方", "查询文本"]}),
                   root / "corpus" / f"{split}-00000-of-00001.parquet")
    pq.write_table(pa.table({"id": ["q1", "q2", "q3"], "text": ["首都是哪里", "哪个城市", "没有判断"]}),
                   root / "queries" / f"{split}-00000-of-00001.parquet")
    pq.write_table(pa.table({"query-id": ["q1", "q1", "q2"], "corpus-id": ["d1", "d2", "d2"], "score": [1, 0, 1]}),
                   root / "data" / f"{split}-00000-of-00001.parquet")
    if reranking:
        pq.write_table(pa.table({"query-id": ["q1", "q2"], "corpus-ids": [["d1", "d2", "d3"], ["d2", "d3"]]}),
                       root / "top_ranked" / f"{split}-00000-of-00001.parquet")


def test_hub_layout_retrieval_task(tmp_path):
    root = tmp_path / "T2Retrieval"
    write_hub_layout(root, "dev", reranking=False)
    loaded = get_suite("cmteb").load(root)
    card = loaded.card
    assert card.dataset == "T2Retrieval" and card.split == "dev" and card.exclude_self
    assert card.metrics == ("ndcg@10", "recall@100") and card.bm25_language == "zh"
    assert dict(card.extra)["mteb_revision"] == cmteb.task_definition("T2Retrieval")["revision"]
    assert loaded.meta["queries_in_file"] == 3 and len(loaded.dataset.queries) == 2   # q3 has no judgements
    assert loaded.dataset.corpus.titles[1] == "标题"
    assert loaded.meta["task_prompt"].startswith("Given a Chinese search query")


def test_hub_layout_reranking_task(tmp_path):
    root = tmp_path / "data"
    write_hub_layout(root, "test", reranking=True)
    suite = get_suite("cmteb")
    loaded = suite.load(root, dataset="CMedQAv1-reranking")
    assert loaded.card.metrics == ("map@1000", "mrr@10") and dict(loaded.card.extra)["candidates"] == 5
    # a full-corpus run: d3 and q1 are no candidates of q2 / q1 and must not count
    run = Run.from_arrays(["q1", "q1", "q1", "q1", "q2", "q2", "q2"], ["q1", "d3", "d2", "d1", "d1", "d3", "d2"],
                          [9.0, 8.0, 7.0, 6.0, 9.0, 8.0, 7.0])
    result = suite.evaluate(loaded, run)
    # q1 candidates ranked d3, d2, d1 -> relevant d1 at rank 3: AP = 1/3; q2: d3, d2 -> AP = 1/2
    assert result.metric("map@1000") == pytest.approx({"q1": 1 / 3, "q2": 1 / 2})
    assert result.options["candidates_scored_fraction"] == 1.0
    partial = suite.evaluate(loaded, run.subset(["q1"]))
    assert partial.options["candidates_scored_fraction"] == pytest.approx(3 / 5)


def test_reranking_without_candidates_is_refused(tmp_path):
    root = tmp_path / "CMedQAv2-reranking"
    write_hub_layout(root, "test", reranking=False)
    with pytest.raises(InputError, match="needs candidate lists"):
        get_suite("cmteb").load(root)


class HashEncoder:
    """A deterministic stand-in encoder: character-count vectors."""

    def encode_queries(self, texts, **_):
        return np.array([self._vec(t) for t in texts])

    def encode_docs(self, texts, **_):
        return np.array([self._vec(t) for t in texts])

    @staticmethod
    def _vec(text):
        v = np.zeros(64)
        for ch in text:
            v[ord(ch) % 64] += 1.0
        return v / (np.linalg.norm(v) or 1.0)


def test_score_candidates_scores_exactly_the_candidates(tmp_path):
    root = tmp_path / "T2Reranking"
    write_hub_layout(root, "dev", reranking=True)
    loaded = get_suite("cmteb").load(root)
    run = cmteb.score_candidates(HashEncoder(), loaded)
    assert {(q, d) for q, d in zip(run.query_ids.tolist(), run.doc_ids.tolist())} == \
        {("q1", "d1"), ("q1", "d2"), ("q1", "d3"), ("q2", "d2"), ("q2", "d3")}
    enc = HashEncoder()
    expected = float(enc._vec("首都是哪里") @ enc._vec("北京是首都"))
    got = dict(zip(zip(run.query_ids.tolist(), run.doc_ids.tolist()), run.scores.tolist()))
    assert got[("q1", "d1")] == pytest.approx(expected)
    result = get_suite("cmteb").evaluate(loaded, run)
    assert result.options["candidates_scored_fraction"] == 1.0


def test_local_mteb_task_loads_offline(tmp_path):
    root = tmp_path / "T2Reranking"
    write_hub_layout(root, "dev", reranking=True)
    task = cmteb.local_mteb_task("T2Reranking", root)
    task.load_data()
    split = task.dataset["default"]["dev"]
    assert task.metadata.name == "T2Reranking" and type(task).__name__ == "LocalT2Reranking"
    assert split["relevant_docs"] == {"q1": {"d1": 1, "d2": 0}, "q2": {"d2": 1}}
    assert split["top_ranked"] == {"q1": ["d1", "d2", "d3"], "q2": ["d2", "d3"]}
    assert split["corpus"]["id"] == ["d1", "d2", "d3", "q1"]


def test_metric_parity_with_mteb_scoring(shared_data):
    """Our per-query nDCG@10, Recall@100 and MAP@1000 equal mteb's calculate_retrieval_scores."""
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

    loaded = get_suite("cmteb").load(shared_data / "cmrc2018-dev-retrieval",
                                     metrics=["ndcg@10", "recall@100", "map@1000"])
    rng = np.random.default_rng(1)
    docs = np.array(loaded.dataset.corpus.ids)
    qrels = loaded.dataset.qrels.to_dict()
    qs, ds, ss = [], [], []
    for q in loaded.dataset.queries.ids[:400]:
        chosen = list(rng.choice(docs, size=120, replace=False))
        if rng.random() < 0.7:
            chosen[int(rng.integers(0, 120))] = next(iter(qrels[q]))
        chosen = list(dict.fromkeys(chosen))
        qs += [q] * len(chosen)
        ds += chosen
        ss += rng.random(len(chosen)).round(6).tolist()
    run = Run.from_arrays(qs, ds, ss)
    ours = get_suite("cmteb").evaluate(loaded, run)
    theirs = calculate_retrieval_scores(run.to_dict(), {q: qrels[q] for q in set(qs)}, [10, 100, 1000])
    for key, name in (("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100"), ("map@1000", "map_cut_1000")):
        mine = ours.metric(key)
        for q, scores in theirs.all_scores.items():
            assert mine[q] == pytest.approx(scores[name], abs=1e-9), (key, q)
    assert ours.aggregate["ndcg@10"] == pytest.approx(theirs.ndcg["NDCG@10"], abs=1e-5)
