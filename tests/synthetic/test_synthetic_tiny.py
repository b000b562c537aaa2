"""Tiny models: offline loading, tokenisation of every script, encoder defaults, determinism."""
from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from harness.encoders.backbone import tokenize
from harness.errors import ConfigError
from harness.synthetic import make_tiny_model
from harness.synthetic.tiny import build_vocabulary


def test_bert_loads_offline_and_runs(tiny_bert):
    model = AutoModel.from_pretrained(tiny_bert)
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    assert model.config.model_type == "bert" and model.config.hidden_size == 32
    assert model.config.num_hidden_layers == 2 and model.config.num_attention_heads == 2
    assert tok.pad_token == "[PAD]" and tok.cls_token == "[CLS]" and tok.sep_token == "[SEP]"
    assert tok.mask_token == "[MASK]" and tok.unk_token == "[UNK]"
    batch = tok(["first text", "a second, longer text"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == tok.cls_token_id
    with torch.no_grad():
        out = model(**batch).last_hidden_state
    assert out.shape == (2, batch["input_ids"].shape[1], 32)
    assert json.loads((tiny_bert / "harness_encoder.json").read_text()) == {
        "pooling": "mean", "normalize": True, "append_eos": False, "query_max_length": 32, "doc_max_length": 64}


def test_decoder_loads_offline_with_eos_and_pad(tiny_decoder):
    model = AutoModel.from_pretrained(tiny_decoder)
    tok = AutoTokenizer.from_pretrained(tiny_decoder)
    assert model.config.model_type == "llama"
    assert tok.eos_token == "[EOS]" and tok.pad_token == "[PAD]" and tok.eos_token_id != tok.pad_token_id
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    # The tokenizer adds no special tokens itself; the encoder appends EOS for last-token pooling.
    assert tok.eos_token_id not in tok("one two")["input_ids"]
    batch = tokenize(tok, ["one two three", "four"], max_length=32, append_eos=True)
    last = batch["attention_mask"].sum(1) - 1
    assert (batch["input_ids"][torch.arange(2), last] == tok.eos_token_id).all()
    with torch.no_grad():
        out = model(**batch).last_hidden_state
    assert out.shape[-1] == 32
    assert AutoModelForCausalLM.from_pretrained(tiny_decoder).lm_head.weight.shape[0] == len(tok)
    defaults = json.loads((tiny_decoder / "harness_encoder.json").read_text())
    assert defaults["pooling"] == "last" and defaults["append_eos"] is True and defaults["normalize"] is True


def test_every_world_text_tokenises_without_unknowns_and_fits(world, tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    for name, data in world.domains.items():
        docs = [f"{t} {x}".strip() for _, t, x in data.corpus]
        docs += [p for row in data.train_rows for p in row["pos"] + row["neg"]]
        queries = [q for _, q in data.queries] + [row["query"] for row in data.train_rows]
        doc_ids = tok(docs)["input_ids"]
        query_ids = tok(queries)["input_ids"]
        assert not any(tok.unk_token_id in ids for ids in doc_ids + query_ids), name
        assert max(map(len, doc_ids)) <= 64, name
        assert max(map(len, query_ids)) <= 32, name


def test_cjk_is_split_into_characters(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    assert tok.tokenize("中国的首都是北京") == list("中国的首都是北京")
    assert tok.unk_token not in tok.tokenize("中国的首都是北京")


def test_thai_is_segmented_into_words_with_character_fallback(world, tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    lang = world.languages["xth"]
    words = lang.topics[0][:4]
    text = "".join(words)
    pieces = tok.tokenize(text)
    assert tok.unk_token not in pieces
    assert len(pieces) < len(text) / 2   # words, not characters
    assert "".join(p.removeprefix("##") for p in pieces) == tok.backend_tokenizer.normalizer.normalize_str(text)
    unseen = "สวัสดีครับ"   # real Thai, not in the vocabulary: characters, still no [UNK]
    assert tok.unk_token not in tok.tokenize(unseen)


def test_prompts_and_english_tokenise_as_words(world, tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    prompt = world.spec.domain("latin_qa").prompt
    pieces = tok.tokenize(f"Instruct: {prompt}\nQuery: x")
    assert pieces[:3] == ["instruct", ":", "given"] and tok.unk_token not in pieces
    assert tok.tokenize("zebra") == ["z", "##e", "##b", "##r", "##a"]   # unseen English: characters


def test_vocabulary_is_deterministic_and_ordered(world):
    vocab = build_vocabulary(world)
    assert vocab == build_vocabulary(world)
    assert vocab[:6] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[EOS]"]
    assert len(vocab) == len(set(vocab))
    assert {"a", "##a", "中", "ж", "##ж", "ส", "##ั"} <= set(vocab) and "##中" not in vocab
    assert any(re.fullmatch(r"[\u0e00-\u0e7f]{4,}", v) for v in vocab)


def test_same_seed_same_bytes_other_seed_differs(world, tiny_bert, tmp_path):
    again = make_tiny_model(tmp_path / "again", world)
    other = make_tiny_model(tmp_path / "other", world, seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "harness_encoder.json"):
        assert (again / name).read_bytes() == (tiny_bert / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (tiny_bert / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_bert / "tokenizer.json").read_bytes()


def test_sizes_and_masked_lm_head(world, tmp_path):
    from transformers import AutoModelForMaskedLM
    path = make_tiny_model(tmp_path / "mlm", world, hidden=48, layers=1, heads=3, mlm_head=True)
    model = AutoModelForMaskedLM.from_pretrained(path)
    assert model.config.hidden_size == 48 and model.config.num_hidden_layers == 1
    tok = AutoTokenizer.from_pretrained(path)
    batch = tok(["[MASK] text"], return_tensors="pt")
    with torch.no_grad():
        assert model(**batch).logits.shape[-1] == len(tok)


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "encoder-decoder"}, "unknown tiny model kind"),
    ({"hidden": 30, "heads": 4}, "divisible by heads"),
])
def test_bad_options_raise_config_errors(world, tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_tiny_model(tmp_path / "bad", world, **kwargs)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("kind", ["bert", "decoder"])
def test_harness_encoder_takes_its_defaults_from_the_tiny_model(world, tiny_bert, tiny_decoder, kind):
    from harness.encoders.hf import HFEncoder

    path = tiny_bert if kind == "bert" else tiny_decoder
    encoder = HFEncoder(str(path), batch_size=8)
    ident = encoder.identity()
    assert ident["pooling"] == ("mean" if kind == "bert" else "last")
    assert ident["append_eos"] is (kind == "decoder") and ident["normalize"] is True
    assert ident["query_max_length"] == 32 and ident["doc_max_length"] == 64
    texts = [data.queries[0][1] for data in world.domains.values()]   # one query per script
    emb = encoder.encode_queries(texts)
    assert emb.shape == (len(texts), 32)
    assert abs(float((emb ** 2).sum(1).mean()) - 1.0) < 1e-5
    assert len({tuple(row) for row in emb.round(5).tolist()}) == len(texts)
