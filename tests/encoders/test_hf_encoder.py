"""HFEncoder: order restoration, settings layers, identity, LoRA adapters, and parity with sentence-transformers."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from optional_extras import require_extra

from harness.encoders.hf import HFEncoder, load_encoder, resolve_dtype
from harness.encoders.settings import ENCODER_CONFIG_FILE, EncoderSettings
from harness.errors import ConfigError, InputError

TEXTS = [
    "a",
    "the red fish swims in the long river near the old city house",
    "cat",
    "protein gene drug effect",
    "one two three four five six seven eight nine ten one two three four five six seven eight nine ten",
    "science",
    "water energy light sound",
]


@pytest.mark.parametrize("pooling", ["cls", "mean", "last"])
def test_length_sorted_batches_restore_input_order(tiny_bert_dir, pooling):
    """Sorted, padded batches equal encoding every text on its own (no padding, input order)."""
    enc = HFEncoder(str(tiny_bert_dir), pooling=pooling, normalize=True, batch_size=3)
    batched = enc.encode_docs(TEXTS, progress=False)
    alone = np.concatenate([enc.encode_docs([t], batch_size=1, progress=False) for t in TEXTS])
    assert batched.dtype == np.float32 and batched.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-6)


def test_empty_input_gives_empty_matrix(tiny_bert_dir):
    out = HFEncoder(str(tiny_bert_dir)).encode_docs([], progress=False)
    assert out.shape == (0, 32) and out.dtype == np.float32


def test_separate_query_and_doc_max_lengths(tiny_bert_dir):
    enc = HFEncoder(str(tiny_bert_dir), query_max_length=4, doc_max_length=6)
    long_text = "one two three four five six seven eight"
    # Truncation: [CLS] + 2 words + [SEP] for queries, [CLS] + 4 words + [SEP] for docs.
    np.testing.assert_allclose(enc.encode_queries([long_text], progress=False),
                               enc.encode_queries(["one two"], progress=False), atol=1e-6)
    np.testing.assert_allclose(enc.encode_docs([long_text], progress=False),
                               enc.encode_docs(["one two three four"], progress=False), atol=1e-6)


def test_settings_layers_defaults_saved_file_and_overrides(tiny_bert_dir, tmp_path):
    from harness.encoders.tiny import make_tiny_bert

    plain = HFEncoder(str(tiny_bert_dir))
    assert (plain.settings.pooling, plain.settings.normalize, plain.similarity) == ("cls", False, "dot")
    saved = EncoderSettings(pooling="mean", normalize=True, query_prompt="q: ", doc_prompt="d: ",
                            query_max_length=32, doc_max_length=128)
    folder = make_tiny_bert(tmp_path / "trained", settings=saved)
    enc = HFEncoder(str(folder))
    assert enc.settings == saved and enc.similarity == "cos"
    over = HFEncoder(str(folder), pooling="cls", query_prompt="")
    assert over.settings.pooling == "cls" and over.settings.query_prompt == ""
    assert over.settings.doc_prompt == "d: " and over.settings.doc_max_length == 128


def test_minilm_alias_defaults():
    enc = HFEncoder("minilm")
    s = enc.settings
    assert (s.pooling, s.normalize, s.query_max_length, s.doc_max_length) == ("mean", True, 256, 256)
    assert enc.similarity == "cos"
    assert enc._model is None  # weights load lazily; identity() does not need them
    assert enc.identity()["model"].startswith("local:")


def test_bad_harness_encoder_json_names_the_file(tiny_bert_dir, tmp_path):
    from harness.encoders.tiny import make_tiny_bert

    folder = make_tiny_bert(tmp_path / "m")
    (folder / ENCODER_CONFIG_FILE).write_text('{"pooling": "mean",\n "pool": 1}')
    with pytest.raises(InputError, match=r"harness_encoder.json: unknown key\(s\) 'pool'"):
        HFEncoder(str(folder))
    (folder / ENCODER_CONFIG_FILE).write_text('{"pooling": "max"}')
    with pytest.raises(InputError, match="harness_encoder.json: unknown pooling 'max'"):
        HFEncoder(str(folder))
    (folder / ENCODER_CONFIG_FILE).write_text('{"pooling": "mean",\n oops}')
    with pytest.raises(InputError, match=r"harness_encoder.json:2: malformed JSON"):
        HFEncoder(str(folder))


@pytest.mark.parametrize("kwargs, message", [
    ({"pooling": "max"}, "unknown pooling 'max'"),
    ({"doc_max_length": 0}, "doc_max_length must be an integer >= 2"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"dtype": "int8"}, "unknown dtype 'int8'"),
    ({"normalize": "yes"}, "normalize must be true or false"),
])
def test_bad_options_raise_config_error(tiny_bert_dir, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        HFEncoder(str(tiny_bert_dir), **kwargs)


def test_identity_tracks_every_setting(tiny_bert_dir):
    base = HFEncoder(str(tiny_bert_dir)).identity()
    assert base == HFEncoder(str(tiny_bert_dir)).identity()
    assert base["dtype"] == "float32"
    for change in ({"pooling": "mean"}, {"normalize": True}, {"query_prompt": "q"}, {"doc_prompt": "d"},
                   {"query_max_length": 64}, {"doc_max_length": 64}, {"dtype": "bfloat16"}):
        assert HFEncoder(str(tiny_bert_dir), **change).identity() != base, change


def test_dtype_auto_is_fp32_on_cpu():
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16


def test_lora_adapter_folder_is_merged_into_its_base(tiny_bert_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    torch.manual_seed(3)
    base = AutoModel.from_pretrained(str(tiny_bert_dir))
    # init_lora_weights=False: random B, so the adapter really changes the vectors.
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"],
                                                 init_lora_weights=False))
    adapter_dir = tmp_path / "adapter"
    peft_model.save_pretrained(adapter_dir)
    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str(tiny_bert_dir)

    enc = HFEncoder(str(adapter_dir), pooling="mean")
    got = enc.encode_docs(TEXTS, progress=False)
    merged = peft_model.merge_and_unload().eval()
    tok = enc._load()[1]
    with torch.inference_mode():
        expected = []
        for text in TEXTS:
            batch = tok([text], return_tensors="pt")
            hidden = merged(**batch).last_hidden_state
            expected.append(hidden.mean(dim=1).numpy())
    np.testing.assert_allclose(got, np.concatenate(expected), atol=1e-5)
    plain = HFEncoder(str(tiny_bert_dir), pooling="mean")
    assert not np.allclose(got, plain.encode_docs(TEXTS, progress=False), atol=1e-3)
    assert enc.identity()["model"] != plain.identity()["model"]
    assert "+base=" in enc.identity()["model"]


def test_load_encoder_factory(tiny_bert_dir):
    enc = load_encoder(str(tiny_bert_dir), pooling="mean", normalize=None, batch_size=8)
    assert isinstance(enc, HFEncoder) and enc.settings.pooling == "mean" and enc.batch_size == 8
    with pytest.raises(ConfigError, match="lexical"):
        load_encoder("bm25")
    with pytest.raises(ConfigError, match="unknown encoder option"):
        load_encoder(str(tiny_bert_dir), poolng="mean")


def test_minilm_matches_sentence_transformers():
    """The real all-MiniLM-L6-v2: same vectors as SentenceTransformer.encode(normalize_embeddings=True)."""
    SentenceTransformer = require_extra("sentence_transformers").SentenceTransformer

    texts = [
        "Glucose metabolism is altered in cancer cells.",
        "BM25 is a strong lexical baseline.",
        "x",
        "Vitamin D deficiency and the risk of fractures in elderly patients: a randomised trial. " * 30,  # > 256 tokens
        "Aspirin reduces cardiovascular events.",
        "Ein deutscher Satz mit Umlauten: Äpfel über Öl.",
    ]
    enc = HFEncoder("minilm", batch_size=4)
    model = SentenceTransformer(enc.path, device="cpu")
    assert model.max_seq_length == 256
    expected = model.encode(texts, batch_size=4, normalize_embeddings=True, convert_to_numpy=True)
    got = enc.encode_docs(texts, progress=False)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(enc.encode_queries(texts, progress=False), expected, atol=1e-5)
