"""Scoring under the suites' protocols, checked against hand computation and reference tools."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from dureader_reference import official_dureader

from harness.benchmark import get_suite
from harness.data.run import Run
from harness.errors import ConfigError
from suites.benchmarks._common import cut_depth, evaluate_loaded
from suites.benchmarks.dureader import sub_gallery
from suites.groupings import language_of_query, per_group_average


def write_beir(folder: Path, docs: dict[str, str], queries: dict[str, str], qrels: list[tuple[str, str, int]],
               split: str = "test", answers: dict[str, list[str]] | None = None) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i, t in docs.items():
            f.write(json.dumps({"_id": i, "title": "", "text": t}, ensure_ascii=False) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for i, t in queries.items():
            f.write(json.dumps({"_id": i, "text": t}, ensure_ascii=False) + "\n")
    with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, d, r in qrels:
            f.write(f"{q}\t{d}\t{r}\n")
    if answers:
        with open(folder / "answers.jsonl", "w", encoding="utf-8") as f:
            for q, a in answers.items():
                f.write(json.dumps({"_id": q, "answers": a}, ensure_ascii=False) + "\n")
    return folder


@pytest.fixture()
def arguana_like(tmp_path):
    docs = {f"d{i}": f"text {i}" for i in range(1, 6)}
    docs.update({"q1": "query one as a doc", "q2": "query two as a doc"})
    return write_beir(tmp_path / "arguana", docs, {"q1": "query one", "q2": "query two"},
                      [("q1", "d1", 1), ("q1", "d3", 1), ("q2", "d2", 1)])


def test_ndcg_hand_computed_with_self_exclusion(arguana_like):
    loaded = get_suite("beir").load(arguana_like)
    assert loaded.card.exclude_self and loaded.card.dataset == "arguana"
    run = Run.from_arrays(["q1"] * 4 + ["q2"] * 2, ["q1", "d2", "d1", "d3", "q2", "d2"],
                          [9.0, 8.0, 7.0, 6.0, 5.0, 4.0])
    result = get_suite("beir").evaluate(loaded, run)
    # q1 after dropping itself: d2 (0), d1 (1), d3 (1) -> DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    expected_q1 = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    got = result.metric("ndcg@10")
    assert got["q1"] == pytest.approx(expected_q1, abs=1e-12)
    assert got["q2"] == pytest.approx(1.0)           # its self hit is gone, d2 is first
    assert result.metric("recall@100") == {"q1": 1.0, "q2": 1.0}
    assert result.options["exclude_self"] is True
    # without the protocol's exclusion the self hits cost rank 1
    kept = get_suite("beir").evaluate(loaded.__class__(loaded.dataset, loaded.card.with_(exclude_self=False),
                                                        None, dict(loaded.meta)), run)
    assert kept.metric("ndcg@10")["q2"] == pytest.approx(1 / math.log2(3))


def test_depth_cut_does_not_count_self_hits():
    run = Run.from_arrays(["q"] * 4, ["q", "a", "b", "c"], [4.0, 3.0, 2.0, 1.0])
    cut = cut_depth(run, 2, exclude_self=True)
    assert sorted(cut.doc_ids.tolist()) == ["a", "b", "q"]        # the self row is left for the engine to drop
    assert cut_depth(run, 2, exclude_self=False).doc_ids.tolist() == ["q", "a"]


def test_query_answered_only_by_itself_still_counts(arguana_like):
    loaded = get_suite("beir").load(arguana_like)
    run = Run.from_arrays(["q1", "q2", "q2"], ["q1", "q2", "d2"], [1.0, 2.0, 1.0])
    result = get_suite("beir").evaluate(loaded, run)
    assert result.metric("ndcg@10") == {"q1": 0.0, "q2": 1.0}


def test_metrics_come_from_the_card(arguana_like):
    loaded = get_suite("beir").load(arguana_like, metrics=["mrr@10", "success@1"])
    run = Run.from_arrays(["q1", "q1", "q2"], ["d2", "d1", "d2"], [2.0, 1.0, 1.0])
    result = get_suite("beir").evaluate(loaded, run)
    assert list(result.per_query) == ["mrr@10", "success@1"]
    assert result.aggregate == {"mrr@10": pytest.approx(0.75), "success@1": pytest.approx(0.5)}
    with pytest.raises(ConfigError, match="no answers file"):
        get_suite("beir").evaluate(loaded.__class__(loaded.dataset, loaded.card.with_(metrics=("acc@10",)), None,
                                                    loaded.meta), run)


# ---------------------------------------------------------------- DuReader: official definitions
def test_dureader_metrics_equal_official_script(shared_data):
    loaded = get_suite("dureader").load(shared_data / "webqa-test-ann-retrieval")
    rng = np.random.default_rng(0)
    corpus = np.array(loaded.dataset.corpus.ids)
    qs, ds, ss = [], [], []
    positives = loaded.dataset.qrels.to_dict()
    for q in loaded.dataset.queries.ids:
        docs = list(rng.choice(corpus, size=60, replace=False))
        if rng.random() < 0.5:       # plant the positive at a random depth for half the queries
            pos = next(iter(positives[q]))
            if pos not in docs:
                docs[int(rng.integers(0, 60))] = pos
        qs += [q] * 60
        ds += docs
        ss += list(rng.permutation(60).astype(float))     # distinct scores: no tie-order ambiguity
    run = Run.from_arrays(qs, ds, ss)
    result = get_suite("dureader").evaluate(loaded, run)
    ranked = {q: d.tolist() for q, d, _ in run.groups()}
    expected = official_dureader({q: set(v) for q, v in positives.items()}, ranked)
    for metric, value in expected.items():
        assert result.aggregate[metric] == pytest.approx(value, abs=1e-12), metric
    assert result.options["complete"] is True


def test_sub_gallery_keeps_positives_and_order(shared_data):
    loaded = get_suite("dureader").load(shared_data / "scifact", split="test")
    corpus, qrels = loaded.dataset.corpus, loaded.dataset.qrels
    gallery = sub_gallery(corpus, qrels, 1000, seed=5)
    assert len(gallery) == 1000
    assert set(qrels.doc_ids.tolist()) <= set(gallery.ids)
    order = {d: i for i, d in enumerate(corpus.ids)}
    assert [order[d] for d in gallery.ids] == sorted(order[d] for d in gallery.ids)
    assert sub_gallery(corpus, qrels, 1000, seed=5).ids == gallery.ids
    assert len(sub_gallery(corpus, qrels, 10**6, seed=5)) == len(corpus)      # small collection: all of it
    with pytest.raises(ConfigError, match="smaller than"):
        sub_gallery(corpus, qrels, 10, seed=5)


# ---------------------------------------------------------------- MKQA protocol on a BEIR folder
def test_mkqa_acc_and_ndcg_on_small_folder(tmp_path):
    docs = {"p1": "中国的首都是北京。", "p2": "Bangkok, or กรุงเทพมหานคร, is the capital.", "p3": "Nothing."}
    folder = write_beir(tmp_path / "x", docs, {"zh-1": "首都", "th-2": "เมืองหลวง", "en-3": "capital"},
                        [("zh-1", "p1", 1), ("th-2", "p2", 1), ("en-3", "p2", 1)],
                        answers={"zh-1": ["北京"], "th-2": ["กรุงเทพ"], "en-3": ["Bangkok"]})
    loaded = get_suite("mkqa").load(folder)
    assert loaded.card.metrics == ("acc@10", "acc@100", "ndcg@10")
    assert dict(loaded.card.extra)["answers_field"] == "answers"
    run = Run.from_arrays(["zh-1", "zh-1", "th-2", "en-3"], ["p3", "p1", "p2", "p3"], [2.0, 1.0, 1.0, 1.0])
    result = get_suite("mkqa").evaluate(loaded, run.top_k(10))
    assert result.metric("acc@10") == {"en-3": 0.0, "th-2": 1.0, "zh-1": 1.0}
    assert result.metric("ndcg@10")["zh-1"] == pytest.approx(1 / math.log2(3))
    one = loaded.__class__(loaded.dataset, loaded.card.with_(metrics=("acc@1",)), loaded.answers, loaded.meta)
    assert get_suite("mkqa").evaluate(one, run).metric("acc@1") == {"zh-1": 0.0, "th-2": 1.0, "en-3": 0.0}
    by_lang = per_group_average(result, language_of_query)
    assert by_lang["zh"]["acc@10"] == 1.0 and by_lang["en"]["acc@10"] == 0.0


def test_mkqa_needs_answers(shared_data):
    from harness.errors import InputError

    with pytest.raises(InputError, match="answers.jsonl"):
        get_suite("mkqa").load(shared_data / "scifact")


def test_xquad_acc_with_oracle_run(shared_data):
    loaded = get_suite("mkqa").load(shared_data / "xquad-xling-retrieval")
    qrels = loaded.dataset.qrels
    run = Run.from_arrays(qrels.query_ids, qrels.doc_ids, np.ones(len(qrels)))
    result = evaluate_loaded(loaded, run, answer_lang="en")
    # the judged paragraph contains the English answer span of each SQuAD question
    assert result.aggregate["acc@10"] > 0.99
    assert result.aggregate["ndcg@10"] == pytest.approx(1.0)
