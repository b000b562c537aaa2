"""The generic registry: duplicates, did-you-mean, descriptions, entry points, references."""
from __future__ import annotations

import re

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.registry import Registry


class Alpha:
    """First line of Alpha's docstring.

    More text that is not part of the one-line description.
    """


class Beta:
    description = "beta, described by its attribute"


def test_register_get_describe():
    reg: Registry[type] = Registry("widget", group="retrieval_harness.test-widgets")
    reg.register("alpha", Alpha)
    reg.decorator("beta")(Beta)
    assert reg.get("alpha") is Alpha and reg.names() == ["alpha", "beta"]
    assert reg.describe() == [("alpha", "First line of Alpha's docstring."),
                              ("beta", "beta, described by its attribute")]
    reg.register("alpha", Alpha)   # the same definition again is not a conflict


def test_duplicate_names_both_definitions():
    reg: Registry[type] = Registry("widget", group="retrieval_harness.test-widgets")
    reg.register("alpha", Alpha)
    here = re.escape(__name__)
    with pytest.raises(ConfigError, match=rf"widget name 'alpha' is registered twice: by "
                                          rf"{here}:Alpha and by {here}:Beta"):
        reg.register("alpha", Beta)


def test_unknown_name_suggests_the_closest():
    reg: Registry[type] = Registry("widget", group="retrieval_harness.test-widgets")
    reg.register("alpha", Alpha)
    reg.register("beta", Beta)
    with pytest.raises(ConfigError, match=r"^unknown widget 'alpah'; did you mean 'alpha'\? known: alpha, beta$"):
        reg.get("alpah")
    with pytest.raises(ConfigError, match=r"^unknown widget 'zzz'; known: alpha, beta$"):
        reg.get("zzz")


def test_check_and_references():
    reg: Registry[type] = Registry("widget", group="retrieval_harness.test-widgets",
                                   check=lambda obj: isinstance(obj, type))
    assert reg.get(f"{__name__}:Alpha") is Alpha
    with pytest.raises(ConfigError, match="not a valid widget"):
        reg.register("fn", len)
    with pytest.raises(ConfigError, match="has no 'Gamma'"):
        reg.get(f"{__name__}:Gamma")
    with pytest.raises(ConfigError, match="expected 'package.module:Name'"):
        reg.get(":Alpha")


def test_entry_points_are_found_after_installation(tmp_path, monkeypatch):
    info = tmp_path / "widgets-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: widgets\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[retrieval_harness.test-widgets]\nalpha2 = {__name__}:Alpha\n")
    reg: Registry[type] = Registry("widget", group="retrieval_harness.test-widgets")
    assert reg.names() == []
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.get("alpha2") is Alpha and reg.names() == ["alpha2"]
    (info / "entry_points.txt").write_text("[retrieval_harness.test-widgets]\nbroken = no_such_module_x:Thing\n")
    with pytest.raises(ConfigError, match="entry point 'broken' = 'no_such_module_x:Thing'.*cannot be loaded"):
        Registry("widget", group="retrieval_harness.test-widgets").names()


def test_builtin_registries_and_a_plugged_metric():
    from harness.benchmark import SUITES
    from harness.data import Qrels, Run
    from harness.method import METHODS
    from harness.metrics import METRICS, MetricKind, evaluate, register_metric

    assert {"uniform", "tdro", "tdro-weights", "peg"} <= set(METHODS.names())
    assert {"beir", "miracl", "mkqa", "cmteb", "dureader", "synthetic"} <= set(SUITES.names())
    assert METRICS.names()[:3] == ["ndcg", "recall", "p"]
    with pytest.raises(ConfigError, match="unknown method 'tdor'; did you mean 'tdro'"):
        METHODS.get("tdor")

    def hits(judged, k):   # the number of relevant documents in the top k
        return judged.relevant_in_top(k).astype(np.float64)

    register_metric("hits", MetricKind(hits, "required", description="relevant documents in the top k"))
    assert ("hits", "relevant documents in the top k") in METRICS.describe()
    qrels = Qrels.from_dict({"q1": {"d1": 1, "d3": 1}, "q2": {"d2": 1}})
    run = Run.from_dict({"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d1": 2.0, "d2": 1.0}})
    result = evaluate(qrels, run, ["hits@2", "Hits_3", "recall@2"])
    assert result.metric("hits@2") == {"q1": 1.0, "q2": 1.0} and result.metric("hits@3")["q1"] == 2.0
    assert result.aggregate["recall@2"] == pytest.approx((0.5 + 1.0) / 2)   # built-ins unchanged
    with pytest.raises(ConfigError, match="metric 'hits' needs a cutoff"):
        evaluate(qrels, run, ["hits"])


def test_a_revised_method_keys_its_runs_apart_and_others_keep_their_keys(monkeypatch):
    """``Method.revision`` from 2 on enters the run key (runs cached before a fix are not reused);
    at 1 the key is what it always was, so no cached run of an unrevised method is invalidated."""
    from harness.keys import content_key
    from harness.method import get_method, train_run_config

    uniform = type(get_method("uniform"))
    spec = uniform.spec("tiny")
    before = train_run_config("uniform", spec, "data-1")
    assert before == {"method": "uniform", "spec": spec.result_dict(), "data": "data-1"}
    monkeypatch.setattr(uniform, "revision", 2)
    after = train_run_config("uniform", spec, "data-1")
    assert after["revision"] == 2 and content_key(after) != content_key(before)
    assert type(get_method("mined")).revision == 2          # same-query rows merged (methods/mining/rows.py)
    assert "revision" not in train_run_config("no-such-method", spec, None)
