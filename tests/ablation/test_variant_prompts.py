"""A variant's own evaluation prompts (``prompts: {query, doc}``): variant > benchmark card > model registry.

The card's prompts are the protocol every model of a benchmark is evaluated with; a released checkpoint whose
authors encode without a prompt (paper 000 Table 4's mContriever) sets its own at variant level, which goes into
its evaluation cell's key and manifest, and reaches the encoder over the card's (harness.pipeline.build_encoder
applies a card's prompt only where the encoder's keywords leave it unset)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from harness.ablation import cell_work, load_suite
from harness.ablation.cells import expand_train_cells
from harness.ablation.spec import parse_suite
from harness.ablation.suite_state import SuiteState
from harness.encoders import refs
from harness.errors import ConfigError
from harness.pipeline import ModelSpec, build_encoder
from harness.protocol import ProtocolCard

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"
TINY = "synthetic:default/tiny-bert"


@pytest.fixture
def registry_prompted(monkeypatch):
    """An alias of the tiny model whose registry entry has its own prompts (as a known checkpoint's)."""
    path, defaults = refs.resolve_model(TINY)
    prompted = refs.ModelDefaults(**{**defaults.__dict__, "query_prompt": "registry: ", "doc_prompt": "registry doc: "})
    monkeypatch.setitem(refs.ALIASES, "prompted-tiny", (lambda: path, prompted))
    return "prompted-tiny"


def _prompts(encoder) -> tuple[str, str]:
    return encoder.settings.query_prompt, encoder.settings.doc_prompt


def test_variant_prompts_win_over_the_card_which_wins_over_the_registry(registry_prompted):
    plain, card = ProtocolCard(), ProtocolCard(query_prompt="card: ")
    assert _prompts(build_encoder(ModelSpec(registry_prompted), plain)) == ("registry: ", "registry doc: ")
    assert _prompts(build_encoder(ModelSpec(registry_prompted), card)) == ("card: ", "registry doc: ")
    variant = ModelSpec(registry_prompted, overrides={"query_prompt": "", "doc_prompt": "variant doc: "})
    encoder = build_encoder(variant, card)
    assert _prompts(encoder) == ("", "variant doc: ")            # "" is no prompt, not "unset"
    # the prompt reaches the text: the query encodes as the raw text does without any prompt
    bare = build_encoder(ModelSpec(TINY), plain)
    assert _prompts(bare) == ("", "")
    with torch.no_grad():
        ours, raw = encoder.encode_queries(["who wrote it"]), bare.encode_queries(["who wrote it"])
        carded = build_encoder(ModelSpec(registry_prompted), card).encode_queries(["who wrote it"])
    assert ours == pytest.approx(raw)
    assert not carded == pytest.approx(raw)


def _mini(prompts: dict | None, at_scale: bool = False):
    raw = yaml.safe_load(MINI.read_text(encoding="utf-8"))
    raw["scales"]["tiny"]["benchmarks"][0]["options"] = {"query_prompt": "card: "}
    released: dict = {"id": "released", "method": "none", "model": TINY}
    if prompts is not None:
        if at_scale:
            released["scales"] = {"tiny": {"prompts": prompts}}
        else:
            released["prompts"] = prompts
    raw["variants"] = [*raw["variants"], released, {"id": "released-carded", "method": "none", "model": TINY}]
    return parse_suite(raw, MINI)


@pytest.mark.parametrize("at_scale", [False, True])
def test_the_variant_prompts_reach_the_evaluated_encoder_and_its_key(tmp_path, monkeypatch, at_scale):
    suite = _mini({"query": ""}, at_scale)
    state = SuiteState(suite, "tiny", tmp_path, load_data=False)
    seen: list[tuple[ModelSpec, ProtocolCard, dict]] = []
    monkeypatch.setattr(cell_work, "evaluate_model", lambda spec, loaded, out, extra_manifest, **_:
                        seen.append((spec, loaded.card, extra_manifest["cell"])))
    cells = {c.train.variant.id: c for c in state.eval_cells if c.benchmark.id == "latin_qa"}
    for variant in ("released", "released-carded"):
        cell_work._evaluate_claimed(state, cells[variant], tmp_path / variant, None)
    (spec, card, record), (spec_carded, _, record_carded) = seen
    assert card.query_prompt == "card: "                           # the protocol card is the benchmark's
    assert _prompts(build_encoder(spec, card)) == ("", "")          # the variant's: no prompt
    assert _prompts(build_encoder(spec_carded, card)) == ("card: ", "")
    assert record["variant_evaluation"] == {"prompts": {"query_prompt": ""}}     # in the manifest
    assert "variant_evaluation" not in record_carded
    # one training cell (the same untrained model), two evaluation cells: the prompts are in the eval key
    assert cells["released"].train.key == cells["released-carded"].train.key
    assert cells["released"].key != cells["released-carded"].key
    # a variant without prompts keeps the key it had before the setting existed
    assert cells["released-carded"].key == {c.train.variant.id: c for c in SuiteState(
        _mini(None), "tiny", tmp_path, load_data=False).eval_cells if c.benchmark.id == "latin_qa"}["released"].key


def test_prompts_are_checked_and_a_scale_has_none():
    with pytest.raises(ConfigError, match="colour"):
        _mini({"query": "", "colour": "red"})
    with pytest.raises(ConfigError, match="query"):
        _mini({"query": 3})
    raw = copy.deepcopy(_mini(None).raw)
    raw["scales"]["tiny"]["prompts"] = {"query": ""}        # a scale's prompts are its benchmarks' cards
    with pytest.raises(ConfigError, match="prompts"):
        parse_suite(raw, MINI)


def test_tdro_table4_mcontriever_is_evaluated_without_the_cards_instruction():
    suite = load_suite("tdro")
    for scale in ("paper", "paper-llama3-8b", "paper-as-written"):
        cells = {c.variant.id: c for c in expand_train_cells(suite, scale, load_data=False)}
        assert cells["mcontriever"].model == "facebook/mcontriever-msmarco"
        assert cells["mcontriever"].variant_evaluation == {"prompts": {"query_prompt": "", "doc_prompt": ""}}
        assert cells["me5-large-inst"].variant_evaluation == {}                # the cards' instruction
    # below paper scale: the one shared untrained-backbone cell of the released rows, no prompts of its own
    tiny = {c.variant.id: c for c in expand_train_cells(suite, "tiny", load_data=False)}
    assert tiny["mcontriever"].key == tiny["me5-large-inst"].key and tiny["mcontriever"].variant_evaluation == {}
    # the registry's encoding of mContriever: mean pooling, unnormalised (its model card / contriever README)
    _, defaults = refs.resolve_model("facebook/mcontriever-msmarco")
    assert (defaults.pooling, defaults.normalize, defaults.query_prompt, defaults.doc_prompt) == ("mean", False, "", "")


class _RecordingMethod:
    """A trained method's encoder factory that records the keywords each encoder is built with."""

    def __init__(self, kind: str = "dense"):
        self.kind, self.calls = kind, []

    def encoder(self, ckpt, **kwargs):
        self.calls.append(kwargs)
        return type("Enc", (), {"kind": self.kind})()


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_a_trained_model_is_evaluated_with_the_cards_prompts_and_lengths(tmp_path, monkeypatch, kind):
    """A trained model saves no prompt and its training lengths (harness.train.model.encoder_settings); the card's
    prompts and evaluation lengths (tDRO's instructions, COCO-DR's 64/128) must reach its encoder, as they reach a
    released model's; the variant's own prompts still win (dense only)."""
    raw = yaml.safe_load(MINI.read_text(encoding="utf-8"))
    raw["scales"]["tiny"]["benchmarks"][0]["options"] = {"query_prompt": "card: ", "query_max_length": 12,
                                                         "doc_max_length": 20}
    raw["variants"][1]["prompts"] = {"query": "mine: "} if kind == "dense" else None
    if raw["variants"][1]["prompts"] is None:
        del raw["variants"][1]["prompts"]
    state = SuiteState(parse_suite(raw, MINI), "tiny", tmp_path, load_data=False)
    method = _RecordingMethod(kind)
    monkeypatch.setattr(cell_work, "get_method", lambda name: method)
    monkeypatch.setattr(cell_work, "_trained", lambda state, cell: object())
    specs: list[ModelSpec] = []
    monkeypatch.setattr(cell_work, "evaluate_model", lambda spec, *a, **k: specs.append(spec))
    cells = {(c.train.variant.id, c.benchmark.id): c for c in state.eval_cells}
    for variant in ("uniform", "hn-only"):
        method.calls.clear()
        cell_work._evaluate_claimed(state, cells[(variant, "latin_qa")], tmp_path / variant, None)
        assert method.calls[0] == {}                                  # the kind is read from a plain build
        want = {"query_prompt": "card: ", "query_max_length": 12, "doc_max_length": 20}
        if variant == "hn-only" and kind == "dense":
            want["query_prompt"] = "mine: "
        assert method.calls[1:] == [want]
        assert specs[-1].encoder is not None
    # a benchmark whose card sets none of them builds the encoder once, as before
    method.calls.clear()
    cell_work._evaluate_claimed(state, cells[("uniform", "cjk_qa")], tmp_path / "cjk", None)
    assert method.calls == [{}]
