"""Known released checkpoints (harness.encoders.known, data in suites/models/known_models.yaml).

The released models themselves are not reachable here (no network), so local stand-ins of the same
architectures play them: MiniLM (BERT, dense, mean pooling), SPLADE-tiny (BERT masked LM, sparse) and
the tiny Llama-style decoder (last token + EOS), each copied into a temporary Hugging Face hub cache under
a made-up hub id.  transformers then loads them through its ordinary hub path (offline, from the cache),
exactly as it loads a downloaded release; only the registry entries are the test's own.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.encoders import known
from harness.encoders.known import (
    KNOWN_MODELS,
    KnownModel,
    find_known_model,
    known_models,
    load_known_models,
    register_known_model,
    register_known_models,
)
from harness.encoders.refs import ALIAS_ORIGINS, ALIASES, ModelDefaults, resolve_model
from harness.encoders.settings import EncoderSettings, resolve_settings
from harness.errors import ConfigError, InputError

REPO = Path(__file__).resolve().parents[2]
COMMIT = "c" * 40
MINILM_SOURCES = (("pooling", "stand-in: MiniLM's 1_Pooling config (mean tokens)"),
                  ("normalize", "stand-in: MiniLM's Normalize module"),
                  ("query_prompt", "test prompt"), ("document_prompt", "test prompt"),
                  ("query_max_length", "test length"), ("doc_max_length", "test length"))
STANDIN_MINILM = KnownModel(hub_id="standin/minilm-mean", kind="dense", name="MiniLM stand-in",
                            aliases=("standin-minilm",), pooling="mean", normalize=True, query_prompt="query: ",
                            document_prompt="passage: ", query_max_length=64, doc_max_length=128,
                            papers=("000/table4:mE5-large-inst",), sources=MINILM_SOURCES)
STANDIN_SPLADE = KnownModel(hub_id="standin/splade", kind="sparse", pooling="max", doc_max_length=64,
                            similarity="dot", sources=(("pooling", "stand-in: SPLADE max aggregation"),
                                                       ("doc_max_length", "test length"),
                                                       ("similarity", "SPLADE scores by dot product")))
STANDIN_DECODER = KnownModel(hub_id="standin/decoder", kind="decoder", pooling="last", append_eos=True,
                             normalize=True, query_max_length=32, doc_max_length=48,
                             sources=(("pooling", "last token"), ("append_eos", "EOS appended"),
                                      ("normalize", "normalised"), ("query_max_length", "test length"),
                                      ("doc_max_length", "test length")))
QUERIES = ["what do cats eat", "the river bank after rain"]
DOCS = ["cats eat fish and mice", "rain made the river bank muddy", "a short one"]


def _hub_copy(root: Path, repo_id: str, model: Path) -> Path:
    """``model``'s files as the cached snapshot of ``repo_id`` (the layout huggingface_hub writes)."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(model, snapshot, ignore=shutil.ignore_patterns("harness_encoder.json", ".gitattributes"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def standins():
    """The three stand-in entries registered (and removed again afterwards)."""
    KNOWN_MODELS.discover()
    # The registry has no removal (a process never unregisters): the tables are restored by hand.
    items, descriptions, by_name = dict(KNOWN_MODELS._items), dict(KNOWN_MODELS._descriptions), dict(known._BY_NAME)
    for model in (STANDIN_MINILM, STANDIN_SPLADE, STANDIN_DECODER):
        register_known_model(model)
    yield
    KNOWN_MODELS._items.clear()
    KNOWN_MODELS._items.update(items)
    KNOWN_MODELS._descriptions.clear()
    KNOWN_MODELS._descriptions.update(descriptions)
    known._BY_NAME.clear()
    known._BY_NAME.update(by_name)


@pytest.fixture
def hub(tmp_path, monkeypatch, standins, tiny_decoder_dir):
    """A hub cache holding the stand-ins, read offline."""
    import huggingface_hub.constants

    root = tmp_path / "hub"
    _hub_copy(root, STANDIN_MINILM.hub_id, Path(resolve_model("minilm")[0]))
    _hub_copy(root, STANDIN_SPLADE.hub_id, Path(resolve_model("splade-tiny")[0]))
    _hub_copy(root, STANDIN_DECODER.hub_id, Path(tiny_decoder_dir))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads both once, at import: what transformers' hub loading consults.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return root


