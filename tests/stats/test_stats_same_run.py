"""One run counted once in a correction family however many rows show it (paper 000's "ratio" and "relative"
rows; Top-70% and Top-80% keeping the same datasets at a small scale): ``compare_suite(same_as=...)``."""
from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.stats import StatsOptions, compare_suite
from harness.stats.correction import adjust_pvalues
from harness.stats.suite import same_results

OPTIONS = StatsOptions(test="ttest")       # deterministic p-values: the family arithmetic is exact


def _eval(qids, values) -> EvaluationResult:
    return EvaluationResult(list(qids), {"m": np.asarray(values, dtype=float)})


def _results():
    rng = np.random.default_rng(5)
    qids = [f"q{i}" for i in range(80)]
    base = rng.random(80)
    out = {"base": _eval(qids, base)}
    for name, shift in (("A", 0.05), ("B", 0.02), ("C", -0.01)):
        out[name] = _eval(qids, np.clip(base + rng.normal(shift, 0.1, 80), 0, 1))
    out["A again"] = _eval(qids, out["A"].per_query["m"].copy())      # the same numbers under another name
    return {"d1": out}


def test_an_alias_is_shown_but_counted_once():
    results = _results()
    plain = compare_suite(results, ["m"], baseline="base", options=OPTIONS)
    assert {c.family_size for c in plain.comparisons} == {4}                 # A counted twice
    report = compare_suite(results, ["m"], baseline="base", options=OPTIONS, same_as={"A again": "A"})
    assert report.systems == ["base", "A", "B", "C", "A again"]
    assert {c.family_size for c in report.comparisons} == {3}
    a, again = report.get("A", "m", "d1"), report.get("A again", "m", "d1")
    assert again.same_as == "A" and a.same_as is None
    assert (again.p_value, again.p_adjusted, again.delta) == (a.p_value, a.p_adjusted, a.delta)
    # Holm over the three distinct runs, by hand from their raw p-values
    raw = [report.get(s, "m", "d1").p_value for s in ("A", "B", "C")]
    expected = adjust_pvalues(raw, "holm")
    assert [report.get(s, "m", "d1").p_adjusted for s in ("A", "B", "C")] == pytest.approx(list(expected))
    # with the duplicate counted, the smallest p is multiplied by 4 instead of 3
    assert plain.get("A", "m", "d1").p_adjusted == pytest.approx(min(1.0, 4 * a.p_value))
    assert a.p_adjusted == pytest.approx(min(1.0, 3 * a.p_value))
    assert "same_as" in again.to_dict() and "same_as" not in a.to_dict()


def test_identical_results_are_found_and_bad_aliases_refused():
    results = _results()
    assert same_results(results, ["A", "B", "C", "A again"]) == {"A again": "A"}
    with pytest.raises(ConfigError, match="must map a compared system"):
        compare_suite(results, ["m"], baseline="base", options=OPTIONS, same_as={"A again": "base"})
    with pytest.raises(ConfigError, match="must map a compared system"):
        compare_suite(results, ["m"], baseline="base", options=OPTIONS, same_as={"A again": "A", "A": "B"})
