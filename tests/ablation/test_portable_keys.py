"""Run keys do not depend on where the data lies (harness.method.portable).

The mining suite's options hold paths the runner resolves: ``{shared}/scifact/corpus.jsonl`` and
``index:{shared}/train-multidomain/...`` at small scale, ``synthetic:peg/truth.json`` (a world in the cache
folder) at tiny scale.  The same suite under another data root or cache folder must get the same keys while
the method still receives the real paths; another relative path must still change the key.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.ablation.resolve import substitute
from harness.method import train_run_config
from harness.method.portable import data_roots, portable_paths
from harness.synthetic.writer import resolve_cache_root
from harness.train.spec import TrainSpec


@pytest.fixture
def clean_env(monkeypatch):
    """No HARNESS_* folder from the calling shell: the roots are what each test sets."""
    import os

    for variable in [v for v in os.environ if v.startswith("HARNESS_")]:
        monkeypatch.delenv(variable)
    return monkeypatch


def _cells(scale: str) -> dict[str, tuple[str, dict]]:
    cells = expand_train_cells(load_suite("mining"), scale, load_data=False)
    return {c.system: (c.key, c.train_spec.method_options) for c in cells if c.trains}


def test_mining_small_keys_equal_under_two_shared_roots(clean_env, tmp_path):
    by_root = {}
    for name in ("one", "two"):
        root = tmp_path / name / "data"
        clean_env.setenv("HARNESS_SHARED_DATA", str(root))
        by_root[name] = _cells("small")
    one, two = by_root["one"], by_root["two"]
    assert one.keys() == two.keys() and len(one) > 30
    assert {s: k for s, (k, _) in one.items()} == {s: k for s, (k, _) in two.items()}
    # the method reads the real files of its own root
    naive_one, naive_two = one["naive"][1], two["naive"][1]
    assert naive_one["corpus"] == {"scifact": str(tmp_path / "one" / "data" / "scifact" / "corpus.jsonl")}
    assert naive_two["corpus"] == {"scifact": str(tmp_path / "two" / "data" / "scifact" / "corpus.jsonl")}
    index = tmp_path / "two" / "data" / "train-multidomain" / "miracl_train_index.tsv"
    assert naive_two["languages"]["miracl"] == f"index:{index}"


def test_mining_tiny_keys_equal_under_two_cache_roots(clean_env, tmp_path):
    real = resolve_cache_root()
    real.mkdir(parents=True, exist_ok=True)
    other = tmp_path / "elsewhere" / "cache"
    other.parent.mkdir()
    other.symlink_to(real, target_is_directory=True)   # the same files (nothing regenerated) at another path
    here = _cells("tiny")
    clean_env.setenv("HARNESS_CACHE", str(other))
    there = _cells("tiny")
    assert {s: k for s, (k, _) in here.items()} == {s: k for s, (k, _) in there.items()} and len(here) > 30
    truth = there["naive"][1]["truth"]
    assert truth.startswith(str(other) + "/synthetic/peg-") and truth.endswith("/truth.json")
    assert Path(truth).is_file()
    assert here["naive"][1]["truth"] == truth.replace(str(other), str(real), 1)


def _key(options: dict) -> str:
    from harness.keys import content_key

    return content_key(train_run_config("uniform", TrainSpec(steps=3, warmup_steps=1, method_options=options), "fp"))


def test_run_key_follows_the_relative_path_not_the_root(clean_env, tmp_path):
    clean_env.setenv("HARNESS_SHARED_DATA", str(tmp_path / "a"))
    key_a = _key({"corpus": str(tmp_path / "a" / "scifact" / "corpus.jsonl")})
    other_file = _key({"corpus": str(tmp_path / "a" / "nfcorpus" / "corpus.jsonl")})
    clean_env.setenv("HARNESS_SHARED_DATA", str(tmp_path / "b"))
    key_b = _key({"corpus": str(tmp_path / "b" / "scifact" / "corpus.jsonl")})
    outside = _key({"corpus": str(tmp_path / "a" / "scifact" / "corpus.jsonl")})   # no longer under the root
    assert key_a == key_b
    assert len({key_a, other_file, outside}) == 3


def test_portable_paths_writes_roots_as_placeholders(clean_env, tmp_path):
    shared, cache, tdro = tmp_path / "shared", tmp_path / "shared" / "cache", tmp_path / "tdro"
    clean_env.setenv("HARNESS_SHARED_DATA", str(shared))
    clean_env.setenv("HARNESS_CACHE", str(cache))                 # nested in shared: the deeper root wins
    clean_env.setenv("HARNESS_TDRO_DATA", str(tdro) + "/")        # a trailing slash is no other root
    clean_env.setenv("HARNESS_NUM_THREADS", "2")                  # not a folder: no root
    assert data_roots() == {"shared": str(shared), "cache": str(cache), "tdro_data": str(tdro)}
    value = {
        "a": f"{shared}/scifact/corpus.jsonl",
        "b": [f"index:{shared}/x.tsv", f"fasttext12:{tdro}/d.bin,{tdro}/y.bin"],
        "c": f"{cache}/synthetic/peg-1/truth.json",
        "d": f"{shared}2/other.jsonl",                            # another folder that starts alike
        "e": f"relative{shared}/x",                               # inside a longer name: not a root
        "f": 3, "g": None, "h": str(shared),
    }
    assert portable_paths(value) == {
        "a": "{shared}/scifact/corpus.jsonl",
        "b": ["index:{shared}/x.tsv", "fasttext12:{tdro_data}/d.bin,{tdro_data}/y.bin"],
        "c": "{cache}/synthetic/peg-1/truth.json",
        "d": f"{shared}2/other.jsonl",
        "e": f"relative{shared}/x",
        "f": 3, "g": None, "h": "{shared}",
    }
    # a placeholder path as a suite writes it comes back as written
    for written in ("{shared}/scifact/corpus.jsonl", "index:{shared}/train-multidomain/miracl_train_index.tsv",
                    "fasttext12:{tdro_data}/fasttext/dbpedia.bin,{tdro_data}/fasttext/yahoo_answers.bin"):
        assert substitute(written) != written and portable_paths(substitute(written)) == written


def _mined_stage_keys(scale: str) -> dict[str, str]:
    from harness.method import get_method
    from harness.method.stages import stage_key
    from harness.train.stages import DataStage

    out = {}
    for cell in expand_train_cells(load_suite("mining"), scale, load_data=False):
        if not cell.trains:
            continue
        method = get_method(cell.method)
        for stage in method.stages(cell.train_spec):
            if isinstance(stage, DataStage):
                out[cell.system] = stage_key(method, stage, cell.data_fingerprint)
    return out


def test_the_mined_pool_stage_keys_equal_under_two_shared_roots(clean_env, tmp_path):
    """The mining data stage holds the corpus path in its config: its key (the cells/mined folder) must not
    follow the root either, or a moved checkout re-mines every pool."""
    by_root = []
    for name in ("one", "two"):
        clean_env.setenv("HARNESS_SHARED_DATA", str(tmp_path / name / "data"))
        by_root.append(_mined_stage_keys("small"))
    assert by_root[0] == by_root[1] and len(by_root[0]) > 20
    # and each source's pool folder inside the stage (its key holds the mining settings, corpus path included)
    from types import SimpleNamespace

    from harness.method import get_method

    source = SimpleNamespace(fingerprint="f" * 16, name="scifact")
    keys = []
    for name in ("one", "two"):
        clean_env.setenv("HARNESS_SHARED_DATA", str(tmp_path / name / "data"))
        corpus = str(tmp_path / name / "data" / "scifact" / "corpus.jsonl")
        keys.append(get_method("mined")._pool(source, tmp_path, {"corpus": {"scifact": corpus}})[2])
    assert keys[0] == keys[1]
    other = str(tmp_path / "two" / "data" / "other" / "corpus.jsonl")
    assert get_method("mined")._pool(source, tmp_path, {"corpus": {"scifact": other}})[2] != keys[1]