# ---------------------------------------------------------------------------- resolution
def test_a_known_hub_id_or_alias_resolves_to_its_own_settings(standins):
    for name in ("standin/minilm-mean", "Standin/MiniLM-Mean", "standin-minilm", "STANDIN-MINILM"):
        path, defaults = resolve_model(name)
        assert path == "standin/minilm-mean"
        assert (defaults.pooling, defaults.normalize, defaults.representation) == ("mean", True, "dense")
        assert (defaults.query_prompt, defaults.doc_prompt) == ("query: ", "passage: ")
        assert (defaults.query_max_length, defaults.doc_max_length, defaults.max_length) == (64, 128, 128)
    settings = resolve_settings(resolve_model("standin-minilm")[1], {}, {})
    assert settings == EncoderSettings(pooling="mean", normalize=True, query_prompt="query: ", doc_prompt="passage: ",
                                       query_max_length=64, doc_max_length=128, append_eos=False)
    _, sparse = resolve_model("standin/splade")
    assert (sparse.representation, sparse.pooling, sparse.max_length, sparse.normalize) == ("sparse", "max", 64, False)
    _, decoder = resolve_model("standin/decoder")
    assert (decoder.pooling, decoder.append_eos, decoder.normalize) == ("last", True, True)


def test_an_unknown_hub_id_keeps_todays_defaults(standins):
    assert find_known_model("acme/not-a-known-model") is None
    assert resolve_model("acme/not-a-known-model") == ("acme/not-a-known-model", ModelDefaults())
    settings = resolve_settings(resolve_model("acme/not-a-known-model")[1], {}, {})
    assert settings == EncoderSettings(pooling="cls", normalize=False, query_prompt="", doc_prompt="",
                                       query_max_length=512, doc_max_length=512, append_eos=False)


def test_a_setting_no_source_states_keeps_the_harness_default():
    model = KnownModel(hub_id="acme/partial", kind="dense", query_max_length=64,
                       sources=(("query_max_length", "paper, Section 4"),))
    from harness.encoders.refs import known_defaults

    defaults = known_defaults(model)
    assert (defaults.pooling, defaults.normalize, defaults.append_eos, defaults.query_prompt) == \
        ("cls", False, False, "")
    assert (defaults.query_max_length, defaults.doc_max_length, defaults.max_length) == (64, None, 64)
    assert resolve_settings(defaults, {}, {}).doc_max_length == 64


def test_explicit_settings_win_over_the_known_ones(hub):
    from harness.encoders.hf import HFEncoder

    enc = HFEncoder("standin-minilm", pooling="cls", query_prompt="", query_max_length=32, device="cpu")
    assert enc.path == "standin/minilm-mean"
    assert enc.settings == EncoderSettings(pooling="cls", normalize=True, query_prompt="", doc_prompt="passage: ",
                                           query_max_length=32, doc_max_length=128)


# ---------------------------------------------------------------------------- encoding through the hub path
def test_the_query_prompt_is_prepended_to_queries_and_the_document_prompt_to_documents(hub):
    from harness.encoders.hf import HFEncoder

    known = HFEncoder("standin/minilm-mean", device="cpu", batch_size=8)
    assert known.settings.query_prompt == "query: " and known.similarity == "cos"
    # The same weights with no prompts (explicit empty prompts win), fed the prefixed texts by hand.
    plain = HFEncoder("standin/minilm-mean", query_prompt="", doc_prompt="", device="cpu", batch_size=8)
    queries = known.encode_queries(QUERIES, progress=False)
    docs = known.encode_docs(DOCS, progress=False)
    np.testing.assert_array_equal(queries, plain.encode_queries([f"query: {q}" for q in QUERIES], progress=False))
    np.testing.assert_array_equal(docs, plain.encode_docs([f"passage: {d}" for d in DOCS], progress=False))
    # Documents do not get the query prompt, and the prompt changes the vectors.
    assert not np.allclose(docs, plain.encode_docs([f"query: {d}" for d in DOCS], progress=False))
    assert not np.allclose(queries, plain.encode_queries(QUERIES, progress=False))
    # Mean pooling and normalisation as registered: unit vectors, unlike CLS pooling of the same model.
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, rtol=1e-5)
    cls = HFEncoder("standin/minilm-mean", pooling="cls", device="cpu").encode_queries(QUERIES, progress=False)
    assert not np.allclose(queries, cls)


