"""ComparisonReport.load: a stored comparisons.json reads back into the report that wrote it."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.errors import InputError
from harness.evaluation_result import EvaluationResult
from harness.io.results_layout import COMPARISONS_FILE
from harness.stats import StatsOptions, compare_suite
from harness.stats.suite import ComparisonReport


def _systems(seed: int, prefix: str) -> dict[str, EvaluationResult]:
    rng = np.random.default_rng(seed)
    qids = [f"{prefix}{i}" for i in range(40)]
    base = rng.random(40)
    out = {}
    for k, name in enumerate(("base", "a", "b")):
        values = {"ndcg@10": np.clip(base + rng.normal(0.04 * k, 0.1, 40), 0, 1),
                  "recall@100": np.ones(40) if name != "b" else np.clip(base + 0.2, 0, 1)}
        out[name] = EvaluationResult(qids, values)
    return out


@pytest.mark.parametrize("test", ["ttest", "randomization"])
def test_a_stored_report_reads_back_equal(tmp_path, test):
    results = {"d1": _systems(0, "x"), "d2": _systems(1, "y")}
    report = compare_suite(results, ["ndcg@10", "recall@100"], aggregates={"avg": ["d1", "d2"]},
                           options=StatsOptions(test=test, resamples=200), family="metric")
    stored = report.to_dict()
    (tmp_path / COMPARISONS_FILE).write_text(json.dumps(stored), encoding="utf-8")
    for where in (tmp_path / COMPARISONS_FILE, tmp_path):       # the file, or the report folder holding it
        loaded = ComparisonReport.load(where)
        assert loaded.to_dict() == stored
        assert loaded.describe() == report.describe()
        c = loaded.get("a", "ndcg@10", "d1")
        assert c.p_adjusted == report.get("a", "ndcg@10", "d1").p_adjusted
    # A comparison of a constant difference stores d_z as null and reads it back as NaN.
    constant = ComparisonReport.load(tmp_path).get("a", "recall@100", "d1")
    assert math.isnan(constant.effect_size) or constant.effect_size == report.get("a", "recall@100", "d1").effect_size


def test_a_broken_report_is_an_input_error(tmp_path):
    (tmp_path / COMPARISONS_FILE).write_text(json.dumps({"comparisons": [], "systems": []}), encoding="utf-8")
    with pytest.raises(InputError, match="not a comparison report"):
        ComparisonReport.load(tmp_path)
    with pytest.raises(InputError):
        ComparisonReport.load(tmp_path / "missing.json")
