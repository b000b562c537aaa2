"""The synthetic world's eval sets under the ``synthetic`` suite."""
from __future__ import annotations

import numpy as np
import pytest

from harness.benchmark import get_suite
from harness.data.run import Run
from harness.errors import ConfigError


@pytest.fixture(scope="module")
def world_dir(tmp_path_factory):
    from harness.synthetic import WorldSpec, make_world, write_world

    return write_world(make_world(WorldSpec.default(), seed=0), tmp_path_factory.mktemp("world") / "w")


def test_every_domain_loads_with_its_analyzer(world_dir):
    suite = get_suite("synthetic")
    domains = sorted(p.name for p in (world_dir / "eval").iterdir())
    assert domains
    for name in domains:
        loaded = suite.load(world_dir, dataset=name)
        assert loaded.card.suite == "synthetic" and loaded.card.dataset == name
        assert len(loaded.dataset.queries) > 0 and len(loaded.dataset.qrels) > 0
        expected_lang = loaded.meta["domain"]["bm25_language"]
        assert loaded.card.bm25_language == expected_lang
        if loaded.answers:
            assert "acc@10" in loaded.card.metrics and loaded.card.answer_normalizer


def test_oracle_run_finds_answers_in_unspaced_scripts(world_dir):
    suite = get_suite("synthetic")
    checked = 0
    for name in sorted(p.name for p in (world_dir / "eval").iterdir()):
        loaded = suite.load(world_dir, dataset=name)
        if not loaded.answers or loaded.meta["domain"].get("spaced", True):
            continue
        qrels = loaded.dataset.qrels
        positive = qrels.relevance >= 1
        run = Run.from_arrays(qrels.query_ids[positive], qrels.doc_ids[positive], np.ones(int(positive.sum())))
        result = suite.evaluate(loaded, run)
        # answers are strings taken from the relevant passages: containment must find them
        assert result.aggregate["acc@10"] > 0.95, name
        checked += 1
    assert checked >= 1


def test_domain_must_be_named(world_dir):
    with pytest.raises(ConfigError, match="pick a domain"):
        get_suite("synthetic").load(world_dir)
    with pytest.raises(ConfigError, match="unknown domain"):
        get_suite("synthetic").load(world_dir, dataset="nope")


def test_single_domain_folder(world_dir):
    folder = next((world_dir / "eval").iterdir())
    loaded = get_suite("synthetic").load(folder)
    assert loaded.card.dataset == folder.name
    assert loaded.card.bm25_language == loaded.meta["domain"]["bm25_language"]
