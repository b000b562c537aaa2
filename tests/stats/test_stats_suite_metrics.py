"""A suite compares each dataset on the metrics its protocol produced: MKQA-style sets have Acc@k, no nDCG."""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats.suite import compare_suite
from reports.comparison import comparison_table

QIDS = [f"q{i}" for i in range(12)]


def _result(**metrics: np.ndarray) -> EvaluationResult:
    return EvaluationResult(QIDS, {m: np.asarray(v, dtype=float) for m, v in metrics.items()})


def _results():
    rng = np.random.default_rng(0)
    base, better = rng.random(12), rng.random(12)
    judged = {"A": _result(**{"ndcg@10": base}), "B": _result(**{"ndcg@10": base + 0.2})}
    answers = {"A": _result(**{"acc@10": base.round()}), "B": _result(**{"acc@10": better.round()})}
    return {"beir": judged, "mkqa-de": answers, "mkqa-fr": answers}


def test_each_dataset_is_compared_on_the_metrics_it_has():
    report = compare_suite(_results(), ["ndcg@10", "acc@10"], baseline="A", aggregates={"MKQA": ["mkqa-de", "mkqa-fr"]},
                           correction="holm")
    got = sorted((c.dataset, c.metric) for c in report.comparisons)
    assert got == [("MKQA", "acc@10"), ("beir", "ndcg@10"), ("mkqa-de", "acc@10"), ("mkqa-fr", "acc@10")]
    assert {c.family_size for c in report.comparisons} == {4}          # Holm over the comparisons made
    beir = next(c for c in report.comparisons if c.dataset == "beir")
    assert beir.delta == pytest.approx(0.2)
    table = comparison_table(report)
    assert [c.key for c in table.columns] == ["beir/ndcg@10", "mkqa-de/acc@10", "mkqa-fr/acc@10", "MKQA/acc@10"]


def test_a_metric_no_dataset_has_is_still_an_error():
    with pytest.raises(ConfigError, match="no dataset has metric.*recall@100"):
        compare_suite(_results(), ["ndcg@10", "recall@100"], baseline="A")
