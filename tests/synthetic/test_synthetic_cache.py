"""The cached default world and tiny models: written once, reused, rebuilt when damaged."""
from __future__ import annotations

import time

from harness.data import load_beir
from harness.synthetic import (
    WorldSpec,
    default_tiny_model_dir,
    default_world_dir,
    read_world_info,
    tiny_model_dir,
    world_dir,
    world_fingerprint,
)
from harness.synthetic.tiny import tiny_model_fingerprint


def test_default_world_is_materialised_once(tmp_path, world):
    first = default_world_dir(tmp_path)
    assert first.parent == tmp_path / "synthetic"
    assert first.name == f"default-{world_fingerprint(WorldSpec.default(), 0)[:16]}"
    assert read_world_info(first)["fingerprint"] == world.fingerprint
    stamp = (first / "truth.json").stat().st_mtime_ns
    start = time.perf_counter()
    assert default_world_dir(tmp_path) == first
    reuse = time.perf_counter() - start
    assert (first / "truth.json").stat().st_mtime_ns == stamp   # not rewritten
    assert reuse < 0.5, f"reusing the cached world took {reuse:.3f} s"
    assert len(load_beir(first / "eval" / "cjk_qa").queries) == 60


def test_cache_root_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "env-cache"))
    assert default_world_dir().parent == tmp_path / "env-cache" / "synthetic"


def test_damaged_entry_is_rebuilt(tmp_path):
    first = default_world_dir(tmp_path)
    (first / "world.json").write_text("{broken")
    again = default_world_dir(tmp_path)
    assert again == first and read_world_info(again) is not None


def test_other_specs_and_seeds_get_their_own_entries(tmp_path):
    a = world_dir(WorldSpec.peg(), 0, tmp_path)
    b = world_dir(WorldSpec.peg(), 1, tmp_path)
    assert a != b and a.name.startswith("peg-") and read_world_info(b)["seed"] == 1


def test_default_tiny_model_is_cached(tmp_path):
    path = default_tiny_model_dir("bert", tmp_path)
    assert (path / "harness_encoder.json").exists() and (path / "tokenizer.json").exists()
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert default_tiny_model_dir("bert", tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    other_seed = tiny_model_fingerprint(world_fingerprint(WorldSpec.default(), 0), kind="bert", hidden=32, layers=2,
                                        heads=2, seed=1)
    assert other_seed[:16] not in path.name
    assert path.name.startswith("tiny-default-bert-")


def test_tiny_models_of_other_presets_are_separate_entries(tmp_path):
    from transformers import AutoTokenizer

    path = tiny_model_dir(WorldSpec.peg(), "decoder", tmp_path)
    assert path.name.startswith("tiny-peg-decoder-")
    assert tiny_model_dir(WorldSpec.peg(), "decoder", tmp_path) == path
    assert AutoTokenizer.from_pretrained(path).eos_token == "[EOS]"
