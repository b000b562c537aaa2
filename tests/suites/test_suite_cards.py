"""Suites produce protocol cards whose differing fields are exactly the ones that change scores,
and comparing results with different cards is refused with a message naming those fields."""
from __future__ import annotations

import numpy as np
import pytest

from harness.benchmark import get_suite
from harness.data.run import Run
from harness.errors import ProtocolMismatchError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard, assert_comparable, card_differences
from harness.store import load_result, write_result


def test_same_data_same_card(shared_data):
    a = get_suite("beir").load(shared_data / "scifact").card
    b = get_suite("beir").load(shared_data / "scifact").card
    assert a == b and a.fingerprint() == b.fingerprint()
    assert_comparable(a, b)


# SciFact (5,183 passages, 339 judged positives) stands in for a large gallery: in WebQA and
# CMRC every passage is somebody's positive, so a sub-gallery could not drop anything.
def sub(shared_data, **options):
    return get_suite("dureader").load(shared_data / "scifact", split="test", **options)


def test_dureader_full_vs_subgallery_refused(shared_data):
    full = sub(shared_data).card
    sub_card = sub(shared_data, gallery="sub200k", gallery_size=2000, seed=7)
    assert len(sub_card.dataset.corpus) == 2000
    sub_card = sub_card.card
    diff = card_differences(full, sub_card)
    assert set(diff) == {"extra", "data_hash"}
    assert dict(sub_card.extra) == {"gallery": "sub200k", "gallery_seed": 7, "gallery_size": 2000}
    with pytest.raises(ProtocolMismatchError) as err:
        assert_comparable(full, sub_card)
    message = str(err.value)
    assert "extra" in message and "gallery" in message and "sub200k" in message and "data_hash" in message


def test_dureader_subgallery_seeds_differ(shared_data):
    a = sub(shared_data, gallery="sub200k", gallery_size=2000, seed=1)
    b = sub(shared_data, gallery="sub200k", gallery_size=2000, seed=2)
    again = sub(shared_data, gallery="sub200k", gallery_size=2000, seed=1)
    assert a.dataset.corpus.ids == again.dataset.corpus.ids                # seeded: reproducible
    assert a.dataset.corpus.ids != b.dataset.corpus.ids
    with pytest.raises(ProtocolMismatchError, match="gallery_seed"):
        assert_comparable(a.card, b.card)


def test_miracl_languages_refused(shared_data):
    te = get_suite("miracl").load(shared_data / "miracl-dev-subset" / "te").card
    ar = get_suite("miracl").load(shared_data / "miracl-dev-subset" / "ar").card
    diff = card_differences(te, ar)
    assert {"dataset", "bm25_language", "extra", "data_hash"} <= set(diff)
    assert diff["bm25_language"] == ("te", "ar")
    with pytest.raises(ProtocolMismatchError, match="bm25_language: 'te' vs 'ar'"):
        assert_comparable(te, ar)


def test_same_folder_under_two_suites_refused(shared_data):
    beir = get_suite("beir").load(shared_data / "webqa-test-ann-retrieval", language="zh").card
    dureader = get_suite("dureader").load(shared_data / "webqa-test-ann-retrieval").card
    diff = card_differences(beir, dureader, ignore=())
    assert {"suite", "metrics", "complete"} <= set(diff)
    with pytest.raises(ProtocolMismatchError, match="suite: 'beir' vs 'dureader'"):
        assert_comparable(beir, dureader)


def test_exclusion_and_answers_field_are_card_fields(shared_data):
    card = get_suite("beir").load(shared_data / "scifact").card
    with pytest.raises(ProtocolMismatchError, match="exclude_self: False vs True"):
        assert_comparable(card, card.with_(exclude_self=True))
    xquad = get_suite("mkqa").load(shared_data / "xquad-xling-retrieval").card
    assert xquad.answer_normalizer and xquad.complete
    native = xquad.with_(extra={"answers_field": "answers", "answer_lang": "und"})
    with pytest.raises(ProtocolMismatchError, match="answers_field"):
        assert_comparable(xquad, native)


def test_stored_results_keep_their_cards(shared_data, tmp_path):
    loaded = sub(shared_data, gallery="sub200k", gallery_size=2000, seed=3)
    run = Run.from_arrays(["1"], ["31715818"], [1.0])
    result = EvaluationResult(["1"], {"mrr@10": np.array([1.0])})
    write_result(tmp_path / "r", run=run, evaluation=result, card=loaded.card, manifest={"model": "x"})
    stored = load_result(tmp_path / "r")
    assert stored.card == loaded.card
    full = sub(shared_data).card
    with pytest.raises(ProtocolMismatchError, match="gallery"):
        assert_comparable(stored.card, full)
    assert isinstance(stored.card, ProtocolCard)


def test_compare_cli_refuses_results_of_different_protocols(shared_data, tmp_path, capsys):
    from harness.cli import main

    run = Run.from_arrays(["1", "3"], ["31715818", "14717500"], [1.0, 1.0])
    evaluation = EvaluationResult(["1", "3"], {"mrr@10": np.array([1.0, 0.0])})
    for name, options in (("full", {}), ("sub", {"gallery": "sub200k", "gallery_size": 2000, "seed": 1})):
        write_result(tmp_path / name, run=run, evaluation=evaluation, card=sub(shared_data, **options).card,
                     manifest={"model": name})
    assert main(["compare", "--result", str(tmp_path / "full"), "--result", str(tmp_path / "sub"),
                 "-m", "mrr@10"]) == 2
    err = capsys.readouterr().err
    assert "protocol cards differ" in err and "gallery" in err and "data_hash" in err
