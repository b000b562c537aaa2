"""BM25 through Lucene: scores against a hand/numpy computation, analyzers, cache, errors.

Oracle: Lucene's BM25Similarity (Lucene 8+ drops the constant (k1 + 1) factor)::

    idf(t)      = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(q, d) = sum over query terms t of  count_q(t) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

with N the number of documents, dl the document's token count and avgdl the mean
token count.  Lucene stores dl in one byte (SmallFloat.intToByte4): exact up to 39
tokens, then only 4 significant bits, so long documents score slightly differently
from the exact-length formula; ``test_long_documents_*`` measures that.
"""
from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import pytest
from optional_extras import require_extra

from harness.data.beir import Corpus, Queries
from harness.errors import ConfigError, InputError
from harness.retrieval import bm25
from harness.retrieval.bm25 import ANALYZERS, BM25Index, analyze, bm25_search, resolve_language

# Float32 arithmetic in Lucene vs float64 here: the largest relative difference measured
# on these corpora is 1.3e-7; the tolerance leaves a margin of about eight.
SCORE_RTOL = 1e-6

TINY_DOCS = {  # id: (title, text); every token is its own Porter stem and no stop word
    "d1": ("alpha", "beta gamma"),
    "d2": ("", "alpha alpha delta"),
    "d3": ("gamma gamma", "gamma omega kappa sigma"),
    "d4": ("", "beta delta delta delta zeta theta alpha"),
    "d5": ("", "omega"),
}
TINY_QUERIES = {
    "q1": "alpha",
    "q2": "alpha beta",
    "q3": "gamma gamma omega",   # a repeated query term counts twice
    "q4": "delta zeta kappa",
    "q5": "The ALPHA, of beta!",  # stop words, case and punctuation are the analyzer's job
    "q6": "the of and",           # nothing left after analysis: no hits
}


def make_corpus(docs: dict[str, tuple[str, str]]) -> Corpus:
    return Corpus(list(docs), [t for t, _ in docs.values()], [x for _, x in docs.values()])


def make_queries(queries: dict[str, str]) -> Queries:
    return Queries(list(queries), list(queries.values()))


def bm25_oracle(doc_tokens: dict[str, list[str]], query_tokens: list[str], k1: float, b: float,
                lengths: dict[str, float] | None = None) -> dict[str, float]:
    """BM25 of every matching document, from the formula in the module docstring."""
    n = len(doc_tokens)
    avgdl = sum(len(t) for t in doc_tokens.values()) / n
    df = Counter(term for tokens in doc_tokens.values() for term in set(tokens))
    scores: dict[str, float] = {}
    for doc, tokens in doc_tokens.items():
        tf = Counter(tokens)
        dl = lengths[doc] if lengths else len(tokens)
        total = 0.0
        for term, count in Counter(query_tokens).items():
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                total += count * idf * tf[term] / (tf[term] + k1 * (1 - b + b * dl / avgdl))
        if total > 0:
            scores[doc] = total
    return scores


def run_scores(run, qid: str) -> dict[str, float]:
    return {d: s for q, d, s in zip(run.query_ids, run.doc_ids, run.scores) if q == qid}


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("bm25-cache")


@pytest.fixture(scope="module")
def tiny_index(cache_root):
    return BM25Index.build(make_corpus(TINY_DOCS), language="en", index_dir=cache_root)


def test_tokens_of_the_tiny_corpus_are_unchanged_by_the_english_analyzer():
    # Precondition of the oracle: whitespace splitting gives Lucene's tokens.
    for title, text in TINY_DOCS.values():
        passage = f"{title} {text}".strip()
        assert analyze(passage, "en") == passage.split()
    assert analyze(TINY_QUERIES["q5"], "en") == ["alpha", "beta"]
    assert analyze(TINY_QUERIES["q6"], "en") == []


