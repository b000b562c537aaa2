"""Streaming encoding (token ids packed 4 bytes a token, tokenised a window at a time), the dtype and
backend in the encoder identity / cache key, and the encoding options of ``harness eval``."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.encoders.cache import DEFAULT_SHARD_SIZE, embedding_key, encode_corpus
from harness.encoders.hf import HFEncoder, _pad_right
from harness.encoders.pooling import pool
from harness.errors import ConfigError

TEXTS = [("the cat and the dog " * (i % 9 + 1)) + f"river {i}" for i in range(53)]


def _encode_all_tokens_first(encoder: HFEncoder, texts: list[str]) -> np.ndarray:
    """The encoder's previous path: every text tokenised up front, one global length sort."""
    model, tokenizer = encoder._load()
    s = encoder.settings
    ids = encoder.tokenize(texts, s.doc_max_length, s.doc_prompt)
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")
    out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), encoder.batch_size):
            rows = order[start:start + encoder.batch_size]
            input_ids, mask = _pad_right([ids[i] for i in rows], lengths[rows], tokenizer.pad_token_id)
            emb = pool(model(input_ids=input_ids, attention_mask=mask).last_hidden_state.float(), mask,
                       s.pooling)
            if s.normalize:
                emb = torch.nn.functional.normalize(emb, p=2, dim=-1)
            out[rows] = emb.numpy()
    return out


