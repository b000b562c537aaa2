"""Training collections: the real 8-source collection, SciFact train qrels, metadata and bad input."""
from __future__ import annotations

import json

import pytest

from harness.data.collections import (
    TrainingData,
    load_beir_training,
    load_collection,
    load_training_data,
    read_metadata_file,
)
from harness.errors import ConfigError, InputError

# Row counts from ../shared/data/train-multidomain/SOURCE.md
MULTIDOMAIN_ROWS = {"miracl": 2799, "squad": 2000, "xquad": 1650, "cmrc2018": 1000, "stsb_zh": 2000,
                    "stsb_en": 1406, "sick_nli": 2000, "msmarco": 100}


@pytest.mark.needs_shared
def test_train_multidomain_sources_and_metadata(shared_data):
    sources = {s.name: s for s in load_collection(shared_data / "train-multidomain")}
    assert {n: len(s) for n, s in sources.items()} == MULTIDOMAIN_ROWS
    assert sum(len(s) for s in sources.values()) == 12955
    assert len(sources["miracl"].language) == 16 and len(sources["xquad"].language) == 11
    assert sources["cmrc2018"].language == "zh" and sources["msmarco"].language == "en"
    assert {n for n, s in sources.items() if s.symmetric} == {"stsb_zh", "stsb_en", "sick_nli"}
    assert sources["msmarco"].prompts == ["Given a web search query, retrieve relevant passages that answer the query"]
    assert sources["miracl"].prompts[0] == "Given a question, retrieve Wikipedia passages that answer the question"
    assert all(s.prompts for s in sources.values()) and not any(s.only_hn for s in sources.values())
    assert sources["msmarco"].rows[0].neg and not sources["stsb_en"].rows[0].neg


@pytest.mark.needs_shared
def test_scifact_train_qrels_as_training_source(shared_data, tmp_path):
    src = load_beir_training(shared_data / "scifact")
    assert len(src) == 809 and sum(len(r.pos) for r in src.rows) == 919
    assert src.prompts == ["Given a scientific claim, retrieve documents that support or refute the claim"]
    assert all(not r.neg for r in src.rows)
    # Negatives from a run: its documents in rank order, minus the judged positives.
    first = src.rows[0]
    qid, pos_id = first.meta["query_id"], first.meta["pos_ids"][0]
    run = tmp_path / "run.trec"
    run.write_text(f"{qid} Q0 {pos_id} 1 9.0 t\n{qid} Q0 4983 2 8.0 t\n{qid} Q0 5836 3 7.0 t\n")
    with_negs = load_beir_training(shared_data / "scifact", negatives_run=run, max_negatives=1)
    row = next(r for r in with_negs.rows if r.meta["query_id"] == qid)
    assert row.meta["neg_ids"] == ["4983"] and len(row.neg) == 1
    assert with_negs.fingerprint != src.fingerprint
    bad = tmp_path / "bad.trec"
    bad.write_text(f"{qid} Q0 no-such-doc 1 9.0 t\n")
    with pytest.raises(InputError, match="missing from"):
        load_beir_training(shared_data / "scifact", negatives_run=bad)


@pytest.mark.needs_shared
def test_load_training_data_mixes_layouts(shared_data):
    data = load_training_data([{"path": shared_data / "train-multidomain", "domains": ["msmarco", "squad"],
                                "max_rows": 50}, {"path": shared_data / "scifact", "max_rows": 20}])
    assert data.names == ["msmarco", "squad", "scifact"] and data.sizes == [50, 50, 20]
    with pytest.raises(ConfigError, match="unknown domain"):
        load_training_data([{"path": shared_data / "train-multidomain", "domains": ["nope"]}])
    with pytest.raises(ConfigError, match="unknown option"):
        load_training_data([{"path": shared_data / "scifact", "domains": ["x"]}])


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_folder_with_domains_json(tmp_path):
    write_rows(tmp_path / "a.jsonl", [{"query": "q1", "pos": ["p1"], "neg": ["n1"]}])
    write_rows(tmp_path / "b.jsonl", [{"query": "q2", "pos": ["p2"]}, {"query": "q3", "pos": ["p3"], "neg": []}])
    (tmp_path / "domains.json").write_text(json.dumps({
        "b": {"file": "b.jsonl", "language": "de", "task": "sts", "symmetric": True, "prompt": ["x", "y"],
              "planted": "easy"},
        "a": {"file": "a.jsonl", "only_hn": True}}))
    sources = load_collection(tmp_path)
    assert [s.name for s in sources] == ["b", "a"]
    b, a = sources
    assert (b.language, b.task, b.symmetric, b.prompts, b.meta) == ("de", "sts", True, ["x", "y"], {"planted": "easy"})
    assert (a.language, a.task, a.symmetric, a.prompt, a.only_hn) == ("und", "retrieval", False, "", True)
    single = load_collection(tmp_path / "a.jsonl")
    assert single[0].name == "a" and single[0].only_hn   # a single file still finds its folder's metadata


def test_folder_without_metadata_gets_defaults(tmp_path):
    write_rows(tmp_path / "only.jsonl", [{"query": "q", "pos": ["p"]}])
    (src,) = load_collection(tmp_path)
    assert (src.name, src.language, src.prompt, src.symmetric) == ("only", "und", "", False)


def test_bad_metadata_and_rows_name_file_and_line(tmp_path):
    write_rows(tmp_path / "a.jsonl", [{"query": "q", "pos": ["p"]}])
    meta = tmp_path / "domains.json"
    meta.write_text('{\n  "a": {"file": "a.jsonl",}\n}')
    with pytest.raises(InputError, match=r"domains.json:2: malformed JSON"):
        load_collection(tmp_path)
    meta.write_text(json.dumps({"a": {"symmetric": "yes"}}))
    with pytest.raises(InputError, match="'symmetric' must be true or false"):
        read_metadata_file(meta)
    meta.write_text(json.dumps({"a": {}, "missing": {"file": "missing.jsonl"}}))
    with pytest.raises(InputError, match="domain 'missing': training file .*missing.jsonl does not exist"):
        load_collection(tmp_path)
    meta.unlink()
    (tmp_path / "a.jsonl").write_text('{"query": "q", "pos": ["p"]}\n{"query": "q2", "pos": []}\n')
    with pytest.raises(InputError, match=r"a.jsonl:2: field 'pos' is an empty list"):
        load_collection(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        load_collection(tmp_path / "nowhere")


def test_duplicate_source_names_are_refused(tmp_path):
    from harness.data.collections import TrainingSource
    from harness.data.training import TrainingRow

    row = TrainingRow("q", ["p"], [])
    with pytest.raises(ConfigError, match="two training sources are named 'x'"):
        TrainingData([TrainingSource("x", [row], path="one"), TrainingSource("x", [row], path="two")])