@pytest.mark.parametrize("k1, b", [(0.9, 0.4), (1.2, 0.75), (0.0, 0.0), (2.0, 1.0)])
def test_scores_match_the_bm25_formula(tiny_index, k1, b):
    run = tiny_index.search(make_queries(TINY_QUERIES), k=10, k1=k1, b=b)
    doc_tokens = {d: f"{t} {x}".split() for d, (t, x) in TINY_DOCS.items()}
    for qid, text in TINY_QUERIES.items():
        expected = bm25_oracle(doc_tokens, analyze(text, "en"), k1, b)
        got = run_scores(run, qid)
        assert set(got) == set(expected), qid
        for doc, score in expected.items():
            assert got[doc] == pytest.approx(score, rel=SCORE_RTOL), (qid, doc)


def test_hand_computed_values(tiny_index):
    # q1 "alpha" with k1=0.9, b=0.4: df=3 of N=5 -> idf = ln(1 + 2.5/3.5) = 0.5389965;
    # avgdl = (3+3+6+7+1)/5 = 4; d2 has tf=2, dl=3: 2 / (2 + 0.9 * (0.6 + 0.4 * 3/4)) = 0.7117438.
    run = tiny_index.search(make_queries({"q1": "alpha"}), k=10)
    scores = run_scores(run, "q1")
    assert scores["d2"] == pytest.approx(0.5389965 * 0.7117438, rel=1e-6)
    assert list(run.doc_ids) == ["d2", "d1", "d4"]  # d1 (dl 3) beats d4 (dl 7) at tf 1
    assert scores["d1"] == pytest.approx(0.5389965 * 1 / (1 + 0.9 * (0.6 + 0.4 * 3 / 4)), rel=1e-6)


def test_title_is_indexed_with_the_text(tiny_index):
    # "alpha" occurs in d1 only through its title.
    run = tiny_index.search(make_queries({"q": "alpha"}), k=10)
    assert "d1" in set(run.doc_ids)


def test_query_without_terms_has_no_rows_and_run_is_in_trec_eval_order(tiny_index):
    run = tiny_index.search(make_queries(TINY_QUERIES), k=2)
    assert "q6" not in set(run.query_ids)
    assert sorted(set(run.query_ids)) == ["q1", "q2", "q3", "q4", "q5"]
    for _, docs, scores in run.groups():
        assert len(docs) <= 2
        assert np.all(np.diff(scores) <= 0)


def test_threads_do_not_change_the_run(tiny_index):
    queries = make_queries(TINY_QUERIES)
    one, two = tiny_index.search(queries, threads=1), tiny_index.search(queries, threads=4)
    assert one.query_ids.tolist() == two.query_ids.tolist()
    assert one.doc_ids.tolist() == two.doc_ids.tolist()
    assert one.scores.tolist() == two.scores.tolist()


def test_no_queries_give_an_empty_run(tiny_index):
    run = tiny_index.search(Queries([], []), k=10)
    assert len(run) == 0


def test_documents_without_text_are_skipped(tmp_path):
    docs = {**TINY_DOCS, "blank": ("", "")}
    index = BM25Index.build(make_corpus(docs), index_dir=tmp_path)
    assert index.num_docs == len(TINY_DOCS)
    assert "blank" not in set(index.docids().tolist())
    run = index.search(make_queries({"q1": "alpha"}), k=10)
    assert list(run.doc_ids) == ["d2", "d1", "d4"]


def lucene_length(n: int) -> int:
    """Document length after Lucene's one-byte norm encoding (SmallFloat.intToByte4, byte4ToInt)."""
    free = 24  # byte values below this store the length itself
    if n < free:
        return n
    rest = n - free
    bits = rest.bit_length()
    if bits < 4:
        return n
    shift = bits - 4
    return free + ((rest >> shift) << shift)  # keep the 4 leading bits of (n - 24)


def test_length_encoding_reimplementation_matches_lucene():
    java = bm25._java()
    small_float = java.autoclass("org.apache.lucene.util.SmallFloat")
    lengths = list(range(0, 2000)) + [5_000, 65_535, 1_000_000, 2**31 - 1]
    decoded = [small_float.byte4ToInt(small_float.intToByte4(n)) for n in lengths]
    assert decoded == [lucene_length(n) for n in lengths]
    assert all(lucene_length(n) == n for n in range(40))  # exact up to 39 tokens


