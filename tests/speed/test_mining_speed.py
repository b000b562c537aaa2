"""Mining throughput on SciFact train (809 queries over the 5,183-document corpus) against
sentence-transformers' ``mine_hard_negatives``, with the same model (all-MiniLM-L6-v2, 256 tokens,
mean pooling, normalised), the same window (40 candidates after the positives) and the same rule
(TopK-PercPos 90% = relative_margin 0.1, both sign-safe, the minimum positive score), 30 negatives
per query ("top").  One cold run each (the corpus encoded by both), in one process; the selections
are compared query by query.  Speed is reported, not asserted (one cold run of minutes a side, no
rounds to take a median of): wall seconds and process CPU seconds (all threads), the latter not
inflated by other processes' load.

Windows differ by construction: we keep the first 40 documents that are no positive of the query;
sentence-transformers retrieves 40 + M documents (M: the most positives of any query, 5 on SciFact
train), masks the positives and the candidates above the threshold, and takes the best 40 left,
so where the threshold leaves fewer than 30 of our 40 its list may go on with up to M candidates
from ranks 41..40+M.  Equal therefore means: our negatives are the start of theirs, and theirs are
longer only when our pool is under-full, by at most M.  The exactly equal lists are counted too.
Queries with several positives compare as well (sentence-transformers groups its pairs by query
text and writes one list per (query, positive) pair; we treat rows with the same query text as one
query too, so both take the minimum score over all of its positives).

The two miners' embeddings are not bit-identical: our encoder runs the linear layers through oneDNN
with the bias fused (harness.encoders.fusion, the same math in another summation order),
sentence-transformers runs plain torch; on this corpus their cosines differ by up to 4.6e-7 (without
the fusion, ours matched sentence-transformers' vectors to 1.5e-8 on single passages).  Two documents
whose scores lie that close can come out in either order.  A query whose lists differ is therefore accepted only when
every difference is such a near-tie, checked with both miners' own embeddings (kept for the check,
outside the timing): with g the largest gap between the two models' cosines of any (query, document)
pair, measured, two scores are tied when they lie within 2 g + ``FP32_SLACK`` (what the models'
disagreement plus the fp32 rounding of each miner's own search can reorder) in both models; each
document in one list but not the other must be tied with the threshold or with a document it swapped
with, and each pair in both lists but in another order must be tied.  Anything else fails the test,
and so does g >= 1e-6 (the models would then differ by more than fp32 rounding).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
from optional_extras import require_extra

FP32_SLACK = 2e-7  # fp32 rounding of a 384-d dot product of unit vectors near 0.5 (a few ulps) in each search
PERCENT, K, DEPTH = 0.9, 30, 40


@dataclass
class Comparison:
    ours_s: float
    st_s: float
    ours_cpu_s: float = 0.0                              # process CPU seconds (all threads) of each run:
    st_cpu_s: float = 0.0                                # other processes' load does not add to them
    compared: int = 0
    equal: int = 0
    exact: int = 0
    phases: dict[str, float] = field(default_factory=dict)   # seconds of timed phases inside each run
    near_ties: list[str] = field(default_factory=list)   # one line per query that differs only by near-ties
    unexplained: list[str] = field(default_factory=list)
    model_gap: float = 0.0                               # the largest |cos_ours - cos_theirs| of any pair
    tie: float = 0.0                                     # scores this close count as tied


def _threshold(pos_scores: np.ndarray) -> float:
    s = float(pos_scores.min())
    return s - abs(s) * (1 - PERCENT)


def near_tie(ours: list[int], theirs: list[int], so: np.ndarray, st: np.ndarray, thr_o: float,
             thr_t: float, tie: float) -> str | None:
    """Why two different selections of one query are the same up to near-ties (None: they are not).
    ``so``/``st`` are the two models' scores of every document, ``thr_*`` their thresholds, ``tie``
    the largest gap that counts as a tie."""
    def close(x: int, y: int) -> bool:
        return abs(so[x] - so[y]) <= tie and abs(st[x] - st[y]) <= tie

    reasons = []
    only_o, only_t = set(ours) - set(theirs), set(theirs) - set(ours)
    for x, other in [(x, only_t) for x in only_o] + [(x, only_o) for x in only_t]:
        if abs(so[x] - thr_o) <= tie or abs(st[x] - thr_t) <= tie:
            reasons.append(f"doc row {x} at the threshold ({so[x] - thr_o:+.1e} / {st[x] - thr_t:+.1e})")
        elif any(close(x, y) for y in other):
            y = next(y for y in other if close(x, y))
            reasons.append(f"doc rows {x}/{y} swapped at the cut (gaps {so[x] - so[y]:+.1e} / {st[x] - st[y]:+.1e})")
        else:
            return None
    common_o, common_t = [x for x in ours if x not in only_o], [x for x in theirs if x not in only_t]
    pos_t = {x: i for i, x in enumerate(common_t)}
    for i, x in enumerate(common_o):
        for y in common_o[i + 1:]:
            if pos_t[y] < pos_t[x]:              # in another order
                if not close(x, y):
                    return None
                reasons.append(f"doc rows {x}/{y} in the other order (gaps {so[x] - so[y]:+.1e} ours, "
                               f"{st[x] - st[y]:+.1e} theirs)")
    return "; ".join(reasons) if reasons else None


def test_near_tie_accepts_reorderings_within_the_tie_only():
    """The checker itself (fast): scores of 6 documents under the two models, threshold 0.45."""
    so = np.array([0.70, 0.6000001, 0.60, 0.50, 0.4500004, 0.40])
    st = np.array([0.70, 0.60, 0.6000002, 0.50, 0.4499997, 0.40])
    same = near_tie([0, 1, 2, 3], [0, 2, 1, 3], so, st, 0.45, 0.45, 1e-6)
    assert same is not None and "1/2 in the other order" in same
    assert near_tie([0, 1, 2, 3], [0, 1, 3, 2], so, st, 0.45, 0.45, 1e-6) is None        # 0.1 apart
    edge = near_tie([5, 4], [5], so, st, 0.45, 0.45, 1e-6)                            # doc 4 at the threshold
    assert edge is not None and "doc row 4 at the threshold" in edge
    assert near_tie([5, 3], [5], so, st, 0.45, 0.45, 1e-6) is None                    # doc 3 is 0.05 above
    cut = near_tie([0, 1], [0, 2], so, st, 0.45, 0.45, 1e-6)                          # swapped at the k cut
    assert cut is not None and "swapped at the cut" in cut
    assert near_tie([0, 1], [0, 3], so, st, 0.45, 0.45, 1e-6) is None
    assert near_tie([0, 1], [0, 2], so, st, 0.45, 0.45, 1e-8) is None                 # a tighter tie


@pytest.fixture
def torch_threads():
    """torch's threads from HARNESS_NUM_THREADS when set (both miners run on them), restored after."""
    import torch

    before = torch.get_num_threads()
    wanted = os.environ.get("HARNESS_NUM_THREADS")
    if wanted:
        torch.set_num_threads(int(wanted))
    yield torch.get_num_threads()
    torch.set_num_threads(before)


