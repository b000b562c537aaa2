"""The generated world: composition, scripts, files, loaders, determinism, speed."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from harness.data import load_beir, read_training_rows
from harness.synthetic import WorldSpec, make_world, read_truth, read_world_info, write_world


def _file_hashes(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_sizes_follow_the_spec(world):
    for name, data in world.domains.items():
        spec = world.spec.domain(name)
        assert len(data.train_rows) == spec.n_train
        assert len(data.corpus) == spec.n_docs
        assert len(data.queries) == spec.n_test_queries == len(data.answers) == len(data.test_truth)
        assert all(len(r["neg"]) == spec.n_hard_negatives and len(r["pos"]) == 1 for r in data.train_rows)


def test_scripts_and_spacing(world):
    cjk = world.domains["cjk_qa"]
    thai = world.domains["thai_sts"]
    # CJK and Thai are written without spaces between words: no query contains a space.
    assert not any(" " in q for _, q in cjk.queries + thai.queries)
    assert not any(" " in text for _, _, text in cjk.corpus)
    assert all(re.search(r"[\u4e00-\u9fff]", q) for _, q in cjk.queries)
    assert all(re.fullmatch(r"[\u0e00-\u0e7f]+", q) for _, q in thai.queries)
    assert all(re.search(r"[\u0400-\u04ff]", q) for _, q in world.domains["cyrillic_news"].queries)
    assert any(re.search(r"[ñçáéíóúãõü]", q) for _, q in world.domains["latin_synonyms"].queries)
    latin_words = world.domains["latin_qa"].queries[0][1].split()
    assert len(latin_words) >= 3


def test_topic_clusters_and_hidden_synonyms(world):
    lang = world.languages["xlb"]
    assert len(lang.topics) == 12 and all(len(t) == 30 for t in lang.topics)
    words = lang.words()
    assert len(words) == len(set(words)), "vocabulary words must be distinct"
    # The synonym map is a bijection onto words that no document uses.
    assert len(set(lang.synonyms.values())) == len(lang.synonyms)
    syn = set(lang.synonyms.values())
    docs = " ".join(text for _, _, text in world.domains["latin_synonyms"].corpus).lower()
    assert not syn & set(re.findall(r"\w+", docs))


def test_written_files_load_through_the_harness_loaders(world, world_dir):
    meta = json.loads((world_dir / "train" / "domains.json").read_text(encoding="utf-8"))
    assert list(meta) == list(world.domains)
    for name, entry in meta.items():
        data = world.domains[name]
        assert entry["file"] == f"{name}.jsonl" and entry["eval"] == f"eval/{name}"
        for key in ("language", "task", "symmetric", "prompt", "only_hn", "role", "script", "planted"):
            assert key in entry
        rows = read_training_rows(world_dir / "train" / entry["file"])
        assert len(rows) == len(data.train_rows)
        assert rows[0].query == data.train_rows[0]["query"] and rows[0].meta["id"] == data.train_rows[0]["id"]
        ds = load_beir(world_dir / "eval" / name, split="test")
        assert len(ds.corpus) == len(data.corpus)
        assert len(ds.queries) == len(data.queries)
        assert len(ds.qrels.query_ids) == sum(len(v) for v in data.qrels.values())
        answers = [json.loads(line) for line in (world_dir / "eval" / name / "answers.jsonl").open(encoding="utf-8")]
        assert [a["_id"] for a in answers] == ds.queries.ids
        assert all(a["answers"] and all(isinstance(s, str) and s for s in a["answers"]) for a in answers)
    assert meta["thai_sts"]["symmetric"] is True and meta["latin_noisy"]["role"] == "noise"
    assert meta["cjk_qa"]["script"] == "Hani" and meta["cjk_qa"]["spaced"] is False
    info = read_world_info(world_dir)
    assert info["fingerprint"] == world.fingerprint and info["spec"] == world.spec.to_dict()
    truth = read_truth(world_dir)
    assert set(truth["domains"]) == set(world.domains)


def test_rewriting_is_byte_identical_and_seeds_differ(world, world_dir, tmp_path):
    again = write_world(make_world(seed=0), tmp_path / "again")
    assert _file_hashes(again) == _file_hashes(world_dir)
    other = write_world(make_world(seed=1), tmp_path / "seed1")
    first, second = _file_hashes(world_dir), _file_hashes(other)
    assert first.keys() == second.keys()
    assert all(first[k] != second[k] for k in first if k.endswith((".jsonl", "truth.json")))


def test_domains_are_generated_independently(world):
    # Changing one domain's planting leaves every other domain unchanged.
    changed = make_world(WorldSpec.default().with_domain("latin_qa", false_positive_rate=0.3))
    for name in world.domains:
        same = changed.domains[name].train_rows == world.domains[name].train_rows
        assert same == (name != "latin_qa")
        assert changed.domains[name].corpus == world.domains[name].corpus


def test_overwrite_false_refuses_an_existing_directory(world, tmp_path):
    target = write_world(world, tmp_path / "w")
    with pytest.raises(FileExistsError):
        write_world(world, target, overwrite=False)
    assert read_world_info(target)["fingerprint"] == world.fingerprint
