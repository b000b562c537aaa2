"""The ``mined`` method (methods/mining/method.py) and its labels (topics.py): mining as a content-keyed
dependency shared by variants, training on the mined rows, monolingual topic-diverse batches in the
trainer, loss weights, exports, the truth statistics, and refusals."""
from __future__ import annotations

import importlib.util
import json
import random

import numpy as np
import pytest
from optional_extras import require_extra
from trainutil import make_tiny_bert

from harness.data.collections import TrainingData, TrainingSource
from harness.data.training import TrainingRow
from harness.errors import ConfigError, InputError
from harness.method import get_method
from methods.mining import language_topic_batches, loss_weights
from methods.mining.method import truth_statistics
from methods.mining.rows import passage_id
from methods.mining.topics import fasttext_topics, kmeans_topics, language_labels, read_index, topic_labels

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = "river mountain violin comet bakery glacier harbor meadow lantern canyon orchard falcon".split()


def make_source(name="toy", n=18, langs=("en", "fr", "en"), seed=0):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        topic = WORDS[i % 4]
        words = [topic] + rng.sample(WORDS, 5)
        rows.append(TrainingRow(" ".join(words[:3]) + f" {i}", [" ".join(words) + f" passage {i}"],
                                [f"unrelated {rng.choice(WORDS)} note {i}"],
                                {"line": i + 1, "lang": langs[i % len(langs)], "topic": topic, "id": f"r{i}"}))
    return TrainingSource(name=name, rows=rows, language="en", fingerprint=f"{name}-{seed}-{n}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-mined"), dropout=0.0))


def spec(tiny, **options):
    return get_method("mined").spec("tiny", model=tiny, steps=4, batch_size=4, warmup_steps=0, n_hard_negatives=1,
                                    query_max_length=16, doc_max_length=24, save_every=100, use_instructions=False,
                                    method_options={"retrievers": [tiny], "depth": 8, "k": 3, **options})


def test_options_are_refused_with_the_choices():
    m = get_method("mined")
    with pytest.raises(ConfigError, match="unknown strategy 'top'"):
        m.resolve_options({"strategy": "top"})
    with pytest.raises(ConfigError, match=r"percent must lie in \(0, 1\]"):
        m.resolve_options({"percent": 90})
    with pytest.raises(ConfigError, match="unknown batches 'mixed'"):
        m.resolve_options({"batches": "mixed"})
    with pytest.raises(ConfigError, match="unknown weights 'auto'"):
        m.resolve_options({"weights": "auto"})
    with pytest.raises(ConfigError, match="unknown option"):
        m.resolve_options({"strategies": "naive"})


def test_kmeans_topics_without_a_dense_model_are_refused_before_mining():
    """The tiny run's w/o stage 1 (BM25 candidates, language/topic batches) failed after mining, when the batches
    were labelled: k-means topics embed queries with topic_model or the first dense retriever, and BM25 is none."""
    m = get_method("mined")
    bm25_batches = {"retrievers": ["bm25"], "batches": "language_topic"}
    with pytest.raises(ConfigError, match="kmeans needs a dense model"):
        m.resolve_options(bm25_batches)
    with pytest.raises(ConfigError, match="kmeans needs a dense model"):
        m.resolve_options({"retrievers": ["bm25"], "weights": "portion"})          # weights label topics too
    with pytest.raises(ConfigError, match="kmeans needs a dense model"):
        m.resolve_options({**bm25_batches, "topics": {"a": "kmeans", "b": "column:topic"}})
    assert m.resolve_options({**bm25_batches, "topic_model": "hashgram"})["topic_model"] == "hashgram"
    assert m.resolve_options({**bm25_batches, "retrievers": ["bm25", "hashgram"]})["batches"] == "language_topic"
    assert m.resolve_options({**bm25_batches, "topics": "column:topic"})["topics"] == "column:topic"
    assert m.resolve_options({"retrievers": ["bm25"]})["batches"] == "sampler"       # no topics needed