def timed(obj, method: str, phases: dict[str, float], label: str) -> None:
    """Wrap ``obj.method`` (on the instance) so its calls add their wall time to ``phases[label]``."""
    real = getattr(obj, method)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            phases[label] = phases.get(label, 0.0) + time.perf_counter() - t

    setattr(obj, method, wrapper)


def compare_with_sentence_transformers(tmp_path, rows, corpus) -> Comparison:
    """Mine ``rows`` over ``corpus`` with both (cold, timed), then compare the selections query by query."""
    from datasets import Dataset

    require_extra("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from harness.encoders.cache import encode_corpus
    from harness.encoders.hf import load_encoder
    from harness.encoders.refs import _minilm_path
    from harness.retrieval.pool import CandidatePool, DenseSource
    from methods.mining.rows import MiningSettings, mine_rows

    passages = corpus.passages()
    phases: dict[str, float] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    encoder = load_encoder("minilm", query_max_length=256, doc_max_length=256)
    timed(encoder, "encode_docs", phases, "ours corpus")
    timed(encoder, "encode_queries", phases, "ours queries")
    out = tmp_path / "ours.jsonl"
    mine_rows(rows, lambda c: CandidatePool([DenseSource(encoder, "minilm")], c, depth=DEPTH, batch_size=64), out,
              MiningSettings(strategy="perc_pos", percent=PERCENT, k=K), corpus=corpus)
    ours_s, ours_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    ours = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]

    t0, c0 = time.perf_counter(), time.process_time()
    model = SentenceTransformer(str(_minilm_path()), device="cpu")
    model.max_seq_length = 256
    timed(model, "encode_document", phases, "theirs corpus")
    timed(model, "encode_query", phases, "theirs queries")
    pairs = Dataset.from_dict({"query": [r.query for r in rows for _ in r.pos],
                               "positive": [p for r in rows for p in r.pos]})
    kept = tmp_path / "st-embeddings"          # its embeddings, for the near-tie check (two .npy writes)
    mined = mine_hard_negatives(pairs, model, corpus=list(passages), range_max=DEPTH, relative_margin=1 - PERCENT,
                                num_negatives=K, sampling_strategy="top", output_format="labeled-list",
                                batch_size=64, verbose=False, cache_folder=str(kept))
    st_s, st_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    result = Comparison(ours_s, st_s, ours_cpu_s, st_cpu_s, phases=dict(phases))

    theirs: dict[str, list[str]] = {}
    for row in mined:
        docs = next(v for k, v in row.items() if isinstance(v, list) and k not in ("labels", "scores"))
        theirs.setdefault(row["query"], [t for t, lab in zip(docs, row["labels"]) if lab == 0])

    # Both models' cosines of every (query, document), from the embeddings each miner used.
    doc_row = {t: i for i, t in enumerate(passages)}
    cached = encode_corpus(encoder, corpus, batch_size=64, progress=False)
    assert cached.skipped                      # the pool's own vectors, from the cache
    ours_docs = cached.as_array().astype(np.float64)
    ours_q = encoder.encode_queries([r.query for r in rows], batch_size=64, progress=False).astype(np.float64)
    # sentence-transformers' rows: its corpus is the distinct texts of corpus + positives, its queries
    # the distinct query texts, each in order of first appearance
    st_doc_row = {t: i for i, t in enumerate(dict.fromkeys(list(passages) + list(pairs["positive"])))}
    st_query_row = {q: i for i, q in enumerate(dict.fromkeys(pairs["query"]))}
    st_docs = np.load(next(kept.glob("corpus_embeddings_*.npy")))[[st_doc_row[t] for t in passages]]
    st_q = np.load(next(kept.glob("query_embeddings_*.npy")))[[st_query_row[r.query] for r in rows]]
    st_docs, st_q = st_docs.astype(np.float64), st_q.astype(np.float64)
    scores_o, scores_t = ours_q @ ours_docs.T, st_q @ st_docs.T
    result.model_gap = float(np.abs(scores_o - scores_t).max())
    result.tie = 2 * result.model_gap + FP32_SLACK

    from methods.mining.rows import query_positives

    known = query_positives(rows)
    most = max(len(p) for p in known)
    for i, r in enumerate(ours):
        st = theirs.get(r["query"], [])      # a query without any negative may be left out of their output
        result.compared += 1
        longer = len(st) - len(r["neg"])
        tail_ok = longer == 0 or (len(r["neg"]) < K and 0 < longer <= most)
        result.exact += st == r["neg"]
        if st[:len(r["neg"])] == r["neg"] and tail_ok:
            result.equal += 1
            continue
        so_i, st_i = scores_o[i], scores_t[i]
        pos = [doc_row[p] for p in known[i]]
        theirs_cmp = st[:len(r["neg"])] if tail_ok else st
        why = near_tie([doc_row[t] for t in r["neg"]], [doc_row[t] for t in theirs_cmp], so_i, st_i,
                       _threshold(so_i[pos]), _threshold(st_i[pos]), result.tie)
        line = f"row {i} (query {rows[i].meta.get('query_id')}): {why or 'differs'}"
        (result.near_ties if why else result.unexplained).append(line)
    print("\nphases: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.phases.items())
          + f"; the rest: ours {ours_s - result.phases['ours corpus'] - result.phases['ours queries']:.1f} s, "
          f"theirs {st_s - result.phases['theirs corpus'] - result.phases['theirs queries']:.1f} s")
    print(f"exactly equal lists: {result.exact}/{result.compared}; largest cosine gap between the two models' "
          f"embeddings: {result.model_gap:.1e} (ties within {result.tie:.1e})")
    for line in result.near_ties + result.unexplained:
        print(line)
    return result


