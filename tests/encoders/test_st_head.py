"""Sentence-transformers models with layers after pooling (harness.encoders.st_head): the harness's vectors equal
sentence-transformers' own ``encode``, for a local folder and for the same model in the hub cache, and a module
it cannot apply is refused instead of silently dropped."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.encoders.hf import HFEncoder
from harness.encoders.st_head import HeadModule, read_head
from harness.errors import InputError

TEXTS = ["the cat sat on the mat", "a dog", "retrieval of dense vectors with a layer norm head",
         "ranking", "what is the capital of france"]


def _st_modules():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer import modules
    return SentenceTransformer, modules


@pytest.fixture(scope="module")
def ance_like(tiny_bert_dir, tmp_path_factory):
    """ANCE-firstp's layout on the tiny BERT: [CLS] pooling, a Dense with identity activation to another width,
    a LayerNorm; random weights (seeded) so the head matters."""
    SentenceTransformer, modules = _st_modules()
    torch.manual_seed(0)
    body = modules.Transformer(str(tiny_bert_dir), max_seq_length=32)
    width = body.get_embedding_dimension()
    dense = modules.Dense(width, 24, activation_function=torch.nn.Identity())
    norm = modules.LayerNorm(24)
    with torch.no_grad():
        norm.norm.weight.uniform_(0.5, 1.5)
        norm.norm.bias.uniform_(-0.1, 0.1)
    model = SentenceTransformer(modules=[body, modules.Pooling(width, pooling_mode="cls"), dense, norm],
                                device="cpu")
    folder = tmp_path_factory.mktemp("st") / "ance-like"
    model.save(str(folder))
    return folder, model


def test_the_head_is_read_and_applied_as_sentence_transformers_does(ance_like):
    folder, model = ance_like
    assert read_head(str(folder)) == (HeadModule("Dense", "2_Dense"), HeadModule("LayerNorm", "3_LayerNorm"))
    encoder = HFEncoder(str(folder), batch_size=2, cpu_fusion=False)
    assert encoder.settings.pooling == "cls" and not encoder.settings.normalize
    assert encoder.identity()["head"] == ["Dense", "LayerNorm"]
    ours = encoder.encode_docs(TEXTS)
    theirs = model.encode(TEXTS, convert_to_numpy=True, batch_size=2)
    assert ours.shape == theirs.shape == (len(TEXTS), 24) and encoder.dim == 24
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # without the head (what the encoder did before) the vectors were the pooled [CLS] states, of another width
    SentenceTransformer, _ = _st_modules()
    assert SentenceTransformer(modules=[model[0], model[1]], device="cpu").encode(TEXTS).shape == (len(TEXTS), 32)


def test_models_without_a_head_keep_their_identity(tiny_bert_dir):
    encoder = HFEncoder(str(tiny_bert_dir), cpu_fusion=False)
    assert read_head(str(tiny_bert_dir)) == () and "head" not in encoder.identity()


def test_the_same_model_from_the_hub_cache(ance_like, tmp_path):
    """A hub id whose repository is in the cache (offline): the head comes through sentence-transformers' hub
    loading.  A fresh process, since the hub libraries read HF_HUB_CACHE when imported."""
    folder, model = ance_like
    commit = "c" * 40
    repo = tmp_path / "hub" / "models--acme--ance-like"
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    script = (
        "import json, sys\n"
        "from harness.encoders.hf import HFEncoder\n"
        "from harness.encoders.st_head import read_head\n"
        "e = HFEncoder('acme/ance-like', pooling='cls', cpu_fusion=False)\n"
        "print(json.dumps({'head': [m.kind for m in read_head('acme/ance-like')], 'identity': e.identity()['head'],"
        " 'vectors': e.encode_queries(json.loads(sys.argv[1])).tolist()}))\n")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(TEXTS)], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["head"] == got["identity"] == ["Dense", "LayerNorm"]
    np.testing.assert_allclose(np.array(got["vectors"]), model.encode(TEXTS, convert_to_numpy=True),
                               rtol=1e-5, atol=1e-5)


def _rewrite_modules(folder: Path, edit) -> Path:
    entries = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    (folder / "modules.json").write_text(json.dumps(edit(entries)), encoding="utf-8")
    return folder


def test_a_module_the_harness_cannot_apply_is_refused(ance_like, tmp_path):
    folder, _ = ance_like
    odd = _rewrite_modules(Path(shutil.copytree(folder, tmp_path / "odd")), lambda e: e + [
        {"idx": len(e), "name": str(len(e)), "path": "", "type": "acme.layers.Whitening"}])
    with pytest.raises(InputError, match="acme.layers.Whitening"):
        read_head(str(odd))
    late = _rewrite_modules(Path(shutil.copytree(folder, tmp_path / "late")), lambda e: e[:2] + [
        {"idx": 2, "name": "n", "path": "", "type": "sentence_transformers.models.Normalize"}] + e[2:])
    with pytest.raises(InputError, match="Dense comes after Normalize"):
        read_head(str(late))
    dropout = _rewrite_modules(Path(shutil.copytree(folder, tmp_path / "dropout")), lambda e: e + [
        {"idx": len(e), "name": "d", "path": "", "type": "sentence_transformers.models.Dropout"}])
    assert [m.kind for m in read_head(str(dropout))] == ["Dense", "LayerNorm"]


@pytest.mark.parametrize("mode,pooling", [("cls", "cls"), ("mean", "mean"), ("lasttoken", "last"), ("max", None)])
def test_the_pooling_name_of_newer_sentence_transformers_folders(tmp_path, mode, pooling):
    """sentence-transformers >= 5 saves ``{"pooling_mode": "cls"}``, not the ``pooling_mode_*_tokens`` flags (read
    as mean pooling before); a pooling the harness does not encode is refused, naming the file."""
    from harness.encoders.refs import _defaults_from_sentence_transformers

    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 8, "pooling_mode": mode}))
    if pooling is None:
        with pytest.raises(InputError, match="pooling_mode 'max'"):
            _defaults_from_sentence_transformers(tmp_path)
    else:
        assert _defaults_from_sentence_transformers(tmp_path).pooling == pooling
