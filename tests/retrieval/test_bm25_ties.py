"""BM25 score ties: ``trec_eval`` (Lucene's exact scores) vs ``pyserini`` (Pyserini's searcher).

Oracle: Anserini's SimpleSearcher (what Pyserini's LuceneSearcher wraps) on the same
index: sort by exact score, then doc id ascending (also at the top-k cut-off), round
to 4 decimals, lower the j-th next score of a run of (nearly) equal rounded scores by
j * 1e-6, in float32.  The ``pyserini`` run must be that run, bit for bit.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from harness.cli import main
from harness.data.beir import Corpus, Queries
from harness.data.run import Run
from harness.errors import ConfigError
from harness.protocol import ProtocolCard
from harness.retrieval import bm25
from harness.retrieval.bm25 import BM25Index, bm25_search, pyserini_scores

F32 = np.float32

# Five documents with the same text, so the same score for "alpha"; indexed in an order
# that is not the id order, so Lucene's doc numbers (its tie order) differ from the ids'.
TIED = {"d9": "alpha beta", "d3": "alpha beta", "d7": "alpha beta", "d1": "alpha beta", "d5": "alpha beta",
        "x2": "beta gamma", "x1": "alpha alpha alpha gamma"}


def simple_searcher_run(index: BM25Index, queries: Queries, k: int) -> Run:
    """The run Anserini's SimpleSearcher returns on the same index (float32 scores)."""
    java = bm25._java()
    searcher = java.autoclass("io.anserini.search.SimpleSearcher")(str(index.path))
    try:
        if index.analyzer.code != "en":
            searcher.set_language(index.analyzer.code)
        searcher.set_bm25(0.9, 0.4)
        rows = [(qid, str(h.docid), float(F32(h.score)))
                for qid, text in zip(queries.ids, queries.texts) for h in searcher.search(text, k)]
    finally:
        searcher.close()
    return Run.from_arrays([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def assert_same_run(a: Run, b: Run) -> None:
    assert a.query_ids.tolist() == b.query_ids.tolist()
    assert a.doc_ids.tolist() == b.doc_ids.tolist()
    assert a.scores.tolist() == b.scores.tolist()


@pytest.fixture(scope="module")
def tied_index(tmp_path_factory):
    corpus = Corpus(list(TIED), [""] * len(TIED), list(TIED.values()))
    return BM25Index.build(corpus, index_dir=tmp_path_factory.mktemp("bm25-ties"), threads=1)


def test_pyserini_scores_by_hand():
    # Rounded to 4 decimals (0.99996 -> 1.0), then each further score of the run 1e-6 lower;
    # the run goes on into 0.9999 because 0.999998 - 0.9999 <= 1e-4: lowered by 3e-6.
    got = pyserini_scores(np.array([1.00004, 1.0, 0.99996, 0.99991, 0.5], dtype=F32))
    want = [F32(1.0), F32(1.0) - F32(1e-6), F32(1.0) - F32(2e-6), F32(0.9999) - F32(3e-6), F32(0.5)]
    assert got.dtype == np.float32
    assert got.tolist() == [float(w) for w in want]
    assert pyserini_scores(np.array([], dtype=F32)).tolist() == []
    # a gap above 1e-4 starts a new run: nothing lowered
    assert pyserini_scores(np.array([3.0, 2.5, 2.0], dtype=F32)).tolist() == [3.0, 2.5, 2.0]


def test_tie_at_the_cutoff_keeps_what_trec_eval_ranks_first(tied_index):
    queries = Queries(["q"], ["alpha"])
    exact = tied_index.search(queries, k=3, threads=1)
    pys = tied_index.search(queries, k=3, threads=1, ties="pyserini")
    assert exact.doc_ids[0] == pys.doc_ids[0] == "x1"  # tf 3: the only untied score
    tie = float(F32(exact.scores[1]))
    assert exact.scores[1] == exact.scores[2] == tie  # trec_eval: exact equal scores
    # trec_eval ranks ties by doc id descending: d9 and d7 (not Lucene's first-indexed d9 and d3) ...
    assert sorted(exact.doc_ids[1:].tolist()) == ["d7", "d9"]
    # ... Pyserini the two lowest ids, d1 then d3, the second 1e-6 lower after rounding.
    assert pys.doc_ids[1:].tolist() == ["d1", "d3"]
    rounded = F32(round(tie, 4))
    assert pys.scores[1:].tolist() == [float(rounded), float(rounded - F32(1e-6))]
    assert_same_run(pys, simple_searcher_run(tied_index, queries, 3))


def test_the_cut_does_not_depend_on_the_index_build_order(tied_index, tmp_path):
    # the same documents indexed in the reverse order: Lucene numbers them differently, the runs are equal
    reverse = dict(reversed(list(TIED.items())))
    other = BM25Index.build(Corpus(list(reverse), [""] * len(reverse), list(reverse.values())),
                            index_dir=tmp_path, threads=1)
    queries = Queries(["q1", "q2"], ["alpha", "beta"])
    for k in (1, 2, 3, 4):
        a, b = tied_index.search(queries, k=k, threads=1), other.search(queries, k=k, threads=1)
        assert sorted(zip(a.query_ids, a.doc_ids, a.scores)) == sorted(zip(b.query_ids, b.doc_ids, b.scores))


@pytest.mark.parametrize("k", [1, 2, 4, 5, 6, 10])
def test_pyserini_ties_equal_anserinis_searcher_at_every_depth(tied_index, k):
    queries = Queries(["q1", "q2", "q3"], ["alpha", "beta", "alpha gamma"])
    assert_same_run(tied_index.search(queries, k=k, ties="pyserini", threads=2),
                    simple_searcher_run(tied_index, queries, k))


def test_unknown_ties_are_refused_before_any_work(tmp_path, tied_index):
    with pytest.raises(ConfigError, match="ties must be one of trec_eval, pyserini, got 'lucene'"):
        tied_index.search(Queries(["q"], ["alpha"]), ties="lucene")
    with pytest.raises(ConfigError, match="ties must be one of"):
        bm25_search(Corpus(["a"], [""], ["alpha"]), Queries(["q"], ["alpha"]), ties="", index_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_card_records_ties_and_keeps_old_fingerprints():
    card = ProtocolCard(dataset="scifact")
    assert card.bm25_ties == "trec_eval" and card.to_dict()["bm25_ties"] == "trec_eval"
    # A card stored before the field existed reads back with the default and the same fingerprint.
    old = {k: v for k, v in card.to_dict().items() if k != "bm25_ties"}
    assert ProtocolCard.from_dict(old) == card
    old.pop("notes")
    before = hashlib.sha256(json.dumps(old, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
    assert card.fingerprint() == before  # the fingerprint of the same card without the field
    pys = card.with_(bm25_ties="pyserini")
    assert pys.fingerprint() != card.fingerprint()
    from harness.protocol import card_differences

    assert card_differences(card, pys) == {"bm25_ties": ("trec_eval", "pyserini")}
    with pytest.raises(ConfigError, match="bm25_ties must be one of trec_eval, pyserini"):
        card.with_(bm25_ties="ascending")


@pytest.mark.needs_shared
def test_pyserini_ties_equal_anserinis_searcher_on_scifact(shared_data, tmp_path):
    """800 SciFact documents, 60 queries, depth 20: cut-off ties included, bit for bit."""
    from harness.data import load_beir

    data = load_beir(shared_data / "scifact", "test")
    corpus = data.corpus.subset(data.corpus.ids[:800])
    queries = Queries(data.queries.ids[:60], data.queries.texts[:60])
    index = BM25Index.build(corpus, index_dir=tmp_path)
    pys = index.search(queries, k=20, ties="pyserini")
    assert_same_run(pys, simple_searcher_run(index, queries, 20))
    exact = index.search(queries, k=20)
    assert len(exact) == len(pys)
    assert not np.array_equal(exact.scores, pys.scores)  # 4-decimal scores


# nDCG@10 with each tie rule: (trec_eval, pyserini).  The pyserini numbers are those of
# Pyserini's own searcher on the same subsets (checked bit for bit in the same test).
NDCG10 = {
    "te": (0.5465, 0.5426), "ar": (0.7928, 0.7989), "id": (0.8084, 0.8084),
    "sw": (0.5989, 0.5989), "yo": (0.5095, 0.5095), "zh": (0.4385, 0.4385),
}


@pytest.mark.slow
@pytest.mark.needs_shared
@pytest.mark.parametrize("language", sorted(NDCG10))
def test_miracl_subsets_reproduce_pyserini(shared_data, tmp_path, language):
    from harness.benchmark import get_suite
    from harness.pipeline import load_benchmark

    loaded = load_benchmark(shared_data / "miracl-dev-subset" / language, "miracl", language=language)
    suite = get_suite("miracl")
    index = BM25Index.build(loaded.dataset.corpus, language=language, index_dir=tmp_path)
    exact = index.search(loaded.dataset.queries, k=1000)
    pys = index.search(loaded.dataset.queries, k=1000, ties="pyserini")
    assert_same_run(pys, simple_searcher_run(index, loaded.dataset.queries, 1000))
    got = tuple(suite.evaluate(loaded, run).aggregate["ndcg@10"] for run in (exact, pys))
    print(f"MIRACL {language} BM25 nDCG@10: trec_eval ties {got[0]:.6f}, pyserini ties {got[1]:.6f}")
    assert got == pytest.approx(NDCG10[language], abs=5e-5)


@pytest.mark.slow
@pytest.mark.needs_shared
@pytest.mark.parametrize("ties, language, want", [("pyserini", "te", 0.5426), ("trec_eval", "te", 0.5465),
                                                  ("pyserini", "ar", 0.7989)])
def test_eval_cli_records_the_tie_rule(shared_data, tmp_path, ties, language, want):
    out = tmp_path / "result"
    argv = ["eval", "--model", "bm25", "--suite", "miracl", "--dataset-dir",
            str(shared_data / "miracl-dev-subset" / language), "--out", str(out), "-m", "ndcg@10",
            "--cache-dir", str(tmp_path / "cache"), "--format", "json"]
    assert main(argv + (["--bm25-ties", ties] if ties != "trec_eval" else [])) == 0
    from harness.store import load_result

    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["card"]["bm25_ties"] == ties
    stored = load_result(out)
    assert stored.card.bm25_ties == ties
    assert stored.metrics["ndcg@10"] == pytest.approx(want, abs=5e-5)


@pytest.mark.slow
@pytest.mark.needs_shared
def test_scifact_reproduces_pyserini_with_either_tie_rule(shared_data, tmp_path):
    from harness.benchmark import get_suite
    from harness.pipeline import load_benchmark

    loaded = load_benchmark(shared_data / "scifact", "beir")
    index = BM25Index.build(loaded.dataset.corpus, index_dir=tmp_path)
    runs = {ties: index.search(loaded.dataset.queries, k=1000, ties=ties) for ties in ("trec_eval", "pyserini")}
    assert_same_run(runs["pyserini"], simple_searcher_run(index, loaded.dataset.queries, 1000))
    loaded.card = loaded.card.with_(metrics=("ndcg@10",))
    for ties, run in runs.items():
        assert get_suite("beir").evaluate(loaded, run).aggregate["ndcg@10"] == pytest.approx(0.6789, abs=5e-5), ties


@pytest.mark.needs_shared
def test_suite_files_select_the_tie_rule_as_a_benchmark_option(shared_data):
    """A suite file's benchmark ``options: {bm25_ties: pyserini}`` reaches the card through suite.load."""
    from harness.benchmark import get_suite

    suite = get_suite("miracl")
    folder = shared_data / "miracl-dev-subset" / "te"
    options = suite.parse_options({"bm25_ties": "pyserini"})
    assert suite.load(folder, **options).card.bm25_ties == "pyserini"
    assert suite.load(folder).card.bm25_ties == "trec_eval"
    with pytest.raises(ConfigError, match="bm25_ties must be one of"):
        suite.load(folder, bm25_ties="descending")
