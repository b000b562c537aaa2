"""WorldSpec: presets, validation with clear messages, fingerprints, round trips."""
from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.synthetic import DomainSpec, WorldSpec


@pytest.mark.parametrize("preset", ["default", "tdro", "peg"])
def test_presets_are_valid_and_distinct(preset):
    spec = getattr(WorldSpec, preset)()
    assert spec.name == preset
    assert WorldSpec.from_dict(spec.to_dict()) == spec
    assert WorldSpec.from_dict(spec.to_dict()).fingerprint() == spec.fingerprint()


def test_default_composition():
    spec = WorldSpec.default()
    roles = {d.name: d.role for d in spec.domains}
    assert roles == {"latin_qa": "easy", "latin_synonyms": "hard", "latin_noisy": "noise",
                     "cyrillic_news": "easy", "cjk_qa": "easy", "thai_sts": "easy"}
    scripts = {spec.language(d.language).script for d in spec.domains}
    assert scripts == {"latin", "latin-ext", "cyrillic", "cjk", "thai"}
    hard = spec.domain("latin_synonyms")
    assert hard.synonym_rate == 1.0 and hard.n_train < spec.domain("latin_qa").n_train
    assert spec.domain("latin_noisy").label_noise == 1.0
    assert spec.domain("thai_sts").symmetric and spec.domain("thai_sts").task == "sts"


def test_peg_preset_plants_false_positives_and_near_duplicates():
    spec = WorldSpec.peg()
    assert all(d.false_positive_rate == 0.2 and d.near_duplicate_rate == 1.0 for d in spec.domains)
    assert all(d.role == "easy" and d.label_noise == 0 for d in spec.domains)


def test_tdro_preset_has_no_row_level_label_errors():
    spec = WorldSpec.tdro()
    assert {d.role for d in spec.domains} == {"easy", "hard", "noise"}
    assert all(d.false_positive_rate == 0 and d.false_negative_rate == 0 for d in spec.domains)
    assert spec.domain("latin_noisy").n_train == max(d.n_train for d in spec.domains)


def test_fingerprint_changes_with_any_field():
    spec = WorldSpec.default()
    changed = spec.with_domain("latin_qa", false_positive_rate=0.06)
    assert changed.fingerprint() != spec.fingerprint()
    assert changed.domain("latin_qa").false_positive_rate == 0.06
    assert changed.domain("cjk_qa") == spec.domain("cjk_qa")
    assert WorldSpec.default().fingerprint() == spec.fingerprint()


def test_without_domains_switches_noise_off():
    spec = WorldSpec.default().without_domains("latin_noisy")
    assert "latin_noisy" not in [d.name for d in spec.domains] and len(spec.domains) == 5


@pytest.mark.parametrize("changes, message", [
    ({"false_positive_rate": 1.5}, "false_positive_rate=1.5 is not in [0, 1]"),
    ({"language": "klingon"}, "unknown language 'klingon'"),
    ({"role": "medium"}, "unknown role 'medium'"),
    ({"near_duplicate_keep": 3}, "near_duplicate_keep (3) must be below query_terms (3)"),
    ({"query_terms": 9}, "query_terms (9) exceeds doc_terms (8)"),
    ({"n_topics": 1}, "n_topics=1 must be in [2, 12]"),
    ({"n_docs": 100}, "n_docs (100) is too small for 80 test queries"),
    ({"name": "a/b"}, "the name must be a plain file name"),
])
def test_invalid_domain_specs_raise_config_errors(changes, message):
    base = WorldSpec.default()
    with pytest.raises(ConfigError) as info:
        base.with_domain("latin_qa", **changes)
    assert message in str(info.value)
    assert str(info.value).startswith(f"domain {changes.get('name', 'latin_qa')!r}: ")


def test_duplicate_domain_names_are_refused():
    spec = WorldSpec.default()
    with pytest.raises(ConfigError, match="duplicate domain names"):
        WorldSpec(spec.languages, spec.domains + (DomainSpec("latin_qa", "xla"),))


def test_unknown_domain_lookup_names_the_choices():
    with pytest.raises(ConfigError, match="unknown domain 'nope'.*latin_qa"):
        WorldSpec.default().domain("nope")


def test_from_dict_rejects_unknown_fields():
    data = WorldSpec.default().to_dict()
    data["domains"][0]["colour"] = "blue"
    with pytest.raises(ConfigError, match="invalid world spec"):
        WorldSpec.from_dict(data)
