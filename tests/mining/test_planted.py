"""Mining on the synthetic world with planted false negatives (WorldSpec.peg: 10% of training rows
carry a twin of their positive among their negatives; truth.json names it): the lexical hashgram
source, PercPos against naive top-K, and the filter's precision/recall against the truth."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.retrieval.pool import CandidatePool, HashGramEncoder, named_sources
from methods.mining.judge import StandInJudge
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_filter import JudgeFilter
from methods.mining.method import truth_statistics
from methods.mining.rows import MiningSettings, mine_rows


def test_hashgram_is_a_deterministic_lexical_cosine():
    enc = HashGramEncoder()
    texts = ["the river passage", "the river passages", "晴天的山峰很高", "晴天的山峰很美", "unrelated words"]
    x = enc.encode_docs(texts)
    assert x.shape == (5, 1024) and np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(x, HashGramEncoder().encode_queries(texts))
    sims = x @ x.T
    assert sims[0, 1] > 0.8 > sims[0, 4] and sims[2, 3] > 0.5 > sims[2, 4]      # spaces or not
    assert [s.encoder.identity() for s in named_sources(["hashgram:2:64"])] == \
        [{"encoder": "hashgram", "n": 2, "dim": 64, "version": 1}]
    for bad in ("hashgram:x", "hashgram:3:4", "hashgram:1:2:3"):
        with pytest.raises(ConfigError, match="hashgram"):
            named_sources([bad])


@pytest.fixture(scope="module")
def peg():
    from harness.ablation.resolve import resolve_path
    from harness.data.collections import load_training_data

    world = resolve_path("synthetic:peg")
    source = load_training_data([str(world / "train")]).sources[0]       # latin_qa, 400 rows
    return source, json.loads((world / "truth.json").read_text(encoding="utf-8"))


def mine(tmp_path, source, strategy, judge=None):
    out = tmp_path / strategy / "m.jsonl"
    flt = JudgeFilter(judge, "keep_zero", VoteCache(tmp_path / "votes")) if judge else None
    report = mine_rows(source.rows, lambda c: CandidatePool(named_sources(["hashgram"]), c, depth=20,
                                                            cache_dir=tmp_path / "cache"),
                       out, MiningSettings(strategy=strategy, k=5), judge_filter=flt)["report"]
    prov = [json.loads(x) for x in out.with_name("m.provenance.jsonl").read_text().splitlines()]
    return prov, report


def test_perc_pos_excludes_more_planted_false_negatives_than_naive(tmp_path, peg):
    source, truth = peg
    naive, _ = mine(tmp_path, source, "naive")
    perc, _ = mine(tmp_path, source, "perc_pos")
    n, p = truth_statistics(naive, source.rows, truth), truth_statistics(perc, source.rows, truth)
    assert n["planted"] == p["planted"] == 40                     # 10% of 400 rows
    # measured: naive keeps 33 of the 40 twins among its 5 negatives, PercPos 90% keeps 3
    assert n["planted_selected"] >= 30 and p["planted_selected"] <= 5


def test_filter_precision_and_recall_against_the_truth(tmp_path, peg):
    source, truth = peg
    truth_judge = {(r.query, r.neg[j]): 2 for r in source.rows
                   for t in [next(x for d in truth["domains"].values() for x in d["train"] if x["id"] == r.meta["id"])]
                   for j in t["false_negative_negs"]}
    perfect, _ = mine(tmp_path / "a", source, "naive", StandInJudge(truth_judge, high=1.0, low=1.0))
    stats = truth_statistics(perfect, source.rows, truth)
    assert stats["judged_planted"] == 40 and stats["recall"] == 1.0 and stats["precision"] == 1.0
    assert stats["planted_selected"] == 0
    overlap, report = mine(tmp_path / "b", source, "naive", StandInJudge())
    stats = truth_statistics(overlap, source.rows, truth)
    # the word-overlap rule also votes the planted near-duplicate negatives 2: high recall, low precision
    assert stats["recall"] >= 0.7 and stats["precision"] < 0.05
    assert report["filter"]["removed"] == stats["true_positives"] + stats["false_positives"]


@pytest.mark.slow
def test_tiny_random_causal_lm_as_judge_is_plumbing(tmp_path, peg):
    """A tiny random Llama (score mode) judges 20 rows x their first 5 candidates: the truth statistics
    are computed from its votes like any judge's (its precision/recall are noise by design; measured:
    45 candidates voted out, none of them planted, 1 of the 40 twins among the judged)."""
    from test_judge_hf import make_tiny_chat_model

    from methods.mining.judge_hf import TransformersJudge
    from methods.mining.method import _judge_subset

    source, truth = peg
    judge = TransformersJudge(str(make_tiny_chat_model(tmp_path / "tiny")), mode="score", batch_size=16)
    flt = JudgeFilter(judge, "keep_zero", VoteCache(tmp_path / "votes"), only_rows=_judge_subset(400, 20, 0),
                      depth=5)
    out = tmp_path / "m.jsonl"
    report = mine_rows(source.rows, lambda c: CandidatePool(named_sources(["hashgram"]), c, depth=20,
                                                            cache_dir=tmp_path / "cache"),
                       out, MiningSettings(strategy="naive", k=5), judge_filter=flt)["report"]
    prov = [json.loads(x) for x in out.with_name("m.provenance.jsonl").read_text().splitlines()]
    stats = truth_statistics(prov, source.rows, truth)
    assert report["filter"]["judged"] == 100 and sum(report["filter"]["labels"].values()) == 100
    assert stats["true_positives"] + stats["false_positives"] == report["filter"]["removed"]
    assert stats["true_positives"] + stats["false_negatives"] == stats["judged_planted"]
    print(f"\ntiny random LM judge vs planted truth: {stats}")
