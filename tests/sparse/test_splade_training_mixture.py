"""Paper 003's training mixture (``harness data build splade``, suites/training_data/splade.py): Table 3's
ratios, and the BEIR-conflicting sets as an explicit option -- ``include`` (Table 3 as printed, the default)
or ``exclude`` (without quora question pairs and specter_train_triples, the other 24 renormalised) -- built
from the release-format fixtures in tests/fixtures/training_data/splade."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from harness.data.builders import build, get_recipe
from harness.data.collections import load_training_data
from harness.errors import ConfigError
from suites.training_data import splade

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training_data" / "splade"


def test_exclude_drops_the_two_beir_conflicts_and_renormalises():
    assert set(splade.BEIR_CONFLICTS) == {"quora question pairs", "specter_train_triples"}
    assert {beir for beir, _why in splade.BEIR_CONFLICTS.values()} == {"quora", "scidocs"}
    printed = splade.probabilities("include")
    kept = splade.probabilities("exclude")
    assert len(printed) == 26 and len(kept) == 24
    assert "quora_question_pairs" not in kept and "specter_train_triples" not in kept
    assert math.isclose(sum(kept.values()), 1.0)
    # 100.03 printed, minus quora 1.02 and specter 2.59: the rest over 96.42
    assert math.isclose(kept["gooaq_pairs"], 20.53 / 96.42) and math.isclose(kept["TriviaQA_pairs"], 0.50 / 96.42)
    assert math.isclose(printed["gooaq_pairs"], 20.53 / 100.03)
    # the relative proportions of the kept datasets do not change
    assert math.isclose(kept["amazon_qa"] / kept["agnews"], printed["amazon_qa"] / printed["agnews"])


def test_option_is_parsed_and_checked():
    recipe = get_recipe("splade")
    assert recipe.parse_options({})["beir_conflicts"] == "include"
    options = recipe.parse_options({"beir_conflicts": "exclude", "rows": 500})
    assert recipe.subsets(options) == splade.selected("exclude")
    assert [s.file for s in recipe.sources(options)] == [splade.BY_SUBSET[n][1] for n in splade.selected("exclude")]
    assert "quora_duplicates.jsonl.gz" not in {s.file for s in recipe.sources(options)}
    counts = recipe.counts(options)
    assert sum(counts.values()) == 500 and set(counts) == set(splade.selected("exclude"))
    with pytest.raises(ConfigError, match="beir_conflicts must be one of include, exclude"):
        recipe.parse_options({"beir_conflicts": "drop"})


def test_exclude_build_on_fixtures(tmp_path: Path):
    src = tmp_path / "sources"
    shutil.copytree(FIXTURES, src)
    n = 4000
    report = build(get_recipe("splade"), tmp_path / "out", src, {"rows": n, "seed": 3, "beir_conflicts": "exclude"},
                   offline=True)
    subsets = report.manifest["subsets"]
    assert set(subsets) == set(splade.selected("exclude")) and sum(s["rows"] for s in subsets.values()) == n
    for name, p in splade.probabilities("exclude").items():
        share = subsets[name]["rows"] / n
        assert abs(share - p) <= 4 * math.sqrt(p * (1 - p) / n), (name, share, p)
    data = load_training_data([tmp_path / "out"])
    assert sum(data.sizes) == n and set(data.names) == set(splade.selected("exclude"))
    assert {src.meta["beir_conflicts"] for src in data.sources} == {"exclude"}
    assert data.sources[data.names.index("gooaq_pairs")].meta["sampling_probability"] == pytest.approx(20.53 / 96.42)


def test_recipe_constants_equal_the_paper_text(papers_dir):
    """The recipe's 26 names and ratios are appendix A's, read from the paper's text extraction (the table has no
    number or caption in the paper; lines 224-249 of ../shared/papers/003_*.txt, one 'name<TAB>ratio' a line)."""
    (found,) = sorted(papers_dir.glob("003_*.txt"))
    lines = found.read_text(encoding="utf-8").splitlines()
    start = lines.index("Dataset Name\tSampling ratio") + 1
    printed = dict(line.split("\t") for line in lines[start:start + 26])
    assert len(printed) == 26
    assert {name: f"{ratio:.2f}" for name, (_s, _f, ratio) in splade.TABLE3.items()} == printed