def single_positive_scifact():
    rows, corpus = all_scifact_train()
    return [r for r in rows if len(r.pos) == 1], corpus


@pytest.mark.slow
@pytest.mark.benchmark
@pytest.mark.needs_shared
def test_equal_selections_on_a_subset(tmp_path, monkeypatch, torch_threads):
    """The comparison itself, on 40 queries over their positives and 400 other documents (minutes).
    Measured here (2 shared cores, load ~17): ours 93.8 s, sentence-transformers 114.0 s, 40/40 equal."""
    from harness.data.beir import Corpus

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    rows, corpus = single_positive_scifact()
    rows = rows[:40]
    passages = corpus.passages()
    keep = sorted({i for i, p in enumerate(passages) if any(p == r.pos[0] for r in rows)} | set(range(400)))
    sub = Corpus([corpus.ids[i] for i in keep], [corpus.titles[i] for i in keep], [corpus.texts[i] for i in keep])
    c = compare_with_sentence_transformers(tmp_path, rows, sub)
    print(f"\nsubset ({torch_threads} torch threads): {len(rows)} queries over {len(sub)} documents: "
          f"ours {c.ours_s:.1f} s ({c.ours_cpu_s:.1f} CPU s), sentence-transformers {c.st_s:.1f} s "
          f"({c.st_cpu_s:.1f} CPU s); equal selections {c.equal}/{c.compared}")
    assert c.compared == 40 and not c.unexplained and c.equal + len(c.near_ties) == c.compared


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


