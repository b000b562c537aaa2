"""Slow end-to-end checks: ``harness eval`` with BM25 under a suite, on real data.

The stored run is re-scored with independent implementations of the official
definitions, and the aggregates match the stored expectations in ``suites/expected``.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dureader_reference import official_dureader

from harness.benchmark import get_suite
from harness.cli import main
from harness.store import load_result
from suites.groupings import language_of_query, per_group_average

EXPECTED = Path(__file__).resolve().parents[2] / "suites" / "expected"


def expected_metrics(suite: str, entry_id: str) -> dict[str, float]:
    data = yaml.safe_load((EXPECTED / f"{suite}.yaml").read_text(encoding="utf-8"))
    return next(e["metrics"] for e in data["entries"] if e["id"] == entry_id)


def run_eval(tmp_path: Path, suite: str, folder: Path) -> Path:
    out = tmp_path / suite
    assert main(["eval", "--model", "bm25", "--suite", suite, "--dataset-dir", str(folder), "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--format", "json"]) == 0
    return out


@pytest.mark.slow
def test_xquad_bm25_under_mkqa(shared_data, tmp_path):
    out = run_eval(tmp_path, "mkqa", shared_data / "xquad-xling-retrieval")
    stored = load_result(out)
    for metric, value in expected_metrics("mkqa", "xquad-bm25").items():
        assert stored.metrics[metric] == pytest.approx(value, abs=5e-5), metric
    by_lang = per_group_average(stored.evaluation, language_of_query)
    assert len(by_lang) == 12
    # English queries share the corpus language: lexical BM25 does best on them
    assert by_lang["en"]["acc@10"] == max(v["acc@10"] for v in by_lang.values())


@pytest.mark.slow
def test_webqa_bm25_under_dureader_matches_official_script(shared_data, tmp_path):
    out = run_eval(tmp_path, "dureader", shared_data / "webqa-test-ann-retrieval")
    stored = load_result(out)
    loaded = get_suite("dureader").load(shared_data / "webqa-test-ann-retrieval")
    reference = {q: set(d) for q, d in loaded.dataset.qrels.to_dict().items()}
    ranked = {q: d.tolist() for q, d, _ in stored.run().groups()}
    official = official_dureader(reference, ranked)
    for metric, value in official.items():
        assert stored.metrics[metric] == pytest.approx(value, abs=1e-12), metric
    for metric, value in expected_metrics("dureader", "webqa-bm25").items():
        assert stored.metrics[metric] == pytest.approx(value, abs=5e-5), metric
