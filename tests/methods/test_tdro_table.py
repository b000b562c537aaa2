"""``harness table suite``: a finished suite's stored results in a layout declared in the suite file.

The fast tests run a small suite on the synthetic tDRO world (uniform baseline and two tdro
variants with given weights, a few steps) and check the layout against the stored per-query
scores; the slow test renders the real ``tdro`` suite at ``tiny`` scale in the Table 5 layout.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from harness.ablation import load_suite, run_suite
from harness.ablation.layout import load_layout, render_layout, suite_weights
from harness.ablation.spec import parse_suite
from harness.cli import main
from harness.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

WEIGHTS = {"latin_qa": 0.3, "latin_synonyms": 0.3, "latin_noisy": 0.05, "cyrillic_news": 0.15, "cjk_qa": 0.1,
           "thai_sts": 0.1}
SUITE = {
    "name": "tdro-layout-test", "version": 1, "baseline": "base",
    "variants": [
        {"id": "base", "label": "Baseline", "method": "uniform"},
        {"id": "top", "label": "w/ Top-50%", "method": "tdro",
         "options": {"transfer": "top", "percent": 50, "weights": WEIGHTS}},
        {"id": "loss", "label": "Loss Reweighting", "method": "tdro",
         "options": {"transfer": "loss", "weights": WEIGHTS}},
    ],
    "metrics": ["ndcg@10"],
    "stats": {"test": "randomization", "correction": "holm", "alpha": 0.05, "seed": 0, "aggregate": "pooled",
              "resamples": 2000},
    "scales": {"tiny": {
        "model": "synthetic:tdro/tiny-bert", "data": ["synthetic:tdro"],
        "train": {"steps": 12, "batch_size": 16, "lr": 0.001, "warmup_steps": 1, "use_instructions": False},
        "benchmarks": [{"id": "latin_qa", "label": "Latin QA", "suite": "synthetic",
                        "dataset_dir": "synthetic:tdro/eval/latin_qa"},
                       {"id": "cjk_qa", "suite": "synthetic", "dataset_dir": "synthetic:tdro/eval/cjk_qa"}],
        "aggregates": {"Avg": ["latin_qa", "cjk_qa"]}}},
    "table": {"default": "main", "layouts": {
        "main": {"caption": "Layout test",
                 "rows": ["base", {"group": "Transfer", "rows": ["top", "loss"]}],
                 "columns": [{"benchmark": "latin_qa", "metric": "ndcg@10"},
                             {"benchmark": "cjk_qa", "metric": "recall@100", "group": "CJK"},
                             {"benchmark": "Avg", "metric": "ndcg@10", "label": "mean nDCG@10"}]},
        "weights": {"kind": "weights", "columns": ["base", "top", "loss"]}}},
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layout")
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(SUITE, sort_keys=False), encoding="utf-8")
    root = folder / "results"
    outcome = run_suite(load_suite(path), "tiny", root, progress=False)
    assert outcome.complete
    return path, root


def test_results_layout_matches_stored_scores(finished):
    from harness.stats import StatsOptions
    from harness.stats.suite import compare_suite
    from harness.store import load_result

    path, root = finished
    suite = load_suite(path)
    table = render_layout(suite, "tiny", root)
    assert [c.key for c in table.columns] == ["latin_qa/ndcg@10", "cjk_qa/recall@100", "Avg/ndcg@10"]
    assert [c.group for c in table.columns] == ["Latin QA", "CJK", "Avg"]
    assert [(r.label, r.group, r.kind) for r in table.rows] == [
        ("Baseline", None, "baseline"), ("w/ Top-50%", "Transfer", "data"), ("Loss Reweighting", "Transfer", "data")]
    summary = json.loads((root / "suites" / suite.name / "tiny" / "summary.json").read_text())
    # recall@100 is not among the suite's metrics: the layout reads it from the stored per-query scores
    for row, variant in zip(table.rows, ["base", "top", "loss"]):
        stored = {b: load_result(_eval_dir(root, summary, suite, variant, b)) for b in ("latin_qa", "cjk_qa")}
        assert row.cells["latin_qa/ndcg@10"].value == pytest.approx(stored["latin_qa"].metrics["ndcg@10"])
        assert row.cells["cjk_qa/recall@100"].value == pytest.approx(stored["cjk_qa"].metrics["recall@100"])
        macro = np.mean([stored[b].metrics["ndcg@10"] for b in stored])
        assert row.cells["Avg/ndcg@10"].value == pytest.approx(macro)
    # the p-values are the suite's paired tests; Holm runs over the 6 comparisons of this table
    results = {lab: {s: load_result(_eval_dir(root, summary, suite, v, b)) for s, v in
                     (("Baseline", "base"), ("w/ Top-50%", "top"))} for lab, b in (("Latin QA", "latin_qa"),)}
    direct = compare_suite(results, ["ndcg@10"], baseline="Baseline", correction="none",
                           options=StatsOptions(test="randomization", seed=0, resamples=2000)).comparisons[0]
    assert table.rows[1].cells["latin_qa/ndcg@10"].delta == pytest.approx(direct.delta)
    assert any("over the 6 comparisons of this table" in text for text in table.legend.values())
    assert any("Holm" in note for note in table.notes)


def _eval_dir(root, summary, suite, variant, bench):
    from harness.ablation.layout import result_dir

    return result_dir(suite, "tiny", root, summary, variant, bench)


def test_weights_layout_and_cli(finished, tmp_path, capsys):
    path, root = finished
    suite = load_suite(path)
    weights = suite_weights(suite, "tiny", root, ["base", "top", "loss"])
    assert weights["base"] == pytest.approx({n: 1 / 6 for n in WEIGHTS})
    assert weights["top"] == pytest.approx({n: (1 / 3 if n in ("latin_qa", "latin_synonyms", "cyrillic_news") else 0)
                                            for n in WEIGHTS})
    assert weights["loss"] == pytest.approx({n: 1 / 6 for n in WEIGHTS})    # loss reweighting samples uniformly
    table = render_layout(suite, "tiny", root, "weights")
    assert [r.label for r in table.rows][:3] == ["latin_qa", "latin_synonyms", "cyrillic_news"]
    assert table.rows[-1].label == "Sum" and table.rows[-1].cells["top"].value == pytest.approx(1.0)

    assert main(["table", "suite", str(path), "--scale", "tiny", "--results-root", str(root)]) == 0
    markdown = capsys.readouterr().out
    assert "| Baseline |" in markdown.replace("**", "") and "Transfer" in markdown and "mean nDCG@10" in markdown
    out = tmp_path / "t.tex"
    assert main(["table", "suite", str(path), "--scale", "tiny", "--results-root", str(root), "--format", "latex",
                 "--output", str(out)]) == 0
    assert "\\begin{tabular}" in out.read_text() and "\\midrule" in out.read_text()
    stem = tmp_path / "weights"
    assert main(["table", "suite", str(path), "--scale", "tiny", "--results-root", str(root), "--layout", "weights",
                 "--figure", str(stem)]) == 0
    assert (tmp_path / "weights.png").stat().st_size > 1000 and (tmp_path / "weights.pdf").exists()
    assert main(["table", "suite", str(path), "--list"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["main (default)", "weights"]


def _with_layout(suite, name: str, layout: dict):
    """The suite with one more table layout (parsed again: the schema reads ``table:`` when the file is read)."""
    raw = {**suite.raw, "table": {**suite.raw["table"], "layouts": {**suite.raw["table"]["layouts"], name: layout}}}
    return parse_suite(raw, suite.path)


def test_layout_errors_are_clear(finished, tmp_path):
    path, root = finished
    suite = load_suite(path)
    with pytest.raises(ConfigError, match="layout 'nope' does not exist; layouts: main, weights"):
        load_layout(suite, "tiny", "nope")
    suite = _with_layout(suite, "bad", {"columns": [{"benchmark": "ghost", "metric": "ndcg@10"}]})
    with pytest.raises(ConfigError, match="'ghost' is neither a benchmark nor an aggregate"):
        render_layout(suite, "tiny", root, "bad")
    suite = _with_layout(suite, "bad", {"rows": ["nobody"], "columns": [{"benchmark": "Avg", "metric": "x"}]})
    with pytest.raises(ConfigError, match="unknown variant"):
        load_layout(suite, "tiny", "bad")
    with pytest.raises(ConfigError, match="no finished results"):
        render_layout(suite, "tiny", tmp_path / "empty")
    assert main(["table", "suite", str(path), "--results-root", str(tmp_path / "empty")]) == 2


@pytest.mark.slow
def test_tdro_suite_tiny_in_table5_layout(tmp_path_factory):
    """The real suite at tiny scale (minutes): every Table 5 row and the learned weights table."""
    root = tmp_path_factory.mktemp("tdro-tiny")
    suite = load_suite("tdro")
    assert run_suite(suite, "tiny", root, progress=False).complete
    table = render_layout(suite, "tiny", root)
    assert [r.label for r in table.rows] == [
        "Baseline (uniform)", "w/ Bottom-50%", "w/ Top-60%", "w/ Top-70%", "w/ Top-80%", "Sampling Ratio Reweighting",
        "Loss Reweighting", "mean(L_proxy) / mean(L_ref)", "mean(L_proxy) - mean(L_ref)", "mean(L_proxy)"]
    assert [r.group for r in table.rows][1:] == ["Sampling Strategy Choices for tDRO"] * 6 + [
        "Loss Measurements (w/ Sampling Ratio Reweighting)"] * 3
    ratio, relative = table.rows[5], table.rows[7]
    assert {k: c.value for k, c in ratio.cells.items()} == {k: c.value for k, c in relative.cells.items()}
    weights = render_layout(suite, "tiny", root, "weights")
    learned = {r.label: r.cells["relative"].value for r in weights.rows if r.kind == "data"}
    proxy = {r.label: r.cells["proxy"].value for r in weights.rows if r.kind == "data"}
    assert learned["latin_noisy"] < 1 / 6 < proxy["latin_noisy"]          # the planted "Yahoo" effect