def test_streamed_batches_are_bit_identical_to_tokenising_everything_first(tiny_bert_dir):
    encoder = HFEncoder(str(tiny_bert_dir), batch_size=8, tokenize_window=5, pooling="mean", normalize=True)
    streamed = encoder.encode_docs(TEXTS, progress=False)
    np.testing.assert_array_equal(streamed, _encode_all_tokens_first(encoder, TEXTS))
    flat, offsets = encoder.tokenize_flat(TEXTS, 512)
    assert flat.dtype == np.int32
    assert [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == encoder.tokenize(TEXTS, 512)


def test_token_lists_are_held_one_window_at_a_time(tiny_bert_dir, monkeypatch):
    encoder = HFEncoder(str(tiny_bert_dir), batch_size=4, tokenize_window=10)
    sizes: list[int] = []
    original = HFEncoder.tokenize

    def spy(self, texts, max_length, prompt=""):
        sizes.append(len(texts))
        return original(self, texts, max_length, prompt)

    monkeypatch.setattr(HFEncoder, "tokenize", spy)
    encoder.encode_docs(TEXTS[:23], progress=False)
    assert sizes == [10, 10, 3]                                     # each text tokenised once, 10 at a time


def test_fp32_identity_and_cache_key_are_unchanged(tiny_bert_dir):
    """Entries written before dtype/backend options existed stay valid: the fp32 torch identity has
    exactly the old fields; bf16 and int8 get their own keys."""
    fp32 = HFEncoder(str(tiny_bert_dir), device="cpu").identity()
    assert set(fp32) == {"encoder", "model", "pooling", "normalize", "query_prompt", "doc_prompt",
                         "query_max_length", "doc_max_length", "append_eos", "dtype"}
    assert fp32["dtype"] == "float32"
    old_key = embedding_key(dict(fp32), "corpus")
    bf16 = HFEncoder(str(tiny_bert_dir), device="cpu", dtype="bf16").identity()
    int8 = HFEncoder(str(tiny_bert_dir), device="cpu", backend="int8").identity()
    assert bf16["dtype"] == "bfloat16" and int8["backend"] == "int8-dynamic-per-channel-torch.ao"
    assert len({old_key, embedding_key(bf16, "corpus"), embedding_key(int8, "corpus")}) == 3
    assert HFEncoder(str(tiny_bert_dir), device="cpu", shard_size=7).identity() == fp32   # layout only


def test_int8_backend_is_close_but_not_equal(tiny_bert_dir):
    fp32 = HFEncoder(str(tiny_bert_dir), pooling="mean", normalize=True)
    int8 = HFEncoder(str(tiny_bert_dir), pooling="mean", normalize=True, backend="int8")
    a, b = fp32.encode_docs(TEXTS, progress=False), int8.encode_docs(TEXTS, progress=False)
    assert int8.fused["int8_linear"] > 0
    cosine = np.sum(a * b, axis=1)
    assert not np.array_equal(a, b) and cosine.min() > 0.98
    with pytest.raises(ConfigError, match="quantises an fp32 model"):
        HFEncoder(str(tiny_bert_dir), backend="int8", dtype="bf16")
    with pytest.raises(ConfigError, match="unknown encoder backend"):
        HFEncoder(str(tiny_bert_dir), backend="onnx")


def test_bf16_on_cpu_encodes_close_to_fp32(tiny_bert_dir):
    fp32 = HFEncoder(str(tiny_bert_dir), pooling="mean", normalize=True).encode_docs(TEXTS[:9], progress=False)
    bf16 = HFEncoder(str(tiny_bert_dir), pooling="mean", normalize=True, dtype="bf16")
    out = bf16.encode_docs(TEXTS[:9], progress=False)
    assert out.dtype == np.float32 and np.sum(out * fp32, axis=1).min() > 0.97


def test_encoder_shard_size_sets_the_cache_layout(tiny_bert_dir, tiny_corpus, tmp_path):
    encoder = HFEncoder(str(tiny_bert_dir), shard_size=7)
    emb = encode_corpus(encoder, tiny_corpus, tmp_path, progress=False)
    assert [count for _, count in emb.layout] == [7, 7, 7, 7, 2]
    explicit = encode_corpus(HFEncoder(str(tiny_bert_dir), shard_size=7), tiny_corpus, tmp_path / "b",
                             shard_size=11, progress=False)
    assert [count for _, count in explicit.layout] == [11, 11, 8]           # an explicit size wins
    assert DEFAULT_SHARD_SIZE == 50_000


def test_eval_cli_records_backend_and_dtype(tiny_bert_dir, tmp_path):
    from harness.cli import main

    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    docs = {f"d{i}": text for i, text in enumerate(TEXTS[:12])}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                                 for k, v in docs.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "cat river"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
    out = tmp_path / "result"
    code = main(["eval", "--model", str(tiny_bert_dir), "--dataset-dir", str(folder), "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--backend", "int8", "--shard-size", "5",
                 "--batch-size", "4", "--format", "json"])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert "int8-dynamic-per-channel-torch.ao" in text
    card = manifest.get("card") or json.loads((out / "card.json").read_text())
    assert card["extra"]["encoder_backend"] == "int8-dynamic-per-channel-torch.ao"
    metas = list((tmp_path / "cache" / "embeddings").glob("*/meta.json"))
    assert [json.loads(m.read_text())["shard_size"] for m in metas] == [5]


def test_encoding_options_for_suite_files():
    from harness.encoders.hf import encoding_card_fields, encoding_options

    assert encoding_options({"dtype": "bf16", "backend": "int8", "shard_size": 1000}) == {
        "dtype": "bfloat16", "backend": "int8", "shard_size": 1000}
    assert encoding_options({"dtype": None}) == {} and encoding_card_fields(encoding_options({"dtype": "fp32"})) == {}
    assert encoding_card_fields(encoding_options({"dtype": "fp16", "backend": "int8", "shard_size": 9})) == {
        "encoder_dtype": "float16", "encoder_backend": "int8-dynamic-per-channel-torch.ao"}
    for bad, message in (({"dtype": "int4"}, "dtype must be one of"), ({"backend": "onnx"}, "backend must be one of"),
                         ({"shard_size": 0}, "shard_size must be a positive"), ({"shards": 3}, "unknown encoding")):
        with pytest.raises(ConfigError, match=message):
            encoding_options(bad)


def test_encoding_leaves_no_utf8_copy_on_the_corpus_strings(tiny_bert_dir, tmp_path):
    """The tokenizer reads a str through CPython's UTF-8 view, which a non-ASCII str then keeps for its
    lifetime: encoding the corpus's own strings grew the corpus by ~1.3 KB a SciFact-like document (120 MB
    at 100k).  The encoder tokenises copies, so the corpus strings keep their size."""
    import sys

    from harness.data import Corpus
    from harness.encoders.texts import detached

    texts = [f"the cat — river {i} " + "naïve café " * (i % 40 + 1) for i in range(40)] + TEXTS[:10]
    corpus = Corpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts)
    sizes = [sys.getsizeof(t) for t in texts]
    encode_corpus(HFEncoder(str(tiny_bert_dir)), corpus, tmp_path, shard_size=16, progress=False)
    assert [sys.getsizeof(t) for t in texts] == sizes
    HFEncoder(str(tiny_bert_dir)).tokenize(texts, 512)              # the cause, shown on one call
    copies = detached(texts)
    assert [sys.getsizeof(t) for t in texts] == sizes and copies == texts
    HFEncoder(str(tiny_bert_dir))._load()[1](copies)               # the tokenizer itself on the copies
    assert sum(sys.getsizeof(c) for c in copies) > sum(sizes)       # grew: what the corpus would have kept
