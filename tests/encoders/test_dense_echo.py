"""Dense echo embeddings (harness.encoders.dense_echo) against a hand oracle on the synthetic tiny decoder.

The oracle builds each filled template by hand (the pieces tokenised one by one, the text's ids written
twice, EOS last), runs the decoder on that one unpadded sequence, and pools the hidden states at the
positions of the *second* occurrence (and the EOS with include_eos) itself: mean, or the state at the last
pooled position.  The encoder batches texts of different lengths (right padding, longest first), so
agreement also checks that padding and reordering change nothing.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.encoders.dense_echo import EchoDenseEncoder, echo_pool, is_dense_echo_model, load_echo_dense_encoder
from harness.errors import ConfigError

TINY = "synthetic:default/tiny-decoder"
TEXTS = ["alpha beta gamma delta epsilon zeta", "short", "a much longer text with many words in it to pad others"]


@pytest.fixture(scope="module")
def backbone():
    from transformers import AutoModel, AutoTokenizer

    from harness.encoders.refs import resolve_model

    path, _ = resolve_model(TINY)
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _oracle(backbone, text: str, *, echo: bool, include_eos: bool, mode: str) -> tuple[np.ndarray, list[int]]:
    """The pooled vector and the pooled positions of ``text`` in the document template, built by hand."""
    tokenizer, model = backbone
    eos = [tokenizer.eos_token_id]
    body = _ids(tokenizer, text)
    if echo:   # <s>Document:{!text}\nDocument again:{text}{</s>}; the tiny tokenizer has no BOS: <s> is ""
        first = _ids(tokenizer, "Document:") + body + _ids(tokenizer, "\nDocument again:")
    else:      # <s>Document:{text}{</s>}
        first = _ids(tokenizer, "Document:")
    ids = first + body + eos
    pooled = list(range(len(first), len(first) + len(body))) + ([len(ids) - 1] if include_eos else [])
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0].float()
    vector = hidden[pooled].mean(dim=0) if mode == "mean" else hidden[pooled[-1]]
    return vector.numpy(), pooled


@pytest.mark.parametrize("mode", ["mean", "last"])
@pytest.mark.parametrize("include_eos", [True, False])
@pytest.mark.parametrize("echo", [True, False])
def test_pooled_positions_equal_hand_oracle(backbone, mode, include_eos, echo):
    encoder = EchoDenseEncoder(TINY, pooling=mode, normalize=False, echo=echo, include_eos=include_eos,
                               batch_size=2)
    got = encoder.encode_docs(TEXTS, progress=False)
    for text, vector in zip(TEXTS, got):
        expected, pooled = _oracle(backbone, text, echo=echo, include_eos=include_eos, mode=mode)
        np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-6)
    # The pooling mask the encoder builds marks exactly the hand-computed positions.
    _, attention, pooling = encoder.inputs(TEXTS[:1], "doc")
    assert pooling[0].nonzero().flatten().tolist() == _oracle(backbone, TEXTS[0], echo=echo,
                                                              include_eos=include_eos, mode=mode)[1]


def test_second_occurrence_not_first(backbone):
    """Echo pools the second occurrence: its mean differs from the first occurrence's (causal attention)."""
    tokenizer, model = backbone
    text = TEXTS[0]
    encoder = EchoDenseEncoder(TINY, pooling="mean", normalize=False, include_eos=False)
    got = encoder.encode_docs([text], progress=False)[0]
    body = _ids(tokenizer, text)
    start = len(_ids(tokenizer, "Document:"))
    ids = _ids(tokenizer, "Document:") + body + _ids(tokenizer, "\nDocument again:") + body + [tokenizer.eos_token_id]
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    first = hidden[start:start + len(body)].mean(dim=0).numpy()
    assert not np.allclose(got, first, atol=1e-4)
    assert np.allclose(got, hidden[len(ids) - 1 - len(body):len(ids) - 1].mean(dim=0).numpy(), atol=1e-5)


