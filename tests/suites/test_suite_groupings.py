"""Benchmark groupings and the averaging helpers (BEIR-13/15/18, CQADupStack, MIRACL, MKQA)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from suites import groupings as g


def test_beir_groupings():
    assert len(g.BEIR_18) == 18 and len(set(g.BEIR_18)) == 18 and "msmarco" not in g.BEIR_18
    assert len(g.BEIR_13) == 13 and set(g.BEIR_13) <= set(g.BEIR_18)
    # paper 003 leaves out exactly these five
    assert set(g.BEIR_18) - set(g.BEIR_13) == {"cqadupstack", "bioasq", "signal1m", "trec-news", "robust04"}
    assert set(g.BEIR_15_PUBLIC) == set(g.BEIR_13) | {"cqadupstack", "msmarco"}
    assert len(g.CQADUPSTACK_FORUMS) == 12


def test_language_groupings():
    assert len(g.MIRACL_LANGUAGES) == 18 and len(g.MIRACL_WITH_TRAINING) == 16
    assert set(g.MIRACL_LANGUAGES) - set(g.MIRACL_WITH_TRAINING) == {"de", "yo"}
    assert len(g.MKQA_LANGUAGES) == 26 and len(g.MKQA_QUERY_LANGUAGES) == 25 and "en" not in g.MKQA_QUERY_LANGUAGES
    assert len(g.CMTEB_RETRIEVAL) == 8 and len(g.CMTEB_RERANKING) == 4
    assert g.group("BEIR-13") == g.BEIR_13
    with pytest.raises(ConfigError, match="unknown grouping"):
        g.group("beir-14")


def result(values: dict[str, list[float]]) -> EvaluationResult:
    n = len(next(iter(values.values())))
    return EvaluationResult([f"q{i}" for i in range(n)], {m: np.array(v) for m, v in values.items()})


def test_cqadupstack_average_is_mean_of_forum_means():
    forums = {f: result({"ndcg@10": [i / 10, i / 10 + 0.1]}) for i, f in enumerate(g.CQADUPSTACK_FORUMS)}
    expected = float(np.mean([i / 10 + 0.05 for i in range(12)]))
    assert g.cqadupstack_average(forums)["ndcg@10"] == pytest.approx(expected)
    prefixed = {f"cqadupstack/{k}": v for k, v in forums.items()}
    assert g.cqadupstack_average(prefixed) == g.cqadupstack_average(forums)
    del forums["tex"]
    with pytest.raises(ConfigError, match="missing results for tex"):
        g.cqadupstack_average(forums)


def test_macro_average_refuses_partial_groups():
    results = {"te": result({"ndcg@10": [1.0, 0.0]}), "ar": result({"ndcg@10": [1.0, 1.0, 1.0]})}
    assert g.macro_average(results, "ndcg@10") == pytest.approx(0.75)    # not the pooled 0.8
    with pytest.raises(ConfigError, match="missing results"):
        g.macro_average(results, "ndcg@10", g.MIRACL_WITH_TRAINING)


def test_per_language_split_of_one_result():
    r = EvaluationResult(["zh-1", "zh-2", "th-1"], {"acc@10": np.array([1.0, 0.0, 1.0])})
    assert g.per_group_average(r, g.language_of_query) == {"th": {"acc@10": 1.0}, "zh": {"acc@10": 0.5}}
    with pytest.raises(ConfigError):
        g.language_of_query("noprefix")