@pytest.mark.slow
@pytest.mark.benchmark
@pytest.mark.needs_shared
def test_mining_throughput_and_equal_selections_vs_sentence_transformers(tmp_path, monkeypatch, torch_threads):
    """All 809 SciFact train queries (several positives included) over the whole corpus, cold.
    Every query's selection must equal sentence-transformers' (module doc) or differ from it only by
    near-ties that the two models' measured disagreement can reorder.  Measured here (2 shared cores,
    load ~4, HARNESS_NUM_THREADS=2): ours 375.3 s (2.16 q/s: corpus encoding 363.1 s, queries 11.0 s,
    model load, search, selection and writing 1.2 s), sentence-transformers 498.3 s (1.62 q/s: 480.0,
    17.3 and 1.0 s), theirs/ours 1.33; 808/809 equal (713 exactly), 1 differing by a near-tie only
    (query 169, below), 0 otherwise; the models' cosines differ by at most 4.6e-7.  Sequential runs on
    a shared machine swing with its load (an earlier run: 364.5 s vs 330.0 s); encoding the same 648
    passages in turns, one thread, ours took 89.2 s and sentence-transformers 105.9 s (1.19), and ours
    without the fused linear layers 105.4 s: the difference is our encoder's oneDNN fusion.

    Before rows with the same query text were mined as one query, 807/809 were equal: query 90 (the
    text of query 89, judged one of 89's two documents) kept 89's other document 7521113 (0.5757) as a
    candidate and took its threshold from its own positive alone (0.6235 -> 0.5612, instead of
    0.5757 -> 0.5182), so it mined 24282306 (0.5365) and 5511240 (0.5196); and query 169
    differs by a near-tie only: documents 27123743 and 2015126 score 0.46268925 and 0.46268916 under
    our embeddings and exactly 0.4626891 each under sentence-transformers' (fp32), so they come out in
    the other order (the two models' cosines differ by up to 4.6e-7 on this corpus).  Replayed offline on
    saved vectors, our miner on our encoder without the fused layers (``cpu_fusion=False``, 1.4e-7 from
    sentence-transformers' vectors, 2,202 of 5,183 passages bit-identical) agrees on all 809."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    rows, corpus = all_scifact_train()
    c = compare_with_sentence_transformers(tmp_path, rows, corpus)
    print(f"\nmining SciFact train ({torch_threads} torch threads, {len(rows)} queries, "
          f"{sum(len(r.pos) for r in rows)} positives, cold, corpus encoded by each): "
          f"ours {c.ours_s:.1f} s = {len(rows) / c.ours_s:.2f} q/s, "
          f"sentence-transformers {c.st_s:.1f} s = {len(rows) / c.st_s:.2f} q/s, "
          f"ratio theirs/ours {c.st_s / c.ours_s:.2f} wall, {c.st_cpu_s / c.ours_cpu_s:.2f} CPU "
          f"({c.ours_cpu_s:.1f} / {c.st_cpu_s:.1f} CPU s); "
          f"equal selections {c.equal}/{c.compared}, {len(c.near_ties)} more differ only by near-ties, "
          f"{len(c.unexplained)} otherwise")
    assert c.compared == len(rows) == 809
    assert c.model_gap < 1e-6             # the two models differ by fp32 rounding only
    assert not c.unexplained and c.equal + len(c.near_ties) == c.compared
