"""acc@k is a registered metric (scored on answer strings), not a name a plug-in recognises by a pattern."""
from __future__ import annotations

import pytest

from harness.data.qrels import Qrels
from harness.data.run import Run
from harness.errors import ConfigError
from harness.metrics import METRICS, evaluate, parse_metric
from suites.benchmarks._common import split_metrics


def test_acc_is_registered_and_parsed_like_every_metric():
    assert "acc" in METRICS
    assert METRICS.get("acc").scored_on == "answers"
    assert str(parse_metric("acc@100")) == "acc@100"
    assert str(parse_metric("Acc@10")) == "acc@10"
    with pytest.raises(ConfigError, match="needs a cutoff"):
        parse_metric("acc")


def test_the_suites_split_answer_metrics_by_the_registry():
    assert split_metrics(["ndcg@10", "acc@10", "ACC@100", "recall@100"]) == ([10, 100], ["ndcg@10", "recall@100"])
    assert split_metrics(["bleu"]) == ([], ["bleu"])      # unknown: left to the metrics engine to refuse


def test_evaluate_on_qrels_refuses_an_answer_metric():
    qrels, run = Qrels.from_dict({"q1": {"d1": 1}}), Run.from_dict({"q1": {"d1": 1.0}})
    with pytest.raises(ConfigError, match="scored on answer strings"):
        evaluate(qrels, run, ["ndcg@10", "acc@10"])