def test_prompts_reach_the_encoder_at_evaluation(hub):
    from harness.pipeline import ModelSpec, build_encoder
    from harness.protocol import ProtocolCard

    encoder = build_encoder(ModelSpec("standin-minilm"), ProtocolCard())
    identity = encoder.identity()
    assert (identity["query_prompt"], identity["doc_prompt"], identity["pooling"]) == ("query: ", "passage: ", "mean")
    assert identity["model"] == f"hub:standin/minilm-mean@{COMMIT}"
    # A protocol card's prompt is a protocol setting: it applies to every model, known ones included.
    carded = build_encoder(ModelSpec("standin-minilm"), ProtocolCard(query_prompt="Q: "))
    assert carded.identity()["query_prompt"] == "Q: " and carded.identity()["doc_prompt"] == "passage: "


def test_a_known_sparse_model_loads_as_a_sparse_encoder(hub):
    from harness.encoders.sparse import is_sparse_model, load_sparse_encoder
    from harness.pipeline import ModelSpec

    assert is_sparse_model("standin/splade") and ModelSpec("standin/splade").is_sparse
    known = load_sparse_encoder("standin/splade", device="cpu")
    assert (known.pooling, known.query_max_length, known.doc_max_length) == ("max", 64, 64)
    shipped = load_sparse_encoder("splade-tiny", query_max_length=64, doc_max_length=64, device="cpu")
    a, b = known.encode_docs(DOCS, progress=False), shipped.encode_docs(DOCS, progress=False)
    assert a.nnz.min() > 0
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)


def test_a_known_decoder_pools_its_last_token_after_an_appended_eos(hub, tiny_decoder_dir):
    from harness.encoders.hf import HFEncoder

    known = HFEncoder("standin/decoder", device="cpu")
    assert (known.settings.pooling, known.settings.append_eos, known.settings.normalize) == ("last", True, True)
    assert (known.settings.query_max_length, known.settings.doc_max_length) == (32, 48)
    local = HFEncoder(str(tiny_decoder_dir), pooling="last", append_eos=True, normalize=True, query_max_length=32,
                      doc_max_length=48, query_prompt="", doc_prompt="", device="cpu")
    np.testing.assert_array_equal(known.encode_queries(QUERIES, progress=False),
                                  local.encode_queries(QUERIES, progress=False))
    no_eos = HFEncoder("standin/decoder", append_eos=False, device="cpu").encode_queries(QUERIES, progress=False)
    assert not np.allclose(known.encode_queries(QUERIES, progress=False), no_eos)


def test_the_offline_check_looks_an_alias_up_as_its_hub_id(hub):
    from harness.encoders.model_check import check_model

    check_model("standin-minilm")
    check_model("standin/minilm-mean")
    with pytest.raises(ConfigError, match="'intfloat/multilingual-e5-large': not a local folder"):
        check_model("me5-large")      # known, but not in this cache: the message names the hub id