def test_normalised_and_query_side(backbone):
    encoder = EchoDenseEncoder(TINY, pooling="last", normalize=True)
    queries = encoder.encode_queries(TEXTS, progress=False)
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, rtol=1e-6)
    # Query template: <s>Query:{!text}\nQuery again:{text}{</s>}, last pooled position = the EOS.
    tokenizer, model = backbone
    ids = _ids(tokenizer, "Query:") + _ids(tokenizer, TEXTS[1]) + _ids(tokenizer, "\nQuery again:") \
        + _ids(tokenizer, TEXTS[1]) + [tokenizer.eos_token_id]
    with torch.no_grad():
        last = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].numpy()
    np.testing.assert_allclose(queries[1], last / np.linalg.norm(last), rtol=1e-5, atol=1e-6)


def test_echo_pool_by_hand():
    hidden = torch.arange(2 * 4 * 2, dtype=torch.float32).reshape(2, 4, 2)
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])
    mean = echo_pool(hidden, mask, "mean")
    assert mean.tolist() == [[(2 + 4) / 2, (3 + 5) / 2], [0.0, 0.0]]     # a row without a pooled position: zeros
    last = echo_pool(hidden, mask, "last")
    assert last.tolist() == [[4.0, 5.0], [8.0, 9.0]]                     # ... and position 0 under last
    with pytest.raises(ConfigError, match="echo pooling"):
        echo_pool(hidden, mask, "cls")


def test_dispatch_and_known_checkpoints():
    from harness.encoders.hf import HFEncoder
    from harness.encoders.known import find_known_model
    from harness.encoders.refs import resolve_model
    from harness.pipeline import ModelSpec, build_encoder
    from harness.protocol import ProtocolCard

    card = ProtocolCard()
    built = build_encoder(ModelSpec("tiny-decoder-echo-dense"), card)
    assert isinstance(built, EchoDenseEncoder) and (built.pooling, built.normalize) == ("mean", True)
    plain = build_encoder(ModelSpec(TINY, overrides={"pooling": "last"}), card)
    assert isinstance(plain, HFEncoder)                                   # the plain decoder stays plain
    for hub_id, pooling in (("jspringer/echo-mistral-7b-instruct-lasttoken", "last"),
                            ("jspringer/echo-mistral-7b-instruct-meantoken", "mean")):
        known = find_known_model(hub_id)
        assert known is not None and known.echo is True and known.source("echo")
        _, defaults = resolve_model(hub_id)
        assert (defaults.echo, defaults.pooling, defaults.normalize, defaults.representation) == \
            (True, pooling, True, "dense")
        assert is_dense_echo_model(hub_id)
    assert not is_dense_echo_model("smollm2-echo-splade")        # the sparse echo alias is not dense
    with pytest.raises(ConfigError, match="not supported by the echo dense encoder"):
        load_echo_dense_encoder("tiny-decoder-echo-dense", backend="int8")
    with pytest.raises(ConfigError, match="pooling must be one of mean, last"):
        EchoDenseEncoder(TINY, pooling="cls")


def test_known_echo_entry_checked():
    from harness.encoders.known import KnownModel

    with pytest.raises(ConfigError, match="kind 'dense' with pooling 'mean' or 'last'"):
        KnownModel(hub_id="x/y", kind="sparse", pooling="max", echo=True, sources=(("pooling", "s"), ("echo", "s")))
    with pytest.raises(ConfigError, match="no source for echo"):
        KnownModel(hub_id="x/y", kind="dense", pooling="mean", echo=True, sources=(("pooling", "s"),))


def test_identity_keys_templates():
    a = EchoDenseEncoder(TINY, pooling="mean").identity()
    b = EchoDenseEncoder(TINY, pooling="mean", include_eos=False).identity()
    c = EchoDenseEncoder(TINY, pooling="mean", echo=False).identity()
    assert a != b and a != c and a["encoder"] == "hf-echo-dense"
    assert a["doc_template"] == "<s>Document:{!%%text%%}\nDocument again:{%%text%%}{</s>}"
