"""A suite table counts one run once (issue: paper 000's "ratio" and "relative" rows are one run; Top-50% and
Top-60% of 6 datasets keep the same 3, so their runs give identical results): the rows stay, the notes say
which repeats which, and Holm's family counts the distinct runs only."""
from __future__ import annotations

import pytest
import yaml

from harness.ablation import load_suite, run_suite
from harness.ablation.layout import render_layout

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]     # trains 3 runs: ~1-2 min under load

WEIGHTS = {"latin_qa": 0.3, "latin_synonyms": 0.3, "latin_noisy": 0.05, "cyrillic_news": 0.15, "cjk_qa": 0.1,
           "thai_sts": 0.1}
SUITE = {
    "name": "tdro-same-run-test", "version": 1, "baseline": "base",
    "variants": [
        {"id": "base", "label": "Baseline", "method": "uniform"},
        {"id": "top50", "label": "Top-50%", "method": "tdro",
         "options": {"transfer": "top", "percent": 50, "weights": WEIGHTS}},
        {"id": "top60", "label": "Top-60%", "method": "tdro",               # floor(6 x 0.6) = floor(6 x 0.5) = 3
         "options": {"transfer": "top", "percent": 60, "weights": WEIGHTS}},
        {"id": "ratio", "label": "Ratio", "method": "tdro", "options": {"transfer": "ratio", "weights": WEIGHTS}},
        {"id": "relative", "label": "Relative", "method": "tdro",          # the same spec: the same run
         "options": {"transfer": "ratio", "weights": WEIGHTS}},
    ],
    "metrics": ["ndcg@10"],
    "stats": {"test": "randomization", "correction": "holm", "alpha": 0.05, "seed": 0, "aggregate": "pooled",
              "resamples": 2000},
    "scales": {"tiny": {
        "model": "synthetic:tdro/tiny-bert", "data": ["synthetic:tdro"],
        "train": {"steps": 6, "batch_size": 16, "lr": 0.001, "warmup_steps": 1, "use_instructions": False},
        "benchmarks": [{"id": "latin_qa", "suite": "synthetic", "dataset_dir": "synthetic:tdro/eval/latin_qa"}]}},
    "table": {"default": "main", "layouts": {
        "main": {"rows": ["base", "top50", "top60", "ratio", "relative"],
                 "columns": [{"benchmark": "latin_qa", "metric": "ndcg@10"}]}}},
}


def test_repeated_runs_are_one_comparison(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(SUITE, sort_keys=False), encoding="utf-8")
    root = tmp_path / "results"
    assert run_suite(load_suite(path), "tiny", root, progress=False).complete
    table = render_layout(load_suite(path), "tiny", root)
    assert [r.label for r in table.rows] == ["Baseline", "Top-50%", "Top-60%", "Ratio", "Relative"]
    cells = {r.label: r.cells["latin_qa/ndcg@10"] for r in table.rows}
    assert cells["Top-60%"].value == cells["Top-50%"].value and cells["Relative"].value == cells["Ratio"].value
    note = next(n for n in table.notes if n.startswith("Same run:"))
    assert "Top-60% repeats Top-50%" in note and "Relative repeats Ratio" in note
    assert any("(2 comparisons per family)" in n for n in table.notes)           # 4 rows, 2 distinct runs
    assert any("over the 2 comparisons of this table" in t for t in table.legend.values())
