"""Pooling on left/right padding, EOS appending, and last-token pooling through a real decoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.encoders.hf import HFEncoder
from harness.encoders.pooling import pool

# Two sequences, hidden size 1, token states numbered so the picked token is visible.
HIDDEN = torch.tensor([[[1.0], [2.0], [3.0], [4.0]],
                       [[10.0], [20.0], [30.0], [40.0]]])


def test_last_pooling_right_padding_takes_last_real_token():
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    assert pool(HIDDEN, mask, "last").flatten().tolist() == [2.0, 40.0]


def test_last_pooling_left_padding_takes_final_position():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert pool(HIDDEN, mask, "last").flatten().tolist() == [4.0, 40.0]


def test_mean_and_cls_pooling_oracles():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert pool(HIDDEN, mask, "mean").flatten().tolist() == pytest.approx([2.0, 10.0])  # (1+2+3)/3, 10/1
    assert pool(HIDDEN, mask, "cls").flatten().tolist() == [1.0, 10.0]


def test_unknown_pooling_is_rejected():
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(HIDDEN, torch.ones(2, 4), "max")


def test_tokenizer_without_eos_gets_eos_appended(tiny_decoder_dir):
    plain = HFEncoder(str(tiny_decoder_dir), pooling="last")
    with_eos = HFEncoder(str(tiny_decoder_dir), pooling="last", append_eos=True)
    tok = with_eos._load()[1]
    bos, eos = tok.bos_token_id, tok.eos_token_id
    cat, red = tok.convert_tokens_to_ids(["cat", "red"])
    # The tokenizer itself adds BOS only: the failure mode append_eos exists for.
    assert plain.tokenize(["cat red"], 16) == [[bos, cat, red]]
    assert with_eos.tokenize(["cat red"], 16) == [[bos, cat, red, eos]]
    # Truncation keeps room for EOS: max_length 3 -> BOS, one word, EOS.
    assert with_eos.tokenize(["cat red"], 3) == [[bos, cat, eos]]


def test_last_pooling_batched_equals_each_text_alone(tiny_decoder_dir):
    """Right-padded batches of mixed lengths give the same vectors as unpadded single texts."""
    texts = ["the cat is red", "dog", "a long river with fish and a small house in the old city",
             "one two three", "science study result"]
    enc = HFEncoder(str(tiny_decoder_dir), pooling="last", append_eos=True, normalize=True)
    batched = enc.encode_docs(texts, batch_size=8, progress=False)
    alone = np.concatenate([enc.encode_docs([t], batch_size=1, progress=False) for t in texts])
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def test_last_pooling_with_left_padding_matches_the_encoder(tiny_decoder_dir):
    """Left padding (with positions from the mask) pooled at -1 equals the encoder's right-padded result."""
    texts = ["the cat is red", "dog", "one two three four five"]
    enc = HFEncoder(str(tiny_decoder_dir), pooling="last", append_eos=True)
    expected = enc.encode_docs(texts, progress=False)
    model, tok = enc._load()
    ids = enc.tokenize(texts, 32)
    width = max(map(len, ids))
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    with torch.inference_mode():
        hidden = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).last_hidden_state
    np.testing.assert_allclose(pool(hidden, mask, "last").numpy(), expected, atol=1e-5)


def test_append_eos_needs_an_eos_token(tiny_bert_dir):
    from harness.errors import ConfigError

    enc = HFEncoder(str(tiny_bert_dir), append_eos=True)  # BERT's tokenizer declares no EOS token
    with pytest.raises(ConfigError, match="has no EOS token"):
        enc.encode_docs(["red fish"], progress=False)


def test_prompts_are_prepended(tiny_bert_dir):
    enc = HFEncoder(str(tiny_bert_dir), query_prompt="query: ", doc_prompt="passage: ")
    bare = HFEncoder(str(tiny_bert_dir))
    q = enc.encode_queries(["red fish"], progress=False)
    d = enc.encode_docs(["red fish"], progress=False)
    np.testing.assert_allclose(q, bare.encode_docs(["query: red fish"], progress=False), atol=1e-6)
    np.testing.assert_allclose(d, bare.encode_docs(["passage: red fish"], progress=False), atol=1e-6)
    assert not np.allclose(q, d)
    tok = enc._load()[1]
    assert enc.tokenize(["red fish"], 32, "query: ") == [tok("query: red fish")["input_ids"]]
