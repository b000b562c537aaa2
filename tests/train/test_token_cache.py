"""The token-id cache of the training step: bitwise the tokenizer's padded features, and bitwise the same
training run (losses, weights) as tokenizing every micro-batch."""
from __future__ import annotations

import random

import pytest
import torch
from safetensors.torch import load_file
from trainutil import WORDS, make_data

from harness.encoders.backbone import tokenize
from harness.method import Method
from harness.train.tokens import TokenCache


def _texts(seed: int, n: int) -> list[str]:
    """Short, long (truncated at 16 tokens), empty and repeated texts, some with a prompt prefix."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.choice([0, 1, 3, 9, 30])))
        out.append(f"Represent this: {words}" if i % 3 == 0 else words)
    return out + out[: n // 3]


def _tokenizers(tmp_path_factory):
    from transformers import AutoTokenizer

    from harness.encoders.backbone import resolve_model
    from harness.encoders.tiny import make_tiny_decoder

    minilm = AutoTokenizer.from_pretrained(resolve_model("minilm")[0])           # WordPiece, token types
    synthetic = AutoTokenizer.from_pretrained(resolve_model("synthetic:default/tiny-bert")[0])
    decoder = AutoTokenizer.from_pretrained(make_tiny_decoder(tmp_path_factory.mktemp("dec")))  # BOS, no EOS
    return {"minilm": minilm, "synthetic": synthetic, "decoder": decoder}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    return _tokenizers(tmp_path_factory)


@pytest.mark.parametrize("name", ["minilm", "synthetic", "decoder"])
@pytest.mark.parametrize("append_eos", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_cached_features_are_the_tokenizers(tokenizers, name, append_eos, side):
    tok = tokenizers[name]
    if append_eos and tok.eos_token_id is None:          # the same refusal, cached or not
        from harness.errors import ConfigError

        with pytest.raises(ConfigError, match="no EOS"):
            tokenize(tok, ["a"], 8, append_eos=True)
        with pytest.raises(ConfigError, match="no EOS"):
            TokenCache(tok).encode(["a"], 8, append_eos=True)
        return
    old_side = tok.padding_side
    tok.padding_side = side
    try:
        cache = TokenCache(tok)
        for batch in range(6):                     # later batches are mostly hits
            texts = _texts(batch % 3, 12)
            for max_length in (16, 64):
                want = dict(tokenize(tok, texts, max_length, append_eos=append_eos))
                got = cache.encode(texts, max_length, append_eos)
                assert list(got) == list(want)
                for key in want:
                    assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
        assert cache.hits > cache.misses > 0
    finally:
        tok.padding_side = old_side


def test_eviction_keeps_the_cache_bounded_and_exact(tokenizers):
    tok = tokenizers["minilm"]
    cache = TokenCache(tok, max_tokens=200)
    for seed in range(8):
        texts = _texts(seed, 10)
        want = dict(tokenize(tok, texts, 32))
        got = cache.encode(texts, 32)
        assert all(torch.equal(got[k], want[k]) for k in want)
        assert cache._tokens == sum(r.shape[1] for r in cache._entries.values()) <= 200


def test_no_pad_token_keeps_the_tokenizers_error(tokenizers):
    tok = tokenizers["decoder"]
    pad = tok.pad_token
    tok.pad_token = None
    try:
        with pytest.raises(ValueError):
            tokenize(tok, ["a b", "a"], 8)
        with pytest.raises(ValueError):
            TokenCache(tok).encode(["a b", "a"], 8)
    finally:
        tok.pad_token = pad


class Plain(Method):
    """The default batch, loss and reduction (the uniform baseline's)."""

    name = "test-token-cache"


def _spec(model_dir, **kw):
    from harness.train.spec import TrainSpec

    base = dict(model=model_dir, pooling="mean", batch_size=4, grad_accum=2, steps=3, warmup_steps=1, save_every=0,
                lr=1e-3, n_hard_negatives=1, temperature=0.05, query_max_length=16, doc_max_length=24,
                precision="fp32", gradient_checkpointing=False, progress=False, use_instructions=True)
    return TrainSpec(**{**base, **kw})


def test_training_run_is_bitwise_the_uncached_one(tmp_path, tiny_model, monkeypatch):
    """Losses step for step and final weights: the cache changes nothing but the time."""
    data = make_data()
    spec = _spec(tiny_model)
    cached = Plain().train(spec, data, tmp_path / "cached")
    seen = []
    real = TokenCache.encode

    def uncached(self, texts, max_length, append_eos=False):
        seen.append(len(texts))
        return dict(tokenize(self.tokenizer, list(texts), max_length, append_eos=append_eos))

    monkeypatch.setattr(TokenCache, "encode", uncached)
    plain = Plain().train(spec, data, tmp_path / "plain")
    monkeypatch.setattr(TokenCache, "encode", real)
    assert len(seen) == 2 * spec.steps * spec.grad_accum            # query + passage side per micro-batch
    from harness.train.logs import read_log

    log_a, log_b = read_log(cached.workdir / "train_log.jsonl"), read_log(plain.workdir / "train_log.jsonl")
    assert [r["loss"] for r in log_a] == [r["loss"] for r in log_b]
    wa = load_file(str(next(cached.path.glob("*.safetensors"))))
    wb = load_file(str(next(plain.path.glob("*.safetensors"))))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
