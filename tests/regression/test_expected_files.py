"""The stored expectations themselves (fast, no evaluation): every pinned number can fall, and the suite cells
pinned for the tdro and peg ablation suites name cells those suites define, at the tiny scale, with the
metrics their benchmarks store."""
from __future__ import annotations

import pytest

from harness.ablation import load_suite
from harness.regression import load_all, tolerance_for

ENTRIES = load_all()


def test_every_pinned_metric_can_fall():
    """A value at or below its tolerance can only ever be "improved": it guards nothing (the MIRACL te/ar
    MiniLM nDCG@10 of 0.0 was such a value)."""
    cannot_fall = [(e.key, m, v) for e in ENTRIES for m, v in e.metrics.items() if v <= tolerance_for(m, e.tolerance)]
    assert cannot_fall == []


def test_miracl_te_ar_pin_pyserini_parity():
    by_id = {e.id: e for e in ENTRIES if e.suite == "miracl"}
    assert "miracl-te-minilm" not in by_id and "miracl-ar-minilm" not in by_id
    assert by_id["miracl-te-bm25-pyserini"].metrics["ndcg@10"] == 0.5426      # Pyserini's searcher
    assert by_id["miracl-ar-bm25-pyserini"].metrics["ndcg@10"] == 0.7989
    assert "pyserini" in by_id["miracl-te-bm25-pyserini"].command


@pytest.mark.parametrize("suite_name", ["tdro", "peg"])
def test_suite_cells_are_pinned(suite_name):
    entries = [e for e in ENTRIES if e.suite == suite_name]
    assert len(entries) >= 2
    suite = load_suite(suite_name)
    variants = {v.id for v in suite.variants}
    benchmarks = {b.id for b in suite.scale("tiny").benchmarks}
    for e in entries:
        assert e.command[:2] == ["run", suite_name] and "{out}" in e.command
        assert "--scale" not in e.command or e.command[e.command.index("--scale") + 1] == "tiny"
        prefix, variant, bench = e.result.rsplit("/", 2)
        assert prefix == f"suites/{suite_name}/tiny/results" and variant in variants and bench in benchmarks
        assert {"ndcg@10", "recall@100"} <= set(e.metrics)
        assert e.tolerance and all(0 < t <= 0.02 for t in e.tolerance.values())   # trained cells: a stated band
        assert e.card_fingerprint
