"""SPLADE exports: ``sentence_transformers.SparseEncoder`` loads an exported SPLADE-tiny and a trained tiny
``splade`` run and gives our weights; the Anserini ``JsonVectorCollection`` holds the quantised weights."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from optional_extras import require_extra

from harness.errors import ConfigError
from harness.io import OutputExistsError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))   # trainutil

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["p53 mutations drive many human cancers", "Aspirin lowers the risk of heart attack",
         "how do mitochondria make ATP", "statins"]


def sentence_transformers_weights(folder: Path, pooling: str, queries: bool) -> np.ndarray:
    model = require_extra("sentence_transformers").SparseEncoder(str(folder), device="cpu")
    assert model[1].pooling_strategy == pooling
    encode = model.encode_query if queries else model.encode_document
    return encode(TEXTS, convert_to_tensor=True).to_dense().numpy()


def ours(model: str, queries: bool) -> np.ndarray:
    from harness.encoders.sparse import load_sparse_encoder

    encoder = load_sparse_encoder(model)
    vectors = encoder.encode_queries(TEXTS, progress=False) if queries else encoder.encode_docs(TEXTS, progress=False)
    return vectors.to_dense()


def test_splade_tiny_exports_to_sparse_encoder(tmp_path):
    require_extra("sentence_transformers")
    from methods.splade_export import export_sparse_encoder

    folder = export_sparse_encoder("splade-tiny", tmp_path / "st")
    for queries in (True, False):
        expected = ours("splade-tiny", queries)
        got = sentence_transformers_weights(folder, "max", queries)
        assert (expected > 0).sum() > 20 * len(TEXTS)
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert np.array_equal(got > 0, expected > 0)
    # The exported folder is a sparse model for the harness too (SpladePooling), with the alias's length.
    from harness.encoders.sparse import SparseMLMEncoder, is_sparse_model

    assert is_sparse_model(str(folder)) and SparseMLMEncoder(str(folder)).doc_max_length == 256
    occupied = tmp_path / "occupied"                     # a user's folder is never replaced
    occupied.mkdir()
    (occupied / "mine.txt").write_text("not the harness's")
    with pytest.raises(OutputExistsError, match="occupied exists and is not an exported model folder"):
        export_sparse_encoder("splade-tiny", occupied)
    assert (occupied / "mine.txt").is_file()


def test_trained_run_loads_in_sparse_encoder(tmp_path):
    require_extra("sentence_transformers")
    from trainutil import make_data, make_tiny_bert

    from methods.splade import Splade

    model = str(make_tiny_bert(tmp_path / "mlm", dropout=0.0, mlm=True))
    spec = Splade.spec("tiny", model=model, steps=2, batch_size=6, lr=1e-3, save_every=0,
                       method_options={"pooling": "sum", "lambda_warmup_steps": 2})
    ckpt = Splade().train(spec, make_data(), tmp_path / "run")
    assert json.loads((ckpt.path / "modules.json").read_text())[1]["path"] == "1_SpladePooling"
    for queries in (True, False):
        np.testing.assert_allclose(sentence_transformers_weights(ckpt.path, "sum", queries),
                                   ours(str(tmp_path / "run"), queries), rtol=1e-5, atol=1e-4)


def test_json_vector_collection(tmp_path, monkeypatch):
    from harness.data import Corpus
    from harness.data.beir import Queries
    from harness.encoders.sparse import load_sparse_encoder
    from methods.splade_export import export_json_vector_collection

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    corpus = Corpus(["d1", "d2", "d3"], ["", "", ""], TEXTS[:3])
    queries = Queries(["q1"], [TEXTS[3]])
    info = export_json_vector_collection("splade-tiny", corpus, tmp_path / "jv", queries=queries,
                                         quantization="splade")
    assert info["documents"] == 3 and info["quantization_rule"] == "rint(w * 100)" and info["queries"] == 1
    docs = [json.loads(line) for line in (tmp_path / "jv" / "docs.jsonl").read_text().splitlines()]
    assert [d["id"] for d in docs] == ["d1", "d2", "d3"] and all(d["contents"] == "" for d in docs)
    encoder = load_sparse_encoder("splade-tiny")
    weights, vocab = encoder.encode_docs(TEXTS[:1], progress=False), encoder.vocabulary()
    expected = {tok: int(np.rint(w * 100)) for tok, w in weights.terms(0, vocab).items() if np.rint(w * 100) > 0}
    assert docs[0]["vector"] == expected and len(expected) > 10
    assert json.loads((tmp_path / "jv" / "queries.jsonl").read_text())["id"] == "q1"
    with pytest.raises(ConfigError, match="unknown impact quantisation"):
        export_json_vector_collection("splade-tiny", corpus, tmp_path / "x", quantization="int8")
    with pytest.raises(ConfigError, match="not a sparse"):
        export_json_vector_collection("minilm", corpus, tmp_path / "y")
