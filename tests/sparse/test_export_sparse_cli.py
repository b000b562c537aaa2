"""``harness export-sparse``: a SparseEncoder folder that sentence-transformers loads to our weights, and an
Anserini JsonVectorCollection whose lines are the quantised weights; every refusal before any encoding."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from optional_extras import require_extra

from harness.cli import main

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.usefixtures("one_thread")

DOCS = {"d1": "p53 mutations drive many human cancers", "d2": "Aspirin lowers the risk of heart attack",
        "d3": "Mitochondria make ATP from glucose", "d4": "The tumor suppressor p53 regulates the cell cycle"}
QUERIES = {"q1": "role of p53 in cancer", "q2": "does aspirin prevent heart attacks"}
TEXTS = list(DOCS.values())


@pytest.fixture
def dataset(beir_folder):
    """This module's 4-document folder (2 queries, each judging its own document)."""
    return beir_folder(DOCS, QUERIES, [("q1", "d1"), ("q2", "d2")])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def ours(model: str, texts, queries: bool):
    from harness.encoders.sparse import load_sparse_encoder

    encoder = load_sparse_encoder(model)
    vectors = encoder.encode_queries(texts, progress=False) if queries else encoder.encode_docs(texts, progress=False)
    return vectors, encoder.vocabulary()


def test_sentence_transformers_export_loads_to_the_same_weights(tmp_path, cache, capsys):
    SparseEncoder = require_extra("sentence_transformers").SparseEncoder

    out = tmp_path / "st"
    assert main(["export-sparse", "--model", "splade-tiny", "--sentence-transformers", str(out), "--format",
                 "json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentence_transformers"] == str(out)
    model = SparseEncoder(str(out), device="cpu")
    for queries in (True, False):
        expected = ours("splade-tiny", TEXTS, queries)[0].to_dense()
        encode = model.encode_query if queries else model.encode_document
        got = encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
        assert (expected > 0).sum() > 10 * len(TEXTS)
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert np.array_equal(got > 0, expected > 0)
    # An earlier export is replaced only with --overwrite.
    assert main(["export-sparse", "--model", "splade-tiny", "--sentence-transformers", str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["export-sparse", "--model", "splade-tiny", "--sentence-transformers", str(out), "--overwrite",
                 "--pooling", "sum"]) == 0
    assert SparseEncoder(str(out), device="cpu")[1].pooling_strategy == "sum"


def test_a_training_workdir_exports_its_final_model(tmp_path, cache):
    from harness.encoders.refs import resolve_model

    run = tmp_path / "run"
    shutil.copytree(resolve_model("splade-tiny")[0], run / "final")
    (run / "run.json").write_text("{}")
    (run / "final" / "harness_encoder.json").write_text(json.dumps({"pooling": "sum", "doc_max_length": 64}))
    out = tmp_path / "st"
    assert main(["export-sparse", "--model", str(run), "--sentence-transformers", str(out)]) == 0
    pooling = json.loads((out / "1_SpladePooling" / "config.json").read_text())["pooling_strategy"]
    assert pooling == "sum"
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 64


@pytest.mark.parametrize("rule", ["pyserini", "splade"])
def test_jsonvector_lines_are_the_quantised_weights(tmp_path, cache, dataset, rule, capsys):
    from harness.retrieval.impact import quantize

    out, st = tmp_path / "jv", tmp_path / "st"
    assert main(["export-sparse", "--model", "splade-tiny", "--jsonvector", str(out), "--dataset-dir", str(dataset),
                 "--quantization", rule, "--sentence-transformers", str(st), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (st / "modules.json").is_file() and report["jsonvector"]["quantization"] == rule
    docs = [json.loads(line) for line in (out / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = [json.loads(line) for line in (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [d["id"] for d in docs] == list(DOCS) and [q["id"] for q in queries] == list(QUERIES)
    assert all(d["contents"] == "" for d in docs)
    dropped = 0
    for rows, texts, is_query in ((docs, TEXTS, False), (queries, list(QUERIES.values()), True)):
        vectors, vocab = ours("splade-tiny", texts, is_query)
        for i, row in enumerate(rows):
            ids, weights = vectors.row(i)
            impacts = quantize(weights, rule)
            want = {vocab[int(t)]: int(w) for t, w in zip(ids, impacts) if w > 0}
            assert row["vector"] == want and len(want) > 10
            dropped += int(np.count_nonzero(impacts <= 0)) if not is_query else 0
    info = json.loads((out / "export.json").read_text())
    assert info["documents"] == len(DOCS) and info["queries"] == len(QUERIES)
    assert info["doc_weights_dropped"] == dropped == report["jsonvector"]["doc_weights_dropped"]
    assert info["doc_postings"] == sum(len(d["vector"]) for d in docs)


def test_documents_only(tmp_path, cache, dataset, capsys):
    out = tmp_path / "jv"
    assert main(["export-sparse", "--model", "splade-tiny", "--jsonvector", str(out), "--dataset-dir", str(dataset),
                 "--no-queries"]) == 0
    assert (out / "docs.jsonl").is_file() and not (out / "queries.jsonl").exists()
    assert "4 documents" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    ([], "nothing to export"),
    (["--jsonvector", "{tmp}/jv"], "--jsonvector needs --dataset-dir"),
    (["--sentence-transformers", "{tmp}/st", "--dataset-dir", "{tmp}"], "--dataset-dir only apply to --jsonvector"),
    (["--sentence-transformers", "{tmp}/same", "--jsonvector", "{tmp}/same", "--dataset-dir", "{data}"],
     "must be different folders"),
    (["--sentence-transformers", "{tmp}/occupied"], "occupied exists and is not an exported model folder"),
    (["--jsonvector", "{tmp}/occupied", "--dataset-dir", "{data}"], "is not a JsonVectorCollection export"),
])
def test_bad_requests_are_refused_before_any_encoding(tmp_path, cache, dataset, args, message, capsys):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "mine.txt").write_text("a user's file")
    args = [a.format(tmp=tmp_path, data=dataset) for a in args]
    assert main(["export-sparse", "--model", "splade-tiny", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in occupied.iterdir()) == ["mine.txt"]
    assert not cache.exists()                          # nothing was encoded
    assert not (tmp_path / "st").exists() and not (tmp_path / "same").exists()


def test_a_dense_model_is_refused(tmp_path, cache, capsys):
    assert main(["export-sparse", "--model", "minilm", "--sentence-transformers", str(tmp_path / "st")]) == 2
    assert "is not a sparse (SPLADE) model" in capsys.readouterr().err
    assert not (tmp_path / "st").exists()


def test_an_unknown_quantisation_is_refused_with_the_choices(tmp_path, capsys):
    from harness.cli.export_sparse import QUANTIZATION_CHOICES
    from harness.retrieval.impact import QUANTIZATIONS

    assert QUANTIZATION_CHOICES == tuple(QUANTIZATIONS)
    with pytest.raises(SystemExit) as exc:
        main(["export-sparse", "--model", "splade-tiny", "--jsonvector", str(tmp_path / "jv"), "--dataset-dir",
              str(tmp_path), "--quantization", "bmp"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bmp'" in err and "pyserini" in err and "splade" in err