@pytest.fixture(scope="module")
def long_docs():
    rng = np.random.default_rng(7)
    docs = {}
    for i in range(60):
        length = int(rng.integers(1, 400))
        tf = int(rng.integers(1, min(length, 12) + 1))
        docs[f"long{i:02d}"] = ("", " ".join(["alpha"] * tf + ["filler"] * (length - tf)))
    return docs


def test_long_documents_match_the_formula_with_lucene_lengths(cache_root, long_docs):
    index = BM25Index.build(make_corpus(long_docs), index_dir=cache_root)
    got = run_scores(index.search(make_queries({"q": "alpha"}), k=100), "q")
    tokens = {d: x.split() for d, (_, x) in long_docs.items()}
    encoded = bm25_oracle(tokens, ["alpha"], 0.9, 0.4, lengths={d: lucene_length(len(t)) for d, t in tokens.items()})
    exact = bm25_oracle(tokens, ["alpha"], 0.9, 0.4)
    assert set(got) == set(encoded) == set(exact) == set(long_docs)
    for doc in long_docs:
        assert got[doc] == pytest.approx(encoded[doc], rel=SCORE_RTOL), doc
    # With exact lengths instead, the lossy norm shows: measured max relative difference
    # 0.016 on this corpus (lengths up to 397; a stored length is at most 1/8 too short).
    worst = max(abs(got[d] - exact[d]) / exact[d] for d in long_docs)
    assert 1e-3 < worst < 0.05


@pytest.mark.parametrize("language, docs, query, expected", [
    ("zh", ["中国的首都是北京", "上海是中国最大的城市", "东京是日本的首都"], "北京", ["0"]),
    ("zh", ["中国的首都是北京", "上海是中国最大的城市", "东京是日本的首都"], "首都", ["0", "2"]),
    ("ja", ["日本の首都は東京です", "京都は古い都です", "大阪は大きな町です"], "東京", ["0"]),
    ("ko", ["대한민국의 수도는 서울이다", "부산은 항구 도시이다"], "서울", ["0"]),
    ("ar", ["عاصمة مصر هي القاهرة", "الرياض عاصمة السعودية"], "القاهرة", ["0"]),
])
def test_language_analyzers_find_words_in_unsegmented_text(cache_root, language, docs, query, expected):
    corpus = Corpus([str(i) for i in range(len(docs))], [""] * len(docs), docs)
    run = bm25_search(corpus, make_queries({"q": query}), k=10, language=language, index_dir=cache_root)
    assert sorted(run.doc_ids.tolist()) == expected


def test_whitespace_analyzer_cannot_split_chinese(cache_root):
    # The trap of unsegmented scripts: one whitespace "token" per sentence, so no match.
    corpus = Corpus(["0"], [""], ["中国的首都是北京"])
    assert len(bm25_search(corpus, make_queries({"q": "北京"}), language="sw", index_dir=cache_root)) == 0
    assert analyze("中国的首都是北京", "zh") == ["中国", "国的", "的首", "首都", "都是", "是北", "北京"]


@pytest.mark.parametrize("given, code", [("en", "en"), ("ZH", "zh"), ("zh_cn", "zh"), ("zh-TW", "zh"),
                                         ("pt-BR", "pt"), ("Chinese", "zh"), ("nb", "no"), (" te ", "te"),
                                         ("yo", "yo"), ("sw", "sw")])
def test_language_codes_resolve(given, code):
    assert resolve_language(given).code == code


def test_miracl_languages_are_all_supported():
    miracl = "ar bn en es fa fi fr hi id ja ko ru sw te th zh de yo".split()
    assert all(resolve_language(code).code == code for code in miracl)


@pytest.mark.parametrize("code", ["xx", "klingon", "", "ms"])
def test_unsupported_language_is_a_config_error_before_any_work(tmp_path, code):
    with pytest.raises(ConfigError, match="no analyzer for language") as err:
        bm25_search(make_corpus(TINY_DOCS), make_queries(TINY_QUERIES), language=code, index_dir=tmp_path / "c")
    assert "supported: ar, bn" in str(err.value)
    assert not (tmp_path / "c").exists()


