"""Metric names: canonical forms, trec_eval spellings, value-object behaviour and errors."""
from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.metrics import Metric, parse_metric, parse_metrics


@pytest.mark.parametrize("text, canonical, trec_eval", [
    ("ndcg@10", "ndcg@10", "ndcg_cut_10"),
    ("nDCG@10", "ndcg@10", "ndcg_cut_10"),
    ("ndcg_cut_10", "ndcg@10", "ndcg_cut_10"),
    ("ndcg_cut.10", "ndcg@10", "ndcg_cut_10"),
    ("ndcg", "ndcg", "ndcg"),
    ("recall@100", "recall@100", "recall_100"),
    ("recall.100", "recall@100", "recall_100"),
    ("R@100", "recall@100", "recall_100"),
    ("P@10", "p@10", "P_10"),
    ("P_10", "p@10", "P_10"),
    ("precision@5", "p@5", "P_5"),
    ("mrr", "mrr", "recip_rank"),
    ("recip_rank", "mrr", "recip_rank"),
    ("MRR@10", "mrr@10", None),
    ("map", "map", "map"),
    ("MAP@100", "map@100", "map_cut_100"),
    ("map_cut_100", "map@100", "map_cut_100"),
    ("success@10", "success@10", "success_10"),
    ("success_1", "success@1", "success_1"),
    ("hit_rate@5", "success@5", "success_5"),
    ("Rprec", "r-prec", "Rprec"),
    (" r-prec ", "r-prec", "Rprec"),
    ("ndcg@010", "ndcg@10", "ndcg_cut_10"),
])
def test_parse_metric(text, canonical, trec_eval):
    metric = parse_metric(text)
    assert str(metric) == canonical
    assert metric.trec_eval_name == trec_eval
    assert parse_metric(canonical) == metric


def test_metrics_are_hashable_values():
    assert parse_metric("ndcg@10") == Metric("ndcg", 10)
    assert len({parse_metric("ndcg@10"), parse_metric("nDCG_cut.10"), Metric("ndcg", 10)}) == 1
    assert Metric("ndcg") != Metric("ndcg", 10)
    assert parse_metric(Metric("map", 5)) == Metric("map", 5)
    with pytest.raises(AttributeError):
        Metric("map").cutoff = 3  # frozen


def test_parse_metrics_drops_repeats_and_keeps_order():
    assert [str(m) for m in parse_metrics(["map", "ndcg@10", "ndcg_cut_10", "MAP"])] == ["map", "ndcg@10"]
    assert [str(m) for m in parse_metrics("mrr@10")] == ["mrr@10"]


@pytest.mark.parametrize("text, message", [
    ("foo", "unknown metric 'foo'; known metrics: ndcg"),
    ("ndcg@x", "unknown metric 'ndcg@x'"),
    ("", "unknown metric ''"),
    ("ndcg@0", "cutoff must be >= 1"),
    ("p", "needs a cutoff"),
    ("recall", "needs a cutoff"),
    ("success", "needs a cutoff"),
    ("ndcg_cut", "needs a cutoff"),
    ("r-prec@10", "takes no cutoff"),
    ("P.5,10", "unknown metric"),
])
def test_bad_metric_names(text, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        parse_metric(text)


def test_bad_values():
    with pytest.raises(ConfigError, match="unknown metric"):
        Metric("ndcg_cut", 10)
    with pytest.raises(ConfigError, match="must be an integer"):
        Metric("ndcg", 2.5)
    with pytest.raises(ConfigError, match="must be a string"):
        parse_metric(10)
    with pytest.raises(ConfigError, match="no metrics requested"):
        parse_metrics([])
