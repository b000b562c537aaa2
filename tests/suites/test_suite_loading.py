"""Every shared eval set loads under its suite with the counts of ../shared/data/README.md;
the release formats (MIRACL topics/qrels of 18 languages, MKQA rows) parse."""
from __future__ import annotations

import gzip
import json

import pytest

from harness.benchmark import dataset_stats, get_suite, list_suites
from harness.cli import main
from harness.errors import ConfigError, InputError
from suites.benchmarks import miracl as miracl_mod
from suites.benchmarks.mkqa import read_mkqa
from suites.groupings import MIRACL_LANGUAGES, MKQA_LANGUAGES

# Counts from ../shared/data/README.md and the SOURCE.md files next to each set.
SHARED_SETS = [
    # suite, folder, split, docs, queries, judged pairs, relevant pairs
    ("beir", "scifact", "test", 5183, 300, 339, 339),
    ("cmteb", "cmrc2018-dev-retrieval", "dev", 848, 3219, 3219, 3219),
    ("dureader", "webqa-test-ann-retrieval", "test", 3006, 3024, 3024, 3024),
    ("miracl", "miracl-dev-subset/te", "dev", 3654, 83, 84 + 28, 84),
    ("miracl", "miracl-dev-subset/ar", "dev", 4879, 60, 96 + 108, 96),
    ("miracl", "miracl-dev-subset/yo", "dev", 2647, 45, 48 + 254, 48),
    ("miracl", "miracl-dev-subset/sw", "dev", 3611, 43, 55 + 156, 55),
    ("miracl", "miracl-dev-subset/id", "dev", 4668, 29, 36 + 76, 36),
    ("miracl", "miracl-dev-subset/zh", "dev", 4807, 18, 39 + 66, 39),
    ("mkqa", "xquad-xling-retrieval", "test", 1154, 6732, 6732, 6732),
]


def test_all_suites_registered():
    assert {"beir", "miracl", "mkqa", "cmteb", "dureader", "synthetic"} <= set(list_suites())


@pytest.mark.parametrize("suite,folder,split,docs,queries,pairs,relevant", SHARED_SETS,
                         ids=[s[1] for s in SHARED_SETS])
def test_shared_set_counts_match_readme(shared_data, suite, folder, split, docs, queries, pairs, relevant):
    loaded = get_suite(suite).load(shared_data / folder)
    stats = dataset_stats(loaded)
    assert loaded.card.suite == suite
    assert loaded.dataset.split == split == loaded.card.split
    assert (stats["docs"], stats["queries"], stats["judged_pairs"], stats["relevant_pairs"]) == \
        (docs, queries, pairs, relevant)
    assert stats["queries_without_judgments"] == stats["queries_in_file"] - queries
    assert stats["mean_relevant_per_query"] == round(relevant / queries, 4)
    assert len(loaded.card.data_hash) == 64


def test_scifact_counts_train_split_and_unjudged_queries(shared_data):
    loaded = get_suite("beir").load(shared_data / "scifact", split="train")
    stats = dataset_stats(loaded)
    assert (stats["queries"], stats["judged_pairs"]) == (809, 919)
    test = dataset_stats(get_suite("beir").load(shared_data / "scifact"))
    assert test["queries_in_file"] == 1109 and test["queries_without_judgments"] == 809