def test_analyzer_table_matches_anserini():
    """Index (Anserini's SimpleIndexer) and search (here) must use the same analyzer class."""
    java = bm25._java()
    anserini_map = java.AnalyzerMap.analyzerMap
    for code, analyzer in ANALYZERS.items():
        if analyzer.index_args == ("-language", code):
            assert str(anserini_map.get(code)) == analyzer.lucene_class, code
        else:  # English default and whitespace languages are not in Anserini's map
            assert not anserini_map.containsKey(code), code
        if code == "th":
            continue  # needs a runtime with Thai segmentation; see the next test
        assert bm25.lucene_analyzer(analyzer).getClass().getName() == analyzer.lucene_class


def test_thai_works_or_fails_with_a_clear_message():
    try:
        tokens = analyze("ภาษาไทยเป็นภาษาราชการ", "th")
    except ConfigError as err:
        assert "Thai word segmentation" in str(err)
    else:
        assert len(tokens) > 1


def test_index_is_cached_and_reused(tmp_path, monkeypatch):
    corpus = make_corpus(TINY_DOCS)
    start = time.perf_counter()
    first = BM25Index.build(corpus, index_dir=tmp_path)
    build_s = time.perf_counter() - start
    assert first.built_now
    files = {p.name: p.stat().st_mtime_ns for p in first.path.iterdir()}

    def must_not_index(*args, **kwargs):
        raise AssertionError("re-indexed a cached corpus")

    monkeypatch.setattr(bm25, "_write_index", must_not_index)
    start = time.perf_counter()
    second = BM25Index.build(corpus, index_dir=tmp_path)
    reuse_s = time.perf_counter() - start
    assert second.path == first.path and not second.built_now
    assert {p.name: p.stat().st_mtime_ns for p in second.path.iterdir()} == files
    assert reuse_s < build_s
    print(f"tiny corpus: build {build_s:.3f} s, cached reuse {reuse_s:.4f} s")
    assert second.meta["key"]["corpus_hash"] == corpus.content_hash()
    assert second.meta["indexed_docs"] == len(corpus)
    assert sorted(second.docids().tolist()) == sorted(TINY_DOCS)


def test_cache_key_changes_with_corpus_and_language(tmp_path):
    corpus = make_corpus(TINY_DOCS)
    changed = make_corpus({**TINY_DOCS, "d5": ("", "omega omega")})
    paths = {BM25Index.build(corpus, index_dir=tmp_path).path,
             BM25Index.build(changed, index_dir=tmp_path).path,
             BM25Index.build(corpus, language="de", index_dir=tmp_path).path}
    assert len(paths) == 3
    assert sorted(p.name[:3] for p in paths) == ["de-", "en-", "en-"]