# ---------------------------------------------------------------------------- the listing
def test_harness_list_models_json_lists_aliases_known_models_and_sources(standins, capsys):
    from harness.cli import main

    assert main(["list", "models", "--json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(ALIASES) <= set(records)
    assert records["minilm"]["origin"] == "alias" and records["minilm"]["settings"]["pooling"]["value"] == "mean"
    standin = records["standin/minilm-mean"]
    assert (standin["kind"], standin["aliases"], standin["cached"]) == ("dense", ["standin-minilm"], False)
    assert standin["loads_from"].startswith("hub id standin/minilm-mean (not cached")
    assert standin["settings"]["query_prompt"] == {"value": "query: ", "source": "test prompt"}
    assert standin["settings"]["doc_prompt"] == {"value": "passage: ", "source": "test prompt"}
    assert standin["settings"]["append_eos"]["value"] is False
    assert standin["settings"]["append_eos"]["source"].startswith("not stated")
    e5 = records["intfloat/multilingual-e5-large"]
    assert e5["settings"]["pooling"]["value"] == "mean" and "model card" in e5["settings"]["pooling"]["source"]
    assert records["naver/splade-cocondenser-ensembledistil"]["kind"] == "sparse"
    assert records["intfloat/e5-mistral-7b-instruct"]["settings"]["instruction"]["value"].startswith("Instruct: ")
    assert main(["list", "models"]) == 0
    text = capsys.readouterr().out
    assert "standin/minilm-mean  [dense]  MiniLM stand-in (aliases: standin-minilm)" in text
    assert "    sources:\n      pooling: stand-in: MiniLM's 1_Pooling config (mean tokens)\n" in text
    assert "      append_eos: not stated by a source: harness default\n" in text


# ---------------------------------------------------------------------------- the shipped data file
def test_the_shipped_entries_cover_the_papers_baselines_and_cite_real_table_rows():
    models = {m.hub_id: m for m in known_models()}
    for hub_id in ("BAAI/bge-m3", "intfloat/multilingual-e5-large", "intfloat/multilingual-e5-base",
                   "intfloat/multilingual-e5-small", "intfloat/e5-mistral-7b-instruct",
                   "naver/splade-cocondenser-ensembledistil", "naver/splade-v3", "Luyu/co-condenser-marco",
                   "facebook/contriever-msmarco", "BAAI/bge-large-zh", "moka-ai/m3e-base",
                   "OpenMatch/cocodr-base-msmarco", "OpenMatch/cocodr-large-msmarco", "TownsWu/PEG"):
        assert hub_id in models, hub_id
    assert models["BAAI/bge-m3"].pooling == "cls" and models["BAAI/bge-m3"].normalize is True
    assert models["naver/splade-v3"].kind == "sparse"
    assert models["intfloat/e5-mistral-7b-instruct"].append_eos is True
    for model in models.values():
        for ref in model.papers:
            paper_table, _, row = ref.partition(":")
            paper, table = paper_table.split("/")
            data = yaml.safe_load((REPO / "reports" / "papers" / paper / f"{table}.yaml").read_text(encoding="utf-8"))
            names = {str(item.get(k)) for key in ("rows", "columns") for item in data.get(key) or []
                     if isinstance(item, dict) for k in ("id", "key", "label")}
            assert row in names, f"{model.hub_id}: {ref} names no row or column of {paper}/{table}"
    # A shipped alias (minilm, ...) is looked up first: no known model may reuse one.
    known_names = {name.lower() for m in models.values() for name in m.names()}
    assert not known_names & set(ALIASES)
    assert set(ALIAS_ORIGINS) == set(ALIASES)


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "known.yaml"
    path.write_text(body, encoding="utf-8")
    return path


def test_a_bad_data_file_names_the_file_the_line_and_the_problem(tmp_path):
    head = "schema: 1\nmodels:\n  - hub_id: acme/a\n    kind: dense\n    pooling: mean\n    sources: {pooling: card}\n"
    assert [m.hub_id for m in load_known_models(_write(tmp_path, head))] == ["acme/a"]
    cases = {
        "  - hub_id: acme/b\n    kind: dense\n    pooling: mean\n": "no source for pooling",
        "  - hub_id: acme/b\n    kind: sparse\n    pooling: mean\n    sources: {pooling: x}\n":
            "pooling of a sparse model must be one of max, sum",
        "  - hub_id: acme/b\n    kind: dense\n    poolin: mean\n": "unknown key(s) 'poolin'",
        "  - hub_id: acme/b\n    kind: dense\n    normalize: false\n    similarity: cos\n"
        "    sources: {normalize: x, similarity: y}\n": "similarity 'cos' needs normalize: true",
        "  - hub_id: acme/b\n    kind: dense\n    sources: {pooling: x, colour: y}\n": "unknown setting 'colour'",
        "  - hub_id: acme/b\n    kind: decoder\n    pooling: mean\n    sources: {pooling: x}\n":
            "a decoder entry states its pooling, the last token ('last'), got 'mean'",
        "  - hub_id: acme/b\n    kind: dense\n    instruction: 'Query: '\n    sources: {instruction: x}\n":
            "instruction must hold '{task}'",
        "  - kind: dense\n": "entry without 'hub_id'",
        "  - hub_id: acme/b\n    kind: dense\n    papers: [table1]\n": "paper row 'table1' must read",
        "  - hub_id: acme/b\n    kind: dense\n    aliases: me5\n": "'aliases' must be a list",
    }
    for body, problem in cases.items():
        with pytest.raises(InputError) as info:
            load_known_models(_write(tmp_path, head + body))
        message = str(info.value)
        assert problem in message and "known.yaml" in message and ":7" in message, message
    with pytest.raises(InputError, match="'schema' must be 1"):
        load_known_models(_write(tmp_path, "schema: 2\nmodels: []\n"))


def test_a_name_two_entries_answer_to_is_refused_naming_both(tmp_path, standins):
    body = ("schema: 1\nmodels:\n  - hub_id: acme/clash\n    kind: dense\n    aliases: [standin-minilm]\n")
    with pytest.raises(InputError, match=r"'standin-minilm' already names 'standin/minilm-mean'"):
        register_known_models(_write(tmp_path, body))
    with pytest.raises(ConfigError, match="already names 'intfloat/multilingual-e5-large'"):
        register_known_model(KnownModel(hub_id="acme/other", kind="dense", aliases=("ME5-LARGE",)))
