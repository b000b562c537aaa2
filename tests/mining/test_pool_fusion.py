"""Rank fusion of candidate sources when a source retrieves nothing for some queries (BM25 on a
query its analyzer reduces to nothing): ranx fuses runs over the same queries only."""
from __future__ import annotations

import numpy as np
from mining_util import SaltEncoder
from test_pool import CORPUS, QUERIES, collect

from harness.retrieval.pool import CandidatePool, DenseSource


def test_a_query_one_source_misses_is_fused_over_the_others(tmp_path, monkeypatch):
    from harness.data.run import Run

    names = ("a", "b", "c")
    pool = CandidatePool([DenseSource(SaltEncoder(n), n) for n in names], CORPUS, depth=8, fusion="rrf",
                         cache_dir=tmp_path)
    real = pool._search

    def search(source, queries, k):
        run = real(source, queries, k)
        if source.name == "a":
            return run
        drop = {"c": {"q0", "q1"}, "b": {"q1"}}[source.name]     # q0: a + b; q1: a alone
        d = run.to_dict()
        return Run.from_dict({q: v for q, v in d.items() if q not in drop}, name=source.name)

    monkeypatch.setattr(pool, "_search", search)
    got = collect(pool, positives={})
    assert set(got) == set(QUERIES.ids)

    def fused(members, tag):
        pair = CandidatePool([DenseSource(SaltEncoder(n), n) for n in members], CORPUS, depth=8, fusion="rrf",
                             cache_dir=tmp_path / tag)
        return collect(pair, positives={})

    ab, abc = fused(("a", "b"), "ab"), fused(names, "abc")
    alone = collect(CandidatePool([DenseSource(SaltEncoder("a"), "a")], CORPUS, depth=8, cache_dir=tmp_path / "a"),
                    positives={})
    assert got["q0"][0] == ab["q0"][0] and np.allclose(got["q0"][1], ab["q0"][1])     # RRF of a and b
    assert got["q1"][0] == alone["q1"][0]                                             # a's own list
    for q in QUERIES.ids[2:]:
        assert got[q][0] == abc[q][0] and np.allclose(got[q][1], abc[q][1])
    assert np.isnan(got["q0"][2][:, 2]).all()                  # c retrieved nothing for q0
