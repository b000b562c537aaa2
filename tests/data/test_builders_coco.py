"""``harness data build coco-dr``: BM25 warm-up negatives (Lucene, through the harness's BM25) on the
hand-checkable MS MARCO fixture (tests/fixtures/training_data/coco-dr).

Passages (every token its own Porter stem, no stop word; average length 23/8 = 2.875):
p1 "alpha alpha alpha", p2 "alpha alpha beta", p3 "alpha beta gamma", p4 "alpha beta gamma delta
epsilon", p5 "beta gamma", p6 "delta", p7 "alpha omega", p8 "gamma gamma omega omega".
BM25 (k1 0.9, b 0.4) orders, by term frequency and then shorter documents first:
  q1 "alpha" (positive p1):       p1, p2, p7, p3, p4
  q2 "beta gamma" (positive p5):  p5, p3, p4 (both terms, 0.923 idf), p8 (gamma twice, 0.658 idf), p2 (0.522 idf)
  q3 "omega" (positives p8, p7):  p7, p8 and nothing else, so no negative at all.
"""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from harness.data.builders import build, get_recipe
from harness.data.collections import load_training_data
from harness.errors import InputError
from suites.training_data import coco_dr

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "training_data" / "coco-dr"


@pytest.fixture
def src(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))     # the BM25 index
    dest = tmp_path / "sources"
    shutil.copytree(FIXTURE, dest)
    return dest


def negatives(out: Path) -> dict[str, list[str]]:
    rows = [json.loads(line) for line in (out / "msmarco.jsonl").read_text().splitlines()]
    return {r["query_id"]: r["neg_ids"] for r in rows}


def test_bm25_negatives_are_the_top_k_minus_positives(tmp_path: Path, src: Path) -> None:
    recipe = get_recipe("coco-dr")
    report = build(recipe, tmp_path / "k3", src, {"k": 3}, offline=True)
    assert negatives(tmp_path / "k3") == {"q1": ["p2", "p7"], "q2": ["p3", "p4"], "q3": []}
    stats = report.manifest["subsets"]["msmarco"]["stats"]
    bm25 = stats.pop("bm25")
    assert stats == {"queries": 3, "passages": 8, "queries_without_pool": 1, "negatives_total": 4}
    assert (bm25["k1"], bm25["b"], bm25["language"]) == (0.9, 0.4, "en") and bm25["lucene"]
    build(recipe, tmp_path / "k5", src, {"k": 5}, offline=True)
    assert negatives(tmp_path / "k5") == {"q1": ["p2", "p7", "p3", "p4"], "q2": ["p3", "p4", "p8", "p2"], "q3": []}
    # Fewer negatives than the pool: a seeded draw from it, kept in rank order, never a positive.
    build(recipe, tmp_path / "n2", src, {"k": 5, "negatives": 2, "seed": 5}, offline=True)
    drawn = negatives(tmp_path / "n2")
    for qid, pool in (("q1", ["p2", "p7", "p3", "p4"]), ("q2", ["p3", "p4", "p8", "p2"])):
        assert len(drawn[qid]) == 2 and drawn[qid] == [d for d in pool if d in drawn[qid]]
    build(recipe, tmp_path / "n2b", src, {"k": 5, "negatives": 2, "seed": 5}, offline=True)
    assert negatives(tmp_path / "n2b") == drawn
    data = load_training_data([tmp_path / "k5"])
    row = data.sources[0].rows[0]
    assert row.query == "alpha" and row.pos == ["alpha alpha alpha"]
    assert row.neg == ["alpha alpha beta", "alpha omega", "alpha beta gamma", "alpha beta gamma delta epsilon"]


def test_qrels_naming_an_unknown_passage_fails_at_its_line(tmp_path: Path, src: Path) -> None:
    qrels = src / "qrels.train.tsv"
    qrels.write_text(qrels.read_text() + "q2\t0\tp99\t1\n")
    with pytest.raises(InputError, match=r"qrels\.train\.tsv:5: passage 'p99' is not in collection\.tsv"):
        build(get_recipe("coco-dr"), tmp_path / "out", src, {"k": 3}, offline=True)


def test_archive_member_is_extracted_offline(tmp_path: Path, src: Path) -> None:
    """The release is one tar.gz; with it in the sources folder, its members are extracted (no network)."""
    archive_dir = tmp_path / "archived"
    archive_dir.mkdir()
    with tarfile.open(archive_dir / "collectionandqueries.tar.gz", "w:gz") as tf:
        for name in ("collection.tsv", "queries.train.tsv", "qrels.train.tsv"):
            tf.add(src / name, arcname=name)
    report = build(get_recipe("coco-dr"), tmp_path / "out", archive_dir, {"k": 3}, offline=True)
    assert (archive_dir / "collection.tsv").read_bytes() == (src / "collection.tsv").read_bytes()
    assert report.manifest["totals"]["rows"] == 3


def test_chunked_search_gives_the_same_rows(tmp_path: Path, src: Path, monkeypatch) -> None:
    """Queries are searched SEARCH_CHUNK at a time; chunks of 1 and 2 must not change a single row."""
    build(get_recipe("coco-dr"), tmp_path / "whole", src, {"k": 5, "negatives": 2}, offline=True)
    for size in (1, 2):
        monkeypatch.setattr(coco_dr, "SEARCH_CHUNK", size)
        build(get_recipe("coco-dr"), tmp_path / f"chunk{size}", src, {"k": 5, "negatives": 2}, offline=True)
        assert (tmp_path / f"chunk{size}" / "msmarco.jsonl").read_bytes() == \
            (tmp_path / "whole" / "msmarco.jsonl").read_bytes()
