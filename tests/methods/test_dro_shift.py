"""Paper 001's distribution-shift analysis (Table 6, Figure 2; Appendix C): weighted Jaccard similarity, query
types and unigram distributions against hand-computed values, and the ``distribution-shift`` layout on a
finished suite written with chosen numbers (our similarities and gaps beside Table 6's printed ones)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.ablation.layout import layout_figure, load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.ablation.spec import parse_suite
from harness.data.run import Run
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result
from methods.dro_shift import (
    query_type,
    query_type_distribution,
    shift_similarities,
    unigram_distribution,
    weighted_jaccard,
)


def test_weighted_jaccard_by_hand():
    # S = {a: .5, b: .25, c: .25}, T = {a: .25, b: .75}: min sum .25 + .25 + 0 = .5, max sum .5 + .75 + .25 = 1.5
    assert weighted_jaccard({"a": 0.5, "b": 0.25, "c": 0.25}, {"a": 0.25, "b": 0.75}) == pytest.approx(1 / 3)
    assert weighted_jaccard({"a": 1.0}, {"a": 1.0}) == 1.0
    assert weighted_jaccard({"a": 1.0}, {"b": 1.0}) == 0.0
    assert weighted_jaccard({}, {}) == 0.0


def test_query_types_of_appendix_c1():
    assert [query_type(q) for q in ("What is a cell?", "when did it end", "Who wrote it", "HOW-to fix",
                                    "where is x", "why so", "which one")] == \
        ["what", "when", "who", "how", "where", "why", "which"]
    assert [query_type(q) for q in ("Is it raining", "does it work", "shall we go", "am I late")] == ["y/n"] * 4
    # 'small' (as printed in the appendix's list) is not an auxiliary: a declarative query
    assert [query_type(q) for q in ("small dog breeds", "covid vaccine", "", "whatever works")] == \
        ["declarative"] * 4
    assert query_type_distribution(["what a", "what b", "is c", "d"]) == {"what": 0.5, "y/n": 0.25,
                                                                          "declarative": 0.25}


def test_unigram_similarity_by_hand():
    # source words: the x2, cat, sat -> .5 / .25 / .25; target: the, dog -> .5 / .5
    assert unigram_distribution(["The cat", "the sat"]) == {"the": 0.5, "cat": 0.25, "sat": 0.25}
    # documents: min the .5; max the .5 + cat .25 + sat .25 + dog .5 = 1.5 -> 1/3
    # queries: {what: 1} vs {what: .5, declarative: .5}: min .5, max 1 + .5 -> 1/3; vs {what: .75, y/n: .25}: .75 / 1.25
    q, d = shift_similarities(["what a", "what b"], ["The cat", "the sat"], ["what c", "d"], ["the dog"])
    assert (q, d) == pytest.approx((0.5 / 1.5, 0.5 / 1.5))
    assert shift_similarities(["what a"], [], ["what", "what", "what", "is"], [])[0] == pytest.approx(0.6)


SUITE = {
    "name": "shift", "version": 1, "baseline": "dense",
    "variants": [{"id": "dense", "label": "Dense", "method": "uniform"},
                 {"id": "bm25", "label": "BM25", "method": "none", "model": "bm25"}],
    "metrics": ["ndcg@10"],
    "stats": {"test": "ttest", "correction": "holm", "alpha": 0.05},
    "scales": {"tiny": {
        "model": "synthetic:default/tiny-bert", "data": ["synthetic:default"], "train": {"steps": 10},
        "benchmarks": [{"id": "src", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/latin_qa"},
                       {"id": "syn", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/latin_synonyms"},
                       {"id": "cjk", "suite": "synthetic", "dataset_dir": "synthetic:default/eval/cjk_qa"}]}},
    "table": {"layouts": {"shift": {
        "kind": "distribution-shift",
        "options": {"source": "src",
                    "printed": {"paper": "coco-dr", "table": 6, "query": "query-intent-sim",
                                "documents": "doc-lexical-sim"},
                    "gaps": [{"dense": "dense", "sparse": "bm25", "label": "Dense - BM25",
                              "printed": "ance-cocondenser-vs-bm25"}]},
        "columns": [{"benchmark": "syn", "metric": "ndcg@10", "label": "NQ"},
                    {"benchmark": "cjk", "metric": "ndcg@10", "label": "SciFact"}]}}},
}
QIDS = [f"q{i}" for i in range(6)]
SCORES = {("dense", "syn"): np.linspace(0.2, 0.7, 6), ("bm25", "syn"): np.full(6, 0.3),
          ("dense", "cjk"): np.full(6, 0.1), ("bm25", "cjk"): np.linspace(0.1, 0.6, 6)}


def _finished(root: Path) -> Path:
    report = report_dir(root, "shift", "tiny")
    report.mkdir(parents=True)
    cells = [{"variant": "dense", "key": "kd"}, {"variant": "bm25", "key": "kb"}]
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": "shift", "cells": cells}), encoding="utf-8")
    for (cell, bench), values in SCORES.items():
        write_result(cell_result_dir(report, cell, bench), run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                     evaluation=EvaluationResult(QIDS, {"ndcg@10": values}),
                     card=ProtocolCard(suite="synthetic", dataset=bench, metrics=("ndcg@10",)), manifest={})
    return root


@pytest.fixture
def unigram_cache(tmp_path, monkeypatch):
    """The corpus word counts cached under a temporary folder (not the user's harness cache)."""
    import methods.dro_shift as dro_shift

    folder = tmp_path / "unigram-cache"
    monkeypatch.setattr(dro_shift, "unigram_cache_dir", lambda cache_dir=None: folder)
    return folder


def test_layout_shows_our_similarities_and_gaps_beside_table6(tmp_path, unigram_cache):
    from harness.ablation.benchmarks import load_benchmark_ref

    suite = parse_suite(json.loads(json.dumps(SUITE)), Path("shift.yaml"))
    root = _finished(tmp_path)
    table = render_layout(suite, "tiny", root, "shift")
    assert [r.label for r in table.rows] == ["NQ", "SciFact"]
    refs = {b.id: b for b in suite.scale("tiny").benchmarks}

    def texts(bench):
        data = load_benchmark_ref(refs[bench], ["ndcg@10"]).dataset
        return data.queries.texts, [f"{t} {x}" if t else x for t, x in zip(data.corpus.titles, data.corpus.texts)]

    for row, bench in zip(table.rows, ("syn", "cjk")):
        q, d = shift_similarities(*texts("src"), *texts(bench))
        assert (row.cells["query-sim"].value, row.cells["doc-sim"].value) == pytest.approx((q, d))
        gap = SCORES[("dense", bench)].mean() - SCORES[("bm25", bench)].mean()
        assert row.cells["gap0"].value == pytest.approx(gap)
    # the synthetic domains share no words; their queries are all declarative (no English question words)
    assert [(r.cells["query-sim"].value, r.cells["doc-sim"].value) for r in table.rows] == [(1.0, 0.0), (1.0, 0.0)]
    # printed beside ours: Table 6's NQ and SciFact rows
    assert [table.rows[0].cells[k].value for k in ("query-sim-printed", "doc-sim-printed", "gap0-printed")] == \
        pytest.approx([0.5127, 0.5092, 0.174])
    assert [table.rows[1].cells[k].value for k in ("query-sim-printed", "doc-sim-printed", "gap0-printed")] == \
        pytest.approx([0.1809, 0.2335, -0.092])
    figure = layout_figure(suite, "tiny", root, "shift")
    assert len(figure.axes) == 2 and len(figure.axes[0].collections) == 2      # ours and printed


def test_corpus_unigram_counts_are_cached_by_content(tmp_path):
    from harness.data.beir import Corpus
    from methods.dro_shift import corpus_unigram_counts, unigram_cache_key

    corpus = Corpus(ids=["a", "b"], titles=["The Cat", ""], texts=["the sat", "dog-cat"])
    counts = corpus_unigram_counts(corpus, tmp_path)
    # the words of "The Cat the sat" and "dog-cat": the 2, cat 2, sat 1, dog 1 (as title + ' ' + text would give)
    assert counts == {"the": 2, "cat": 2, "sat": 1, "dog": 1}
    assert counts == unigram_distribution_counts(corpus)
    (entry,) = (tmp_path / "unigrams").iterdir()
    assert entry.name == f"{unigram_cache_key(corpus)}.json.gz"
    # the entry is what a second call returns (written here by hand: the call must read it, not count)
    import gzip
    with gzip.open(entry, "wt", encoding="utf-8") as handle:
        json.dump({"version": 1, "documents": 2, "counts": {"marker": 7}}, handle)
    assert corpus_unigram_counts(corpus, tmp_path) == {"marker": 7}
    # other content, another key: counted afresh
    other = Corpus(ids=["a", "b"], titles=["The Cat", ""], texts=["the sat", "dog cat cat"])
    assert unigram_cache_key(other) != unigram_cache_key(corpus)
    assert corpus_unigram_counts(other, tmp_path)["cat"] == 3
    assert len(list((tmp_path / "unigrams").iterdir())) == 2


def unigram_distribution_counts(corpus):
    from collections import Counter

    from methods.dro_shift import words
    return Counter(w for t, x in zip(corpus.titles, corpus.texts) for w in words(f"{t} {x}" if t else x))


def test_second_render_reads_the_cached_counts(tmp_path, unigram_cache, monkeypatch):
    import methods.dro_shift as dro_shift

    suite = parse_suite(json.loads(json.dumps(SUITE)), Path("shift.yaml"))
    root = _finished(tmp_path)
    first = render_layout(suite, "tiny", root, "shift")
    assert len(list(unigram_cache.iterdir())) == 3          # src, syn and cjk corpora, one entry each

    def no_counting(texts):
        raise AssertionError("the corpus was counted again instead of read from the cache")

    monkeypatch.setattr(dro_shift, "unigram_counts", no_counting)
    second = render_layout(suite, "tiny", root, "shift")
    assert [(r.label, {k: c.value for k, c in r.cells.items()}) for r in second.rows] == \
        [(r.label, {k: c.value for k, c in r.cells.items()}) for r in first.rows]
    assert first.rows[0].cells["doc-sim"].value == 0.0 and first.rows[0].cells["query-sim"].value == 1.0


def test_layout_options_are_checked():
    raw = json.loads(json.dumps(SUITE))
    raw["table"]["layouts"]["shift"]["options"]["source"] = "nope"
    with pytest.raises(ConfigError, match="'source' must be a benchmark"):
        load_layout(parse_suite(raw, Path("shift.yaml")), "tiny", "shift")
    raw = json.loads(json.dumps(SUITE))
    raw["table"]["layouts"]["shift"]["options"]["gaps"][0]["dense"] = "ghost"
    with pytest.raises(ConfigError, match="gap dense 'ghost' is not a variant"):
        load_layout(parse_suite(raw, Path("shift.yaml")), "tiny", "shift")


def test_alignment_and_uniformity_by_hand():
    from methods.dro_shift import alignment, uniformity

    # pairs ((1,0), (0,1)) at squared distance 2 and ((0,1), (0,1)) at 0: mean 1; rows are normalised first
    assert alignment([[3.0, 0.0], [0.0, 2.0]], [[0.0, 1.0], [0.0, 5.0]]) == pytest.approx(1.0)
    assert alignment([[1.0, 0.0]], [[0.0, 1.0]], alpha=1) == pytest.approx(2 ** 0.5)
    # (1,0), (0,1), (-1,0): squared distances 2, 4, 2 -> log((2 e^-4 + e^-8) / 3)
    expected = np.log((2 * np.exp(-4.0) + np.exp(-8.0)) / 3)
    assert uniformity([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]) == pytest.approx(expected)
    assert uniformity([[1.0, 0.0], [1.0, 0.0]]) == pytest.approx(0.0)            # collapsed: the maximum


def test_both_table6_gaps_each_beside_its_printed_column(tmp_path, unigram_cache):
    """The coco_dr suite's two gaps (ANCE from BERT-base and from coCondenser, each minus BM25): gap k is its own dense
    row minus BM25 and stands beside its own printed column of Table 6."""
    raw = json.loads(json.dumps(SUITE))
    raw["variants"].insert(1, {"id": "ance-bert", "label": "ANCE (BERT-base)", "method": "uniform"})
    raw["table"]["layouts"]["shift"]["options"]["gaps"] = [
        {"dense": "ance-bert", "sparse": "bm25", "label": "ANCE (BERT-base) - BM25", "printed": "ance-bert-vs-bm25"},
        {"dense": "dense", "sparse": "bm25", "label": "ANCE (coCondenser) - BM25",
         "printed": "ance-cocondenser-vs-bm25"}]
    suite = parse_suite(raw, Path("shift.yaml"))
    root = _finished(tmp_path)
    ance_bert = {"syn": np.linspace(0.0, 0.5, 6), "cjk": np.full(6, 0.05)}
    report = report_dir(root, "shift", "tiny")
    summary = json.loads((report / SUMMARY_FILE).read_text(encoding="utf-8"))
    summary["cells"].append({"variant": "ance-bert", "key": "ka"})
    (report / SUMMARY_FILE).write_text(json.dumps(summary), encoding="utf-8")
    for bench, values in ance_bert.items():
        write_result(cell_result_dir(report, "ance-bert", bench), run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                     evaluation=EvaluationResult(QIDS, {"ndcg@10": values}),
                     card=ProtocolCard(suite="synthetic", dataset=bench, metrics=("ndcg@10",)), manifest={})
    table = render_layout(suite, "tiny", root, "shift")
    for row, bench, printed in zip(table.rows, ("syn", "cjk"), ((0.117, 0.174), (-0.158, -0.092))):
        bm25 = SCORES[("bm25", bench)].mean()
        assert row.cells["gap0"].value == pytest.approx(ance_bert[bench].mean() - bm25)
        assert row.cells["gap1"].value == pytest.approx(SCORES[("dense", bench)].mean() - bm25)
        assert (row.cells["gap0-printed"].value, row.cells["gap1-printed"].value) == pytest.approx(printed)
    figure = layout_figure(suite, "tiny", root, "shift")
    assert len(figure.axes) == 2