def test_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    duplicated = Corpus(["a", "b", "a"], ["", "", ""], ["alpha", "beta", "gamma"], source="corpus.jsonl")
    with pytest.raises(InputError, match="corpus.jsonl: corpus has duplicate document ids"):
        BM25Index.build(duplicated, index_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []

    from pyserini.index.lucene import LuceneIndexer

    def crash(self, docs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(LuceneIndexer, "add_batch_raw", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        BM25Index.build(make_corpus(TINY_DOCS), index_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    assert BM25Index.build(make_corpus(TINY_DOCS), index_dir=tmp_path).built_now


@pytest.mark.parametrize("kwargs", [{"k": 0}, {"k": 2.5}, {"k1": -1.0}, {"b": 1.5}, {"b": float("nan")}])
def test_bad_search_parameters(tiny_index, kwargs):
    with pytest.raises(ConfigError):
        tiny_index.search(make_queries(TINY_QUERIES), **kwargs)


def test_not_an_index(tmp_path):
    with pytest.raises(InputError, match="not a harness BM25 index"):
        BM25Index(tmp_path)


def anserini_tie_adjusted(scores: dict[str, float]) -> dict[str, float]:
    """What Anserini's SimpleSearcher reports for the same hits (its ScoreTiesAdjusterReranker).

    Hits sorted by score, then doc id ascending; each score rounded to 4 decimals; inside
    a run of (nearly) equal rounded scores the j-th next one is lowered by j * 1e-6.
    All arithmetic in float32, as in Java.
    """
    order = sorted(scores, key=lambda d: (-scores[d], d))
    out = np.array([scores[d] for d in order], dtype=np.float32)
    run = 0
    for i in range(len(out)):
        out[i] = np.float32(math.floor(float(out[i]) * 10000.0 + 0.5) / 10000.0)
        if i == 0 or out[i - 1] - out[i] > np.float32(1e-4):
            run = 0
        else:
            run += 1
            out[i] = out[i] - np.float32(1e-6) * np.float32(run)
    return {d: float(v) for d, v in zip(order, out)}


def test_same_results_as_anserinis_searcher_on_real_data(shared_data, cache_root):
    """Parity with Anserini's SimpleSearcher (what Pyserini's LuceneSearcher wraps) on SciFact.

    Same documents and, once Anserini's score rounding is applied to ours, bit-identical
    float32 scores.  The harness keeps Lucene's exact scores (ties broken as trec_eval does).
    """
    from harness.data import load_beir

    data = load_beir(shared_data / "scifact", "test")
    corpus = data.corpus.subset(data.corpus.ids[:800])
    queries = Queries(data.queries.ids[:60], data.queries.texts[:60])
    index = BM25Index.build(corpus, index_dir=cache_root)
    ours = index.search(queries, k=1000)  # k above the corpus size: every match, no cut-off ties
    java = bm25._java()
    searcher = java.autoclass("io.anserini.search.SimpleSearcher")(str(index.path))
    searcher.set_bm25(0.9, 0.4)
    compared = rounded_ties = 0
    for qid, text in zip(queries.ids, queries.texts):
        theirs = {str(h.docid): float(np.float32(h.score)) for h in searcher.search(text, 1000)}
        mine = run_scores(ours, qid)
        assert set(mine) == set(theirs), qid
        assert anserini_tie_adjusted(mine) == theirs, qid
        compared += len(mine)
        rounded_ties += len(mine) - len({round(v, 4) for v in mine.values()})
    searcher.close()
    assert compared > 10_000
    assert rounded_ties > 0  # the adjustment was exercised


def mean_metric(qrels, run, measure: str, key: str) -> tuple[float, int]:
    """trec_eval's mean over the queries in both run and qrels, through pytrec_eval."""
    pytrec_eval = require_extra("pytrec_eval")
    per_query = pytrec_eval.RelevanceEvaluator(qrels.to_dict(), {measure}).evaluate(run.to_dict())
    return float(np.mean([v[key] for v in per_query.values()])), len(per_query)


@pytest.mark.slow
def test_scifact_reproduces_pyserini_bm25_flat(shared_data, tmp_path):
    """Published Pyserini BM25 flat on BEIR SciFact: nDCG@10 0.679, Recall@100 0.925."""
    from harness.data import load_beir

    data = load_beir(shared_data / "scifact", "test")
    start = time.perf_counter()
    index = BM25Index.build(data.corpus, index_dir=tmp_path)
    index_s = time.perf_counter() - start
    start = time.perf_counter()
    run = index.search(data.queries, k=1000)
    search_s = time.perf_counter() - start
    ndcg, n = mean_metric(data.qrels, run, "ndcg_cut.10", "ndcg_cut_10")
    recall, _ = mean_metric(data.qrels, run, "recall.100", "recall_100")
    print(f"SciFact BM25: nDCG@10 {ndcg:.6f}, Recall@100 {recall:.6f} over {n} queries; "
          f"index {index_s:.1f} s ({len(data.corpus)} docs), "
          f"search {search_s:.2f} s ({len(data.queries)} queries, k=1000)")
    assert n == 300
    assert ndcg == pytest.approx(0.679, abs=0.002)
    assert recall == pytest.approx(0.925, abs=0.002)