def test_stats_cli_json_matches(shared_data, capsys):
    assert main(["data", "stats", "--suite", "cmteb", "--dataset-dir", str(shared_data / "cmrc2018-dev-retrieval"),
                 "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["docs"] == 848 and report["counts"]["queries"] == 3219
    assert report["card"]["suite"] == "cmteb" and report["card"]["bm25_language"] == "zh"
    assert report["split"] == "dev"


def test_stats_cli_table(shared_data, capsys):
    assert main(["data", "stats", "--suite", "miracl", "--dataset-dir",
                 str(shared_data / "miracl-dev-subset" / "yo"), "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "docs" in out and "2647" in out and "bm25_language" in out and "complete" in out
    assert "language  yo" in out


def test_stats_cli_bad_dir_is_one_line_error(tmp_path, capsys):
    assert main(["data", "stats", "--suite", "beir", "--dataset-dir", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("\n") == 1


# ---------------------------------------------------------------- MIRACL release files
@pytest.mark.parametrize("lang", MIRACL_LANGUAGES)
def test_miracl_release_topics_and_qrels_parse(shared_data, lang):
    queries, qrels = miracl_mod.load_release_topics(shared_data / "miracl", lang)
    assert len(queries) > 0 and len(qrels) > 0
    assert set(qrels.query_list()) <= set(queries.ids)
    assert all(miracl_mod.DOCID.match(d) for d in qrels.doc_ids.tolist()[:50])


def test_miracl_release_totals_match_source(shared_data):
    totals = {"te": 828, "ar": 2896, "yo": 119, "sw": 482, "id": 960, "zh": 393}
    for lang, total in totals.items():
        queries, _ = miracl_mod.load_release_topics(shared_data / "miracl", lang)
        assert len(queries) == total, lang


def test_miracl_subset_qrels_agree_with_release(shared_data):
    _, release = miracl_mod.load_release_topics(shared_data / "miracl", "te")
    subset = get_suite("miracl").load(shared_data / "miracl-dev-subset" / "te").dataset.qrels
    full = release.to_dict()
    for q, docs in subset.to_dict().items():
        for d, rel in docs.items():
            assert full[q][d] == rel


def test_miracl_release_dir_with_corpus_loads(shared_data, tmp_path):
    root = tmp_path / "miracl"
    for kind in ("topics", "qrels"):
        (root / kind).mkdir(parents=True)
        src = shared_data / "miracl" / kind / f"{kind}.miracl-v1.0-yo-dev.tsv"
        (root / kind / src.name).write_bytes(src.read_bytes())
    shard = root / "miracl-corpus-v1.0-yo" / "docs-0.jsonl.gz"
    shard.parent.mkdir()
    with gzip.open(shard, "wt", encoding="utf-8") as out, \
            open(shared_data / "miracl-dev-subset" / "yo" / "corpus.jsonl", encoding="utf-8") as src:
        for line in src:
            row = json.loads(line)
            out.write(json.dumps({"docid": row["_id"], "title": row["title"], "text": row["text"]}) + "\n")
    # the release qrels judge passages outside this partial corpus: refused with the file named
    with pytest.raises(InputError, match="qrels-miracl|qrels.miracl-v1.0-yo-dev.tsv"):
        get_suite("miracl").load(root, dataset="yo")


def test_miracl_language_is_required_and_checked(shared_data):
    with pytest.raises(ConfigError, match="not one of"):
        get_suite("miracl").load(shared_data / "miracl", dataset="xx")
    loaded = get_suite("miracl").load(shared_data / "miracl-dev-subset" / "sw")
    assert loaded.card.bm25_language == "sw" and dict(loaded.card.extra)["language"] == "sw"


def test_miracl_bad_docid_names_line(tmp_path):
    bad = tmp_path / "qrels.tsv"
    bad.write_text("1 Q0 123#0 1\n2 Q0 not-a-passage 1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"qrels.tsv:2: .*not a MIRACL passage id"):
        miracl_mod.read_release_qrels(bad)


# ---------------------------------------------------------------- MKQA release rows
def test_mkqa_release_rows_parse(shared_data):
    rows = read_mkqa(shared_data / "mkqa" / "test_mkqa.jsonl.gz")
    assert len(rows) == 6
    for row in rows:
        assert set(row.queries) == set(MKQA_LANGUAGES)
        assert set(row.answers) == set(MKQA_LANGUAGES)
    by_type = {r.answer_types["en"][0]: r for r in rows}
    assert by_type["unanswerable"].answers["en"] == [] and by_type["long_answer"].answers["en"] == []
    entity = next(r for r in rows if "Ridley Scott" in r.answers["en"])
    assert entity.answers["en"] == ["Ridley Scott", "Sir Ridley Scott"]       # text + aliases
    date = next(r for r in rows if "2017" in r.answers["en"])
    assert "18 May 2017" in date.answers["en"] and "2017-05-18" in date.answers["en"]


def test_mkqa_release_loads_with_english_corpus(shared_data, tmp_path):
    (tmp_path / "mkqa.jsonl.gz").write_bytes((shared_data / "mkqa" / "test_mkqa.jsonl.gz").read_bytes())
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"_id": "p1", "title": "Ridley Scott", "text": "Sir Ridley Scott is an English director."}) + "\n"
        + json.dumps({"_id": "p2", "title": "Other", "text": "Nothing relevant."}) + "\n", encoding="utf-8")
    loaded = get_suite("mkqa").load(tmp_path)
    rows = read_mkqa(tmp_path / "mkqa.jsonl.gz")
    answerable = sum(1 for r in rows if r.answers["en"])
    assert len(loaded.dataset.queries) == answerable * 25            # 25 non-English query languages
    assert loaded.meta["unanswerable_dropped"] == (len(rows) - answerable) * 25
    assert not any(q.startswith("en-") for q in loaded.dataset.queries.ids)
    assert loaded.card.metrics == ("acc@10", "acc@100") and dict(loaded.card.extra)["answers_field"] == "en"
    one = get_suite("mkqa").load(tmp_path, language="ja,th")
    assert {q.split("-")[0] for q in one.dataset.queries.ids} == {"ja", "th"}
    assert one.card.dataset == "mkqa-ja+th" and one.card.data_hash != loaded.card.data_hash


def test_mkqa_bad_row_names_line(tmp_path):
    path = tmp_path / "mkqa.jsonl"
    path.write_text(json.dumps({"example_id": 1, "queries": {"en": "q"}, "answers": {"en": []}}) + "\n"
                    + json.dumps({"example_id": 2, "queries": {"en": "q"}}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"mkqa.jsonl:2: missing field 'answers'"):
        read_mkqa(path)


def test_xquad_uses_english_answers(shared_data):
    loaded = get_suite("mkqa").load(shared_data / "xquad-xling-retrieval")
    assert dict(loaded.card.extra)["answers_field"] == "answers_en"
    assert loaded.answers["zh-56dde1d966d3e219004dad8d"] == ["Rollo"]        # not the Chinese "罗洛"
    assert loaded.meta["answer_lang"] == "en"
    assert loaded.card.metrics == ("acc@10", "acc@100", "ndcg@10")
    assert len(loaded.meta["languages"]) == 12


# ---------------------------------------------------------------- other suites on shared data
def test_beir_protocol_facts(shared_data):
    card = get_suite("beir").load(shared_data / "scifact").card
    assert card.metrics == ("ndcg@10", "recall@100") and not card.exclude_self and card.split == "test"
    from suites.benchmarks.beir import protocol_for

    assert protocol_for("arguana")["exclude_self"] and protocol_for("quora")["exclude_self"]
    assert protocol_for("msmarco")["split"] == "dev"
    assert not protocol_for("fiqa")["exclude_self"]


def test_beir_cqadupstack_root_is_refused(tmp_path):
    (tmp_path / "cqadupstack" / "android").mkdir(parents=True)
    with pytest.raises(ConfigError, match="per forum"):
        get_suite("beir").load(tmp_path / "cqadupstack")


def test_unknown_option_is_refused(shared_data):
    with pytest.raises(ConfigError, match="unknown option"):
        get_suite("beir").load(shared_data / "scifact", gallery="full")


def test_split_detection(shared_data):
    from suites.benchmarks._common import qrels_splits, resolve_split

    assert qrels_splits(shared_data / "cmrc2018-dev-retrieval") == ["dev"]
    assert resolve_split(shared_data / "cmrc2018-dev-retrieval", None, "test") == "dev"
    assert resolve_split(shared_data / "scifact", None, "test") == "test"            # two files: protocol split
    assert resolve_split(shared_data / "xquad-xling-retrieval", None, "test") == "test"
    with pytest.raises(InputError, match="available: dev"):
        resolve_split(shared_data / "cmrc2018-dev-retrieval", "test", "test")


# ---------------------------------------------------------------- DuReader release format
def write_dureader_release(root):
    (root / "dev").mkdir(parents=True)
    rows = [{"question_id": "qa", "question": "北京是哪个国家的首都",
             "answer_paragraphs": [{"paragraph_id": "p-md5-1", "paragraph_text": "北京是中国的首都。"}]},
            {"question_id": "qb", "question": "上海在哪里",
             "answer_paragraphs": [{"paragraph_id": "p-md5-3", "paragraph_text": "上海位于长江口。"},
                                   {"paragraph_id": "p-md5-4", "paragraph_text": "上海是直辖市。"}]}]
    (root / "dev" / "dev.json").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                                           encoding="utf-8")
    pc = root / "passage-collection"
    pc.mkdir()
    (pc / "part-00").write_text("-\t-\t北京是中国的首都。\t0\n-\t-\t广州在南方。\t0\n", encoding="utf-8")
    (pc / "part-01").write_text("-\t-\t上海位于长江口。\t0\n-\t-\t上海是直辖市。\t0\n", encoding="utf-8")
    (pc / "passage2id.map.json").write_text(json.dumps({str(i): f"p-md5-{i + 1}" for i in range(4)}),
                                            encoding="utf-8")


def test_dureader_release_layout(tmp_path):
    write_dureader_release(tmp_path / "dr")
    loaded = get_suite("dureader").load(tmp_path / "dr")
    ds = loaded.dataset
    assert ds.corpus.ids == ["p-md5-1", "p-md5-2", "p-md5-3", "p-md5-4"]
    assert ds.corpus.texts[2] == "上海位于长江口。"
    assert ds.qrels.to_dict() == {"qa": {"p-md5-1": 1}, "qb": {"p-md5-3": 1, "p-md5-4": 1}}
    assert loaded.card.split == "dev" and loaded.card.dataset == "dureader-retrieval"
    assert loaded.card.metrics == ("mrr@10", "success@1", "success@50") and loaded.card.complete
    sub = get_suite("dureader").load(tmp_path / "dr", gallery="sub200k", gallery_size=3, seed=0)
    assert len(sub.dataset.corpus) == 3 and {"p-md5-1", "p-md5-3", "p-md5-4"} == set(sub.dataset.corpus.ids)
    assert "paper 002's own random subset is not public" in sub.card.notes and "seed 0" in sub.card.notes
    assert "not public" not in loaded.card.notes


def test_dureader_release_errors_name_file_and_line(tmp_path):
    write_dureader_release(tmp_path / "dr")
    (tmp_path / "dr" / "passage-collection" / "part-01").write_text("-\t-\tok\t0\nbroken line\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"part-01:2: expected at least 3 tab-separated columns"):
        get_suite("dureader").load(tmp_path / "dr")
    with pytest.raises(ConfigError, match="option gallery must be one of full, sub200k"):
        get_suite("dureader").load(tmp_path / "dr", gallery="half")


def test_stats_of_miracl_release_files_without_corpus(shared_data, capsys):
    assert main(["data", "stats", "--suite", "miracl", "--dataset-dir", str(shared_data / "miracl"),
                 "--dataset", "zh", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["docs"] is None and report["counts"]["queries"] == 393
    assert report["card"]["extra"] == {"language": "zh", "source": "release"}


def test_beir_dataset_inside_a_root_and_cqadupstack_forums(tmp_path):
    forum = tmp_path / "beir" / "cqadupstack" / "android"
    (forum / "qrels").mkdir(parents=True)
    (forum / "corpus.jsonl").write_text(json.dumps({"_id": "1", "title": "t", "text": "adb"}) + "\n")
    (forum / "queries.jsonl").write_text(json.dumps({"_id": "9", "text": "adb?"}) + "\n")
    (forum / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n9\t1\t1\n")
    by_name = get_suite("beir").load(tmp_path / "beir", dataset="cqadupstack/android")
    by_dir = get_suite("beir").load(forum)
    assert by_name.card.dataset == by_dir.card.dataset == "cqadupstack/android"
    assert by_name.card == by_dir.card
    with pytest.raises(InputError, match="no BEIR-layout folder"):
        get_suite("beir").load(tmp_path / "beir", dataset="nfcorpus")