def test_mines_once_trains_on_mined_rows_in_language_topic_batches(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = TrainingData([make_source()])
    method = get_method("mined")
    s = spec(tiny, strategy="naive", batches="language_topic", languages="column:lang", topics="column:topic",
             weights="portion")
    ckpt = method.train(s, data, tmp_path / "run")
    mined_dirs = list((tmp_path / "cache" / "mined").iterdir())
    assert len([d for d in mined_dirs if d.is_dir()]) == 1
    folder = next(d for d in mined_dirs if d.is_dir())
    mined = [json.loads(x) for x in (folder / "toy.jsonl").read_text().splitlines()]
    assert len(mined) == 18 and all(len(r["neg"]) == 3 for r in mined)          # naive fills k=3 of depth 8
    assert all(not set(r["neg"]) & set(r["pos"]) for r in mined)
    export = json.loads((ckpt.workdir / "method" / "mining.json").read_text())
    assert export["settings"]["strategy"] == "naive" and export["sources"]["toy"]["report"]["rows"] == 18
    batches = json.loads((ckpt.workdir / "method" / "batches.json").read_text())
    assert batches["languages"] == {"en": 12, "fr": 6} and batches["topics"] == {w: 5 if w in WORDS[:2] else 4
                                                                                 for w in WORDS[:4]}
    langs = [r.meta["lang"] for r in data.sources[0].rows]
    tops = [r.meta["topic"] for r in data.sources[0].rows]
    # portion weights: en share 2/3, fr 1/3 -> 1/p = 1.5, 3 (mean 2.25): w_l = 0.45*1.5/2.25 = 0.3, 0.6
    by_lang = loss_weights(langs, ["one topic"] * 18, mode="portion")      # w_t = 0.4 for a single topic
    assert (by_lang[0], by_lang[1]) == (pytest.approx(0.7), pytest.approx(1.0))      # rows 0 en, 1 fr
    full = loss_weights(langs, tops, mode="portion")
    for lang in ("en", "fr"):
        expected = float(np.mean([w for w, g in zip(full, langs) if g == lang]))
        assert batches["mean_weight_by_language"][lang] == pytest.approx(expected)
    # the trainer's batches: each a language_topic_batches batch, monolingual, an epoch covers every row once
    epoch = language_topic_batches(langs, tops, 4, seed=s.seed)
    seen = []
    for micro in range(len(epoch)):
        b = method._epoch(0, 4, s.seed)[micro]
        assert b == epoch[micro] and len({langs[i] for i in b}) == 1
        seen.extend(b)
    assert sorted(seen) == list(range(18))
    w = loss_weights(langs, tops, mode="portion")
    examples = [(0, i) for i in epoch[0]]
    assert method.batch_weight(examples) == pytest.approx(float(np.mean(w[epoch[0]])))
    log = [json.loads(x) for x in (ckpt.workdir / "train_log.jsonl").read_text().splitlines() if '"step"' in x]
    assert len(log) == 4 and all(np.isfinite(x["loss"]) for x in log)

    # a variant that mines alike (only the batching differs) reuses the mined rows
    stamp = (folder / "toy.jsonl").stat().st_mtime_ns
    other = get_method("mined").train(spec(tiny, strategy="naive"), data, tmp_path / "run2")
    assert (folder / "toy.jsonl").stat().st_mtime_ns == stamp
    assert not (other.workdir / "method" / "batches.json").exists()
    # another strategy mines again
    get_method("mined").train(spec(tiny, strategy="shifted", shift=2), data, tmp_path / "run3")
    assert len([d for d in (tmp_path / "cache" / "mined").iterdir() if d.is_dir()]) == 2


def test_batches_without_mining_and_constant_weights(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = TrainingData([make_source()])
    method = get_method("mined")
    s = spec(tiny, mine=False, batches="language_topic", languages="column:lang", topics="kmeans", n_topics=2,
             weights="constant")
    ckpt = method.train(s, data, tmp_path / "run")
    assert not (tmp_path / "cache" / "mined").exists() and not (ckpt.workdir / "method" / "mining.json").exists()
    batches = json.loads((ckpt.workdir / "method" / "batches.json").read_text())
    assert batches["mean_weight"] == pytest.approx(0.85)                     # M7's constants: 0.45 + 0.4
    assert set(batches["topics"]) == {"en/c0", "en/c1", "fr/c0", "fr/c1"}    # k-means within each language
    assert method.batch_weight([(0, 0), (0, 1)]) == pytest.approx(0.85)


def test_language_labels_and_index_file(tmp_path):
    src = make_source(n=4)
    assert language_labels(src) == ["en"] * 4
    assert language_labels(src, "column:lang") == ["en", "fr", "en", "en"]
    assert language_labels(src, {"toy": "column:lang"})[1] == "fr"
    index = tmp_path / "index.tsv"
    index.write_text("0\tar\t111\n1\tsw\t5\n2\tar\t7\n3\tte\t9\n")
    assert language_labels(src, f"index:{index}") == ["ar", "sw", "ar", "te"]
    index.write_text("0\tar\n1\tsw\n")
    with pytest.raises(InputError, match="2 of 4 rows have no label"):
        read_index(index, 4)
    index.write_text("zero\tar\n")
    with pytest.raises(InputError, match=r"index.tsv:1: expected"):
        read_index(index, 1)
    multi = TrainingSource(name="m", rows=src.rows, language=["ar", "sw"])
    with pytest.raises(ConfigError, match="lists 2 languages"):
        language_labels(multi)
    with pytest.raises(ConfigError, match="no entry for training source 'toy'"):
        language_labels(src, {"other": "source"})
    with pytest.raises(ConfigError, match="has no value"):
        language_labels(src, "column:missing")
    with pytest.raises(ConfigError, match="unknown languages spec"):
        language_labels(src, "guess")


def test_kmeans_topics_are_per_language_seeded_and_follow_the_clusters():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((2, 8))
    x = np.vstack([centres[i % 2] + 0.01 * rng.standard_normal(8) for i in range(20)])
    groups = ["en"] * 10 + ["fr"] * 10
    labels = kmeans_topics(x, groups, n_topics=2, seed=3)
    assert labels == kmeans_topics(x, groups, n_topics=2, seed=3)
    for g in ("en", "fr"):
        mine = [lab for lab, gg in zip(labels, groups) if gg == g]
        assert all(lab.startswith(g + "/") for lab in mine)
        # the two planted clusters (alternating rows) are found
        assert len(set(mine[0::2])) == 1 and len(set(mine[1::2])) == 1 and mine[0] != mine[1]
    assert set(kmeans_topics(x[:3], ["en"] * 3, n_topics=12)) == {"en/c0"}     # too few rows: one cluster
    with pytest.raises(ConfigError, match="needs a dense model"):
        topic_labels(make_source(n=2), ["en", "en"], "kmeans")


def test_fasttext_topics_with_a_tiny_trained_model(tmp_path):
    fasttext = require_extra("fasttext")

    train = tmp_path / "train.txt"
    train.write_text("".join(f"__label__{lab} {text}\n" for lab, text in [
        ("sport", "football match goal"), ("sport", "tennis match set point"), ("science", "atom molecule physics"),
        ("science", "cell biology gene")] * 5))
    model = fasttext.train_supervised(str(train), epoch=50, lr=1.0, dim=8, minCount=1, thread=1, seed=0)
    first = tmp_path / "first.bin"
    model.save_model(str(first))
    texts = ["gene atom", "goal match", "unknownword"]
    assert fasttext_topics(texts, [first])[:2] == ["science", "sport"]
    # a first classifier that is never confident enough hands over to the second; neither -> Others
    assert fasttext_topics(texts[:2], [first, first], threshold=1.01) == ["Others", "Others"]
    with pytest.raises(ConfigError, match="does not exist"):
        fasttext_topics(texts, [tmp_path / "missing.bin"])


def test_fasttext_refused_without_the_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fasttext" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'retrieval-harness\[topics\]'"):
        fasttext_topics(["q"], ["model.bin"])


def test_truth_statistics_count_the_planted_false_negatives():
    rows = [TrainingRow("q0", ["p0"], ["twin0", "n0"], {"id": "a"}), TrainingRow("q1", ["p1"], ["n1", "twin1"],
                                                                                 {"id": "b"})]
    truth = {"train": [{"id": "a", "false_negative_negs": [0]}, {"id": "b", "false_negative_negs": [1]}]}
    t0, t1, n0, n1 = (passage_id(x) for x in ("twin0", "twin1", "n0", "n1"))
    prov = [{"negatives": [{"doc_id": n0}],
             "judge": {"judged": [{"doc_id": t0, "kept": False}, {"doc_id": n0, "kept": True}]}},
            {"negatives": [{"doc_id": t1}],
             "judge": {"judged": [{"doc_id": t1, "kept": True}, {"doc_id": n1, "kept": False}]}}]
    stats = truth_statistics(prov, rows, truth)
    assert stats == {"planted": 2, "planted_selected": 1, "judged_planted": 2, "true_positives": 1,
                     "false_positives": 1, "false_negatives": 1, "precision": 0.5, "recall": 0.5}
    plain = truth_statistics([{"negatives": [{"doc_id": t0}]}, {"negatives": [{"doc_id": n1}]}], rows, truth)
    assert plain == {"planted": 2, "planted_selected": 1}


def test_epochs_follow_with_the_next_seed(tiny):
    method = get_method("mined")
    data = TrainingData([make_source()])
    s = spec(tiny, mine=False, batches="language_topic", languages="column:lang", topics="column:topic")
    method.use_prepared(method.prepare(s, data, {}).values)
    langs = [r.meta["lang"] for r in data.sources[0].rows]
    tops = [r.meta["topic"] for r in data.sources[0].rows]
    first = method._epoch(0, 4, s.seed)
    second = method._epoch(1, 4, s.seed)
    assert second == language_topic_batches(langs, tops, 4, seed=s.seed + 1) != first
    assert len(second) == len(first) == 5          # en: 12 rows -> 3 batches of 4; fr: 6 rows -> 4 + 2
    assert method._epoch(0, 4, s.seed) is first     # the first epoch stays cached
