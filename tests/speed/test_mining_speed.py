"""Mining throughput on SciFact train (809 queries over the 5,183-document corpus) against
sentence-transformers' ``mine_hard_negatives``, with the same model (all-MiniLM-L6-v2, 256 tokens,
mean pooling, normalised), the same window (40 candidates after the positives) and the same rule
(TopK-PercPos 90% = relative_margin 0.1, both sign-safe, the minimum positive score), 30 negatives
per query ("top").  One cold run each (the corpus encoded by both), in one process; the selections
are compared query by query.

Windows differ by construction: we keep the first 40 documents that are no positive of the query;
sentence-transformers retrieves 40 + M documents (M: the most positives of any query, 5 on SciFact
train), masks the positives and the candidates above the threshold, and takes the best 40 left,
so where the threshold leaves fewer than 30 of our 40 its list may go on with up to M candidates
from ranks 41..40+M.  Equal therefore means: our negatives are the start of theirs, and theirs are
longer only when our pool is under-full, by at most M.  The exactly equal lists are counted too.
Queries with several positives compare as well (sentence-transformers writes one list per
(query, positive) pair, all with the query's negatives; the minimum positive score sets the
threshold in both).
"""
from __future__ import annotations

import json
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark, pytest.mark.needs_shared]


def compare_with_sentence_transformers(tmp_path, rows, corpus) -> tuple[float, float, int, int]:
    """Mine ``rows`` over ``corpus`` with both (cold); returns (our s, their s, equal, compared)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from harness.encoders.hf import load_encoder
    from harness.encoders.refs import _minilm_path
    from harness.retrieval.pool import CandidatePool, DenseSource
    from methods.mining.rows import MiningSettings, mine_rows

    passages = corpus.passages()
    t0 = time.perf_counter()
    encoder = load_encoder("minilm", query_max_length=256, doc_max_length=256)
    out = tmp_path / "ours.jsonl"
    mine_rows(rows, lambda c: CandidatePool([DenseSource(encoder, "minilm")], c, depth=40, batch_size=64), out,
              MiningSettings(strategy="perc_pos", percent=0.9, k=30), corpus=corpus)
    ours_s = time.perf_counter() - t0
    ours = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]

    t0 = time.perf_counter()
    model = SentenceTransformer(str(_minilm_path()), device="cpu")
    model.max_seq_length = 256
    pairs = Dataset.from_dict({"query": [r.query for r in rows for _ in r.pos],
                               "positive": [p for r in rows for p in r.pos]})
    mined = mine_hard_negatives(pairs, model, corpus=list(passages), range_max=40, relative_margin=0.1,
                                num_negatives=30, sampling_strategy="top", output_format="labeled-list",
                                batch_size=64, verbose=False)
    st_s = time.perf_counter() - t0

    theirs: dict[str, list[str]] = {}
    for row in mined:
        docs = next(v for k, v in row.items() if isinstance(v, list) and k not in ("labels", "scores"))
        theirs.setdefault(row["query"], [t for t, lab in zip(docs, row["labels"]) if lab == 0])
    most = max(len(r.pos) for r in rows)
    compared = equal = exact = 0
    for r in ours:
        st = theirs.get(r["query"], [])      # a query without any negative may be left out of their output
        compared += 1
        longer = len(st) - len(r["neg"])
        equal += st[:len(r["neg"])] == r["neg"] and (longer == 0 or (len(r["neg"]) < 30 and 0 < longer <= most))
        exact += st == r["neg"]
    print(f"\nexactly equal lists: {exact}/{compared}")
    return ours_s, st_s, equal, compared


def single_positive_scifact():
    rows, corpus = all_scifact_train()
    return [r for r in rows if len(r.pos) == 1], corpus


def test_equal_selections_on_a_subset(tmp_path, monkeypatch):
    """The comparison itself, on 40 queries over their positives and 400 other documents (minutes).
    Measured here (2 shared cores, load ~17): ours 93.8 s, sentence-transformers 114.0 s, 40/40 equal."""
    from harness.data.beir import Corpus

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    rows, corpus = single_positive_scifact()
    rows = rows[:40]
    passages = corpus.passages()
    keep = sorted({i for i, p in enumerate(passages) if any(p == r.pos[0] for r in rows)} | set(range(400)))
    sub = Corpus([corpus.ids[i] for i in keep], [corpus.titles[i] for i in keep], [corpus.texts[i] for i in keep])
    ours_s, st_s, equal, compared = compare_with_sentence_transformers(tmp_path, rows, sub)
    print(f"\nsubset: {len(rows)} queries over {len(sub)} documents: ours {ours_s:.1f} s, "
          f"sentence-transformers {st_s:.1f} s; equal selections {equal}/{compared}")
    assert compared == 40 and equal == compared


def all_scifact_train():
    from harness.ablation.resolve import shared_root
    from harness.data.beir import read_corpus
    from harness.data.collections import load_beir_training

    root = shared_root() / "scifact"
    if not root.is_dir():
        pytest.skip("shared SciFact data not available")
    rows = load_beir_training(root, split="train").rows
    corpus = read_corpus(root / "corpus.jsonl")
    assert len(rows) == 809 and len(corpus) == 5183
    return rows, corpus


def test_mining_throughput_and_equal_selections_vs_sentence_transformers(tmp_path, monkeypatch):
    """All 809 SciFact train queries (several positives included) over the whole corpus, cold.
    Measured here (2 shared cores, load ~3, HARNESS_NUM_THREADS=2): ours 364.5 s (2.22 q/s),
    sentence-transformers 330.0 s (2.45 q/s), theirs/ours 0.91; 807/809 equal, 712 exactly equal.
    The two that differ were not analysed (a float tie at the threshold or the window's edge between
    faiss and torch scores is the likely cause), hence the 99% bound."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    rows, corpus = all_scifact_train()
    ours_s, st_s, equal, compared = compare_with_sentence_transformers(tmp_path, rows, corpus)
    print(f"\nmining SciFact train ({len(rows)} queries, {sum(len(r.pos) for r in rows)} positives, cold, corpus "
          f"encoded by each): ours {ours_s:.1f} s = {len(rows) / ours_s:.2f} q/s, sentence-transformers "
          f"{st_s:.1f} s = {len(rows) / st_s:.2f} q/s, ratio theirs/ours {st_s / ours_s:.2f}; "
          f"equal selections {equal}/{compared}")
    assert compared == len(rows) == 809
    assert equal >= 0.99 * compared
