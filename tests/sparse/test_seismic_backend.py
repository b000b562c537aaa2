"""The ``seismic`` backend: approximate search (pyseismic-lsr) with its recall against ``exact`` recorded."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from optional_extras import require_extra
from sparse_fakes import TableEncoder

from harness.encoders.sparse_cache import encode_corpus_sparse
from harness.errors import ConfigError
from harness.retrieval.seismic import DEFAULT_OPTIONS, check_options, parse_backend, recall_against, seismic_search
from harness.retrieval.sparse import check_backend, exact_sparse_search, sparse_search

require_extra("seismic")


def as_dict(run):
    return {(q, d): s for q, d, s in zip(run.query_ids, run.doc_ids, run.scores)}


@pytest.fixture
def larger_world():
    """1500 documents and 40 queries over 300 terms with Zipf-like term use (deterministic)."""
    from harness.data import Corpus
    from harness.data.beir import Queries

    rng = np.random.default_rng(11)
    vocab = [f"t{i}" for i in range(300)]
    p = 1.0 / np.arange(1, 301)
    p /= p.sum()

    def row(n_terms: int) -> list[float]:
        w = np.zeros(300)
        terms = rng.choice(300, size=n_terms, replace=False, p=p)
        w[terms] = np.round(rng.gamma(1.5, 0.8, size=n_terms) + 0.01, 3)
        return [float(x) for x in w]

    docs = {f"doc {i}": row(30) for i in range(1500)}
    queries = {f"query {i}": row(12) for i in range(40)}
    corpus = Corpus([f"d{i}" for i in range(1500)], [""] * 1500, list(docs))
    qs = Queries([f"q{i}" for i in range(40)], list(queries))
    return TableEncoder({**docs, **queries}, vocab), corpus, qs


def test_generous_settings_find_the_exact_top_k_with_the_exact_scores(random_world, tmp_path):
    encoder, corpus, queries = random_world
    docs = encode_corpus_sparse(encoder, corpus, tmp_path, shard_size=16, progress=False)   # 3 shards
    qvec = encoder.encode_queries(queries.texts)
    exact = exact_sparse_search(docs, qvec, queries.ids, k=5)
    run, info = seismic_search(docs, qvec, queries.ids, k=5, cache_dir=tmp_path,
                               options={"query_cut": 50, "heap_factor": 1.0, "summary_energy": 1.0})
    got, want = as_dict(run), as_dict(exact)
    assert recall_against(exact, run, 5) == {"recall@5": 1.0}
    assert got.keys() == want.keys()
    # 16-bit float weights in the index: scores agree to about three decimals
    for pair, score in want.items():
        assert got[pair] == pytest.approx(score, rel=5e-3)
    assert info["options"]["query_cut"] == 50 and info["index_bytes"] > 0


def test_recorded_recall_is_the_overlap_with_exact_and_drops_with_aggressive_settings(larger_world, tmp_path):
    encoder, corpus, queries = larger_world
    recalls = {}
    for backend in ("seismic", "seismic:n_postings=40,query_cut=2,heap_factor=0.5,summary_energy=0.2"):
        run, info = sparse_search(encoder, corpus, queries, k=100, backend=backend, cache_dir=tmp_path,
                                  progress=False)
        exact, _ = sparse_search(encoder, corpus, queries, k=100, cache_dir=tmp_path, progress=False)
        # recall@10 and @100 by hand: top-d sets of both runs, per query
        for depth in (10, 100):
            shares = []
            for qid, ref_docs in exact.to_dict().items():
                top = set(sorted(ref_docs, key=lambda d: (-ref_docs[d], d))[:depth])
                mine = run.to_dict().get(qid, {})
                shares.append(len(top & set(sorted(mine, key=lambda d: (-mine[d], d))[:depth])) / len(top))
            assert info["recall_vs_exact"][f"recall@{depth}"] == pytest.approx(np.mean(shares), abs=1e-6)
        assert set(info["recall_vs_exact"]) == {"recall@10", "recall@100"}
        assert info["backend"] == "seismic" and info["timings"]["queries_per_s"] > 0
        recalls[backend] = info["recall_vs_exact"]["recall@100"]
        assert info["seismic"] == check_options(parse_backend(backend)[1])
    default, aggressive = recalls.values()
    assert default > 0.95
    assert aggressive < default - 0.05        # two query terms and 40 postings per term lose documents


def test_the_index_is_built_once_and_reused(random_world, tmp_path):
    encoder, corpus, queries = random_world
    first, info1 = sparse_search(encoder, corpus, queries, k=10, backend="seismic", cache_dir=tmp_path,
                                 progress=False)
    second, info2 = sparse_search(encoder, corpus, queries, k=10, backend="seismic:query_cut=3",
                                  cache_dir=tmp_path, progress=False)
    assert len(list((tmp_path / "seismic").iterdir())) == 1    # search options do not change the index
    assert info1["index_seconds"] == info2["index_seconds"]
    again, _ = sparse_search(encoder, corpus, queries, k=10, backend="seismic", cache_dir=tmp_path, progress=False)
    assert as_dict(again) == as_dict(first)                      # same index, same search: same run
    sparse_search(encoder, corpus, queries, k=10, backend="seismic:n_postings=5", cache_dir=tmp_path,
                  progress=False)
    assert len(list((tmp_path / "seismic").iterdir())) == 2


def test_a_missing_package_is_refused_before_encoding(random_world, tmp_path, monkeypatch):
    encoder, corpus, queries = random_world
    monkeypatch.setitem(sys.modules, "seismic", None)         # import seismic -> ImportError
    with pytest.raises(ConfigError, match="install the seismic extra"):
        sparse_search(encoder, corpus, queries, backend="seismic", cache_dir=tmp_path, progress=False)
    assert encoder.doc_calls == 0
    check_backend("exact")          # the other backends do not need it


@pytest.mark.parametrize("backend, options, message", [
    ("seismic:n_posting=10", None, "unknown seismic option 'n_posting'.*n_postings \\(default 3500\\)"),
    ("seismic:query_cut=2.5", None, "query_cut: expected an integer"),
    ("seismic:heap_factor=0", None, "heap_factor=0.0 is out of range"),
    ("seismic:heap_factor", None, "expected seismic:key=value"),
    ("seismic:query_cut=3", {"query_cut": 4}, "given both inline and as backend options"),
    ("seismic", {"centroid_fraction": "lots"}, "centroid_fraction: expected a number"),
    ("exact:query_cut=3", None, "'exact' takes no options"),
    ("seismik", None, "unknown sparse retrieval backend 'seismik'; choose one of exact, lucene-impact, seismic"),
])
def test_bad_backends_and_options_are_refused_with_the_choices(backend, options, message):
    with pytest.raises(ConfigError, match=message):
        check_backend(backend, options=options)


def test_options_default_and_convert():
    assert check_options(None) == DEFAULT_OPTIONS
    assert parse_backend("seismic: query_cut = 20 ,heap_factor=0.9") == ("seismic",
                                                                          {"query_cut": "20", "heap_factor": "0.9"})
    name, opts = check_backend("seismic:query_cut=20,heap_factor=0.9")
    assert name == "seismic" and opts["query_cut"] == 20 and opts["heap_factor"] == 0.9
    assert opts["n_postings"] == DEFAULT_OPTIONS["n_postings"]


def test_the_library_progress_stays_off_stdout(tmp_path):
    """Seismic prints while building; a ``--format json`` caller's stdout must hold only its own output."""
    import subprocess
    import textwrap

    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        from harness.data import Corpus
        from harness.data.beir import Queries
        sys.path.insert(0, sys.argv[2])
        from sparse_fakes import TableEncoder
        from harness.retrieval.sparse import sparse_search

        table = {"a": [1.0, 0.5, 0.0], "b": [0.0, 1.0, 2.0], "q": [1.0, 1.0, 0.0]}
        enc = TableEncoder(table, ["x", "y", "z"])
        run, info = sparse_search(enc, Corpus(["1", "2"], ["", ""], ["a", "b"]), Queries(["q1"], ["q"]),
                                  backend="seismic", cache_dir=sys.argv[1], progress=False)
        print(json.dumps({"docs": list(run.doc_ids), "recall": info["recall_vs_exact"]}))
    """)
    from pathlib import Path

    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(here)], capture_output=True, text=True,
                          timeout=120, cwd=here.parents[1])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"docs": ["1", "2"], "recall": {"recall@10": 1.0, "recall@100": 1.0,
                                                                      "recall@1000": 1.0}}
    assert "Building the index" in done.stderr
