"""Method options in a suite file may name data ({shared}/..., synthetic:...): they resolve like data paths."""
from __future__ import annotations

from pathlib import Path

from harness.ablation.cells import variant_train_overrides
from harness.ablation.resolve import resolve_option_value
from harness.ablation.spec import Variant, parse_suite

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"


def test_placeholders_resolve_inside_lists_and_mappings(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_SHARED_DATA", str(tmp_path))
    monkeypatch.setenv("HARNESS_MY_CORPORA", "/data/corpora")
    value = {"corpora": ["{shared}/scifact", "{my_corpora}/fiqa"], "k": 3, "mode": "code", "unset": "{nope}/x"}
    assert resolve_option_value(value) == {"corpora": [f"{tmp_path}/scifact", "/data/corpora/fiqa"], "k": 3,
                                           "mode": "code", "unset": "{nope}/x"}


def test_suite_variant_options_reach_the_train_spec_resolved(monkeypatch, tmp_path):
    import yaml

    monkeypatch.setenv("HARNESS_SHARED_DATA", str(tmp_path))
    suite = parse_suite(yaml.safe_load(MINI.read_text(encoding="utf-8")), MINI)
    variant = Variant(id="x", method="uniform", label="x", options={"corpora": ["{shared}/nfcorpus"]})
    overrides = variant_train_overrides(suite, variant, "tiny")
    assert overrides["method_options"] == {"corpora": [f"{tmp_path}/nfcorpus"]}


def test_a_variant_may_name_its_own_model_per_scale():
    import yaml

    raw = yaml.safe_load(MINI.read_text(encoding="utf-8"))
    raw["variants"].append({"id": "own", "method": "uniform", "model": "minilm",
                            "scales": {"tiny": {"model": "synthetic:default/tiny-decoder"}}})
    suite = parse_suite(raw, MINI)
    own = suite.variant("own")
    assert own.model_at("tiny") == "synthetic:default/tiny-decoder"
    assert own.model_at("small") == "minilm"
    assert suite.variant("uniform").model_at("tiny") is None
