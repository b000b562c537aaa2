"""Data-format errors that say what was found and what was expected, through the real CLI.

Each case is a friction point a new user met: a CSV qrels file beside the missing ``test.tsv``, a
3-column qrels file with a ``qid docid rel`` header, ``--dataset-dir`` naming ``corpus.jsonl``, a folder
whose only qrels are ``dev.tsv`` (used without a word), and a training file with its own key names.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from harness.ablation.cells import expand_train_cells
from harness.ablation.spec import load_suite
from harness.cli import main
from harness.data.collections import load_collection, load_training_data, parse_column_map
from harness.data.qrels import read_qrels, sniff_qrels
from harness.errors import ConfigError, InputError


def _dataset(root, qrels_name: str, qrels_text: str):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                               for i, text in enumerate(["alpha beta", "gamma delta",
                                                                         "epsilon zeta"], 1)))
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "alpha"}\n{"_id": "q2", "text": "gamma"}\n')
    (root / "qrels" / qrels_name).write_text(qrels_text)
    return root


def _eval_error(capsys, *args) -> str:
    code = main(["eval", "--model", "bm25", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def test_csv_qrels_beside_the_missing_tsv_is_named(tmp_path, capsys):
    ds = _dataset(tmp_path / "ds", "test.csv", "q1,d1,1\nq2,d2,1\n")
    err = _eval_error(capsys, "--dataset-dir", str(ds), "--out", str(tmp_path / "out"))
    assert "qrels/test.tsv: file not found" in err
    assert "test.csv (comma-separated (CSV)) is beside it" in err
    assert "BEIR qrels (tab-separated, header 'query-id<TAB>corpus-id<TAB>score')" in err


def test_dataset_dir_naming_a_file_says_it_is_a_file(tmp_path, capsys):
    ds = _dataset(tmp_path / "ds", "test.tsv", "q1 0 d1 1\n")
    err = _eval_error(capsys, "--dataset-dir", str(ds / "corpus.jsonl"), "--out", str(tmp_path / "out"))
    assert "corpus.jsonl: dataset directory is a file, expected a folder" in err
    assert f"did you mean its folder {ds}?" in err
    assert "does not exist" not in err


def test_three_column_header_on_dev_only_is_read_and_the_split_announced(tmp_path, capsys, caplog):
    # header 'qid docid rel' (3 whitespace-separated columns): read as BEIR's layout, not refused as TREC
    ds = _dataset(tmp_path / "ds", "dev.tsv", "qid docid rel\nq1 d1 1\nq2 d2 2\n")
    caplog.set_level(logging.WARNING)
    code = main(["eval", "--model", "bm25", "--dataset-dir", str(ds), "--out", str(tmp_path / "out"),
                 "--format", "json", "-m", "ndcg@10", "-m", "recall@100"])
    out = capsys.readouterr().out
    assert code == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no qrels for the protocol's split 'test'; evaluating split 'dev'" in w for w in warnings), warnings
    result = json.loads(out)
    assert result["card"]["split"] == "dev"
    # each query's one relevant document holds its only term: BM25 ranks it first
    assert result["metrics"]["ndcg@10"] == pytest.approx(1.0)
    assert result["metrics"]["recall@100"] == pytest.approx(1.0)


def test_csv_qrels_file_is_refused_with_what_was_found(tmp_path, capsys):
    ds = _dataset(tmp_path / "ds", "test.tsv", "q1,0,d1,1\n")
    err = _eval_error(capsys, "--dataset-dir", str(ds), "--out", str(tmp_path / "out"))
    assert "qrels/test.tsv:1: found comma-separated values (CSV) 'q1,0,d1,1'" in err


@pytest.mark.parametrize(("text", "found"), [
    ("q1 d1 1\nq2 d2 1\n", "found 3 whitespace-separated columns and no header"),
    ("a\tb\tc\nq1\td1\t1\n", "found a header of 3 tab-separated columns 'a\\tb\\tc' whose names are not recognised"),
])
def test_ambiguous_qrels_are_refused_at_line_one(tmp_path, text, found):
    path = tmp_path / "qrels.tsv"
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        read_qrels(path)
    assert exc.value.line == 1 and found in str(exc.value)
    assert "TREC qrels (whitespace-separated 'qid iter docid rel', no header)" in str(exc.value)


def test_recognised_headers_read_the_same_judgements(tmp_path):
    files = {"beir.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n",
             "three.tsv": "qid\tdocid\trel\nq1\td1\t1\nq2\td2\t2\n",
             "trec-header.txt": "qid iter docid rel\nq1 0 d1 1\nq2 0 d2 2\n",
             "trec.txt": "q1 0 d1 1\nq2 0 d2 2\n"}
    read = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        q = read_qrels(tmp_path / name)
        read[name] = (q.query_ids.tolist(), q.doc_ids.tolist(), q.relevance.tolist())
    assert all(v == (["q1", "q2"], ["d1", "d2"], [1, 2]) for v in read.values()), read
    assert sniff_qrels(tmp_path / "three.tsv").found == "3 tab-separated columns with the header 'qid\\tdocid\\trel'"


def _training_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"question": f"question {i}", "positive": [f"answer {i}"], "negative": [f"other {i}"]} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_train_missing_field_names_the_fields_found_and_suggests_map(tmp_path, capsys):
    path = _training_file(tmp_path)
    code = main(["train", "--data", str(path), "--out", str(tmp_path / "out"), "--scale", "tiny", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "pairs.jsonl:1: missing field 'query'; fields found: 'question', 'positive', 'negative'" in err
    assert "--map question=query,positive=pos" in err


def test_train_map_renames_the_columns(tmp_path, capsys):
    path = _training_file(tmp_path)
    code = main(["train", "--data", str(path), "--out", str(tmp_path / "out"), "--scale", "tiny", "--dry-run",
                 "--map", "question=query,positive=pos,negative=neg"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    plan = json.dumps(json.loads(captured.out))
    assert "missing field" not in captured.err and '"pairs"' in plan and '"rows": 4' in plan, plan


def test_map_syntax_and_targets_are_checked(tmp_path):
    assert parse_column_map("question=query, positive=pos") == {"question": "query", "positive": "pos"}
    with pytest.raises(ConfigError, match="FROM=TO pairs"):
        parse_column_map("question")
    path = _training_file(tmp_path)
    with pytest.raises(ConfigError, match="'positive' to 'positives', which is no row field"):
        load_collection(path, columns={"question": "query", "positive": "positives"})
    with pytest.raises(ConfigError, match="sends both 'question' and 'negative' to 'query'"):
        load_collection(path, columns={"question": "query", "negative": "query"})
    a = load_collection(path, columns={"question": "query", "positive": "pos"})[0]
    b = load_collection(path, columns={"question": "query", "positive": "pos", "negative": "neg"})[0]
    assert [r.neg for r in a.rows] == [[]] * 4 and b.rows[2].neg == ["other 2"]
    assert a.fingerprint != b.fingerprint       # the mapping is part of the data's identity


def _suite_with_map(tmp_path, data_entry: str):
    quickstart = Path(__file__).resolve().parents[2] / "suites" / "ablations" / "quickstart.yaml"
    text = quickstart.read_text().replace("    data: [synthetic:default]\n", f"    data:\n      - {data_entry}\n")
    path = tmp_path / "mapped.yaml"
    path.write_text(text)
    return path


def test_suite_data_entry_map_is_accepted_and_applied(tmp_path, capsys):
    pairs = _training_file(tmp_path)
    path = _suite_with_map(tmp_path, f"{{path: {pairs}, map: {{question: query, positive: pos}}}}")
    code = main(["run", str(path), "--scale", "tiny", "--dry-run", "--results-root", str(tmp_path / "results")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    cells = expand_train_cells(load_suite(path), "tiny")
    cell = next(c for c in cells if c.variant.id == "uniform")
    rows = load_training_data(cell.data_entries).sources[0].rows
    assert [(r.query, r.pos, r.neg) for r in rows[:2]] == [("question 0", ["answer 0"], []),
                                                           ("question 1", ["answer 1"], [])]


def test_suite_data_entry_map_to_an_unknown_field_is_refused(tmp_path, capsys):
    pairs = _training_file(tmp_path)
    path = _suite_with_map(tmp_path, f"{{path: {pairs}, map: {{question: querry}}}}")
    code = main(["run", str(path), "--scale", "tiny", "--dry-run", "--results-root", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2
    assert "'map' sends 'question' to 'querry', which is no row field; fields: query, pos, neg" in err
