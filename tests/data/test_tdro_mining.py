"""Mined hard negatives for tDRO's sets that carry none (suites/training_data/tdro_mining.py): the released
recipe's rule (ranks [2, 100) of the set's own passages, positives excluded, 16 drawn with seed 42) checked on
hand-made vectors, and the ``tdro`` recipe's ``mine_negatives`` option on the fixture sets."""
from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from harness.data.builders import build, get_recipe
from harness.errors import ConfigError
from suites.training_data import tdro_mining
from suites.training_data.tdro_mining import corpus_of, mine_rows, parse_depth

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training_data" / "tdro"
ROWS = [{"query": "q0", "pos": ["P0"], "neg": []},
        {"query": "q1", "pos": ["P1"], "neg": ["N1"]},
        {"query": "q2", "pos": ["P2a", "P2b"], "neg": []}]
# passages are the unit vectors of their corpus index, so a query's vector is its score on each passage
SCORES = np.array([[0.9, 0.1, 0.5, 0.3, 0.7],      # ranks 0 4 2 3 1
                   [0.2, 0.8, 0.6, 0.4, 0.0],      # ranks 1 2 3 0 4
                   [0.5, 0.5, 0.1, 0.9, 0.8]])     # ranks 3 4 0 1 2 (the tie 0/1 in corpus order)


def test_corpus_is_every_distinct_passage_in_order():
    corpus, positives = corpus_of(ROWS)
    assert corpus == ["P0", "P1", "N1", "P2a", "P2b"] and positives == [[0], [1], [3, 4]]


def test_negatives_by_hand():
    corpus, positives = corpus_of(ROWS)
    mined = mine_rows(ROWS, SCORES, np.eye(5), corpus, positives, depth=(1, 4), n_sample=5)
    # ranks 1..3 of each query, its positives left out
    assert [r["neg"] for r in mined] == [["P2b", "N1", "P2a"], ["N1", "P2a", "P0"], ["P0", "P1"]]
    assert ROWS[1]["neg"] == ["N1"]                                     # the input rows are not changed
    # more candidates than n_sample: random.Random(42).sample([4, 2, 3], 2) = [3, 4] for the first row
    two = mine_rows(ROWS, SCORES, np.eye(5), corpus, positives, depth=(1, 4), n_sample=2)
    assert two[0]["neg"] == ["P2a", "P2b"] and all(len(r["neg"]) == 2 for r in two)
    # the release's depth skips the two best: ranks 2.. only
    assert [r["neg"] for r in mine_rows(ROWS, SCORES, np.eye(5), corpus, positives)] == [
        ["N1", "P2a", "P1"], ["P2a", "P0", "P2b"], ["P0", "P1", "N1"]]


def test_depth_option():
    assert parse_depth("2,100") == (2, 100)
    for bad in ("100", "5,2", "a,b"):
        with pytest.raises(ConfigError, match="mine_depth"):
            parse_depth(bad)


def _fake_encode(model: str, texts, max_length: int) -> np.ndarray:
    """Deterministic normalised bag-of-words vectors (a stand-in for bge's [CLS] vectors)."""
    vectors = np.zeros((len(texts), 64))
    for i, text in enumerate(texts):
        for word in text.split():
            vectors[i, zlib.crc32(word.encode()) % 64] += 1.0
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_recipe_mines_the_sets_tdro_mined(tmp_path, monkeypatch):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES, src)
    used = []
    monkeypatch.setattr(tdro_mining, "encode_texts", lambda m, t, n: used.append(m) or _fake_encode(m, t, n))
    opts = {"sets": "xsum,AllNLI", "mine_negatives": "BAAI/bge-base-en-v1.5"}
    report = build(get_recipe("tdro"), tmp_path / "out", src, opts, offline=True)
    stats = report.manifest["subsets"]["xsum"]["stats"]
    assert stats["mined_with"] == "BAAI/bge-base-en-v1.5" and stats["mined_rows"] == 4
    assert used == ["BAAI/bge-base-en-v1.5"] * 2                          # xsum queries, xsum passages; not AllNLI
    rows = [json.loads(line) for line in (tmp_path / "out" / "xsum.jsonl").read_text().splitlines()]
    corpus = {"xsum answer passage 0", "xsum answer passage 1", "xsum unrelated passage 1", "xsum answer passage 2",
              "xsum paraphrase 2", "xsum answer passage 3"}
    for row in rows:
        assert row["neg"] and set(row["neg"]) <= corpus - set(row["pos"])
        assert len(row["neg"]) <= 6 - 2                                  # the two best ranks are skipped
    allnli = [json.loads(line) for line in (tmp_path / "out" / "AllNLI.jsonl").read_text().splitlines()]
    plain = build(get_recipe("tdro"), tmp_path / "plain", src, {"sets": "AllNLI"}, offline=True)
    assert plain.manifest["totals"]["rows"] == len(allnli)
    assert allnli == [json.loads(line) for line in (tmp_path / "plain" / "AllNLI.jsonl").read_text().splitlines()]
