"""The model fingerprint (the embedding-cache key) changes when any weight byte changes.

The old fingerprint hashed file sizes plus the first and last MiB of each weight file,
so a model edited only in the middle (a LoRA merged into inner layers, a fine-tune of
some embedding rows) kept the key of the original and got its cached vectors.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from harness.encoders import backbone
from harness.encoders.backbone import model_fingerprint, resolve_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
MIB = 1 << 20
ROWS = (9000, 20000)   # word-embedding rows edited: their bytes lie > 1 MiB from both ends of the file


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from harness.encoders.tiny import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(autouse=True)
def isolated_cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NUM_THREADS", "1")
    return tmp_path / "cache"


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """Names of the files whose bytes were read and hashed (a sidecar hit reads none)."""
    calls: list[str] = []
    real = backbone._hash_file

    def spy(file: Path) -> str:
        calls.append(Path(file).name)
        return real(file)

    monkeypatch.setattr(backbone, "_hash_file", spy)
    return calls


def age(folder: Path, seconds: float = 100.0) -> None:
    """Date every file back, as for a model saved a while ago (fresh files are not remembered)."""
    past = time.time() - seconds
    for f in folder.rglob("*"):
        os.utime(f, (past, past))


def edit_middle_rows(model: Path, scale: float = 1.5) -> tuple[int, int]:
    """Scale word-embedding rows ROWS in place (file size unchanged); return the edited byte range."""
    weights = model / "model.safetensors"
    raw = weights.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    entry = json.loads(raw[8:8 + header_len])["embeddings.word_embeddings.weight"]
    width = entry["shape"][1] * 4
    start = 8 + header_len + entry["data_offsets"][0] + ROWS[0] * width
    end = 8 + header_len + entry["data_offsets"][0] + ROWS[1] * width
    block = np.frombuffer(raw[start:end], dtype="<f4") * np.float32(scale)
    with open(weights, "r+b") as f:
        f.seek(start)
        f.write(block.astype("<f4").tobytes())
    assert weights.stat().st_size == len(raw)
    return start, end


def words_in_rows(model: Path, n: int = 40) -> list[str]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    words = [tok.convert_ids_to_tokens(i) for i in range(ROWS[0] + 100, ROWS[1] - 100, 97)]
    return [w for w in words if w.isalpha()][:n]


def test_models_differing_only_mid_file_get_different_keys_and_no_cache_hit(tiny_model, tmp_path):
    from harness.data import Corpus
    from harness.encoders.cache import embedding_key, encode_corpus
    from harness.encoders.hf import HFEncoder

    edited = Path(shutil.copytree(tiny_model, tmp_path / "edited"))
    start, end = edit_middle_rows(edited)
    size = (edited / "model.safetensors").stat().st_size
    assert start > MIB and end < size - MIB   # the region the head/tail fingerprint never read
    assert (tiny_model / "model.safetensors").stat().st_size == size

    words = words_in_rows(tiny_model)
    assert len(words) >= 20
    corpus = Corpus([f"d{i}" for i in range(10)], [""] * 10,
                    [" ".join(words[i:i + 5]) for i in range(0, 50, 5)][:10])
    original, changed = HFEncoder(str(tiny_model), device="cpu"), HFEncoder(str(edited), device="cpu")
    assert original.identity()["model"] != changed.identity()["model"]
    assert embedding_key(original.identity(), corpus.content_hash()) != \
        embedding_key(changed.identity(), corpus.content_hash())

    first = encode_corpus(original, corpus, progress=False)
    second = encode_corpus(changed, corpus, progress=False)
    assert first.encoded_shards == 1 and second.encoded_shards == 1   # the edited model was encoded, not reused
    assert second.path != first.path
    # ... and reusing would have been wrong: the vectors really differ.
    assert np.abs(first.as_array() - second.as_array()).max() > 1e-3
    assert encode_corpus(original, corpus, progress=False).skipped   # an unchanged model still hits


def test_minilm_second_fingerprint_reads_the_sidecar(hashed, isolated_cache, capsys):
    path = resolve_model("minilm")[0]
    backbone._sidecar(Path(path) / "model.safetensors")   # import the cache module outside the timing
    started = time.perf_counter()
    first = model_fingerprint(path)
    first_s = time.perf_counter() - started
    assert "model.safetensors" in hashed
    hashed.clear()
    started = time.perf_counter()
    second = model_fingerprint(path)
    second_s = time.perf_counter() - started
    assert second == first
    assert "model.safetensors" not in hashed   # 87 MiB not read again
    assert second_s < first_s
    sidecars = list((isolated_cache / "fingerprints").glob("*.json"))
    assert len(sidecars) == 1 and json.loads(sidecars[0].read_text())["size"] == 90868376
    with capsys.disabled():
        print(f"\nMiniLM fingerprint: first {first_s * 1000:.1f} ms, second {second_s * 1000:.1f} ms")


def test_touch_and_byte_changes_invalidate_the_sidecar(tiny_model, tmp_path, hashed, isolated_cache):
    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    weights = model / "model.safetensors"
    age(model)
    before = os.listdir(model)
    original = model_fingerprint(str(model))
    assert hashed.count("model.safetensors") == 1
    assert sorted(os.listdir(model)) == sorted(before)   # nothing written into the model folder

    hashed.clear()
    assert model_fingerprint(str(model)) == original
    assert hashed.count("model.safetensors") == 0

    # touch: re-hashed (the stat no longer matches), same content so the same fingerprint
    past = time.time() - 50
    os.utime(weights, (past, past))
    hashed.clear()
    assert model_fingerprint(str(model)) == original
    assert hashed.count("model.safetensors") == 1

    # one byte in the middle, with the old mtime put back: ctime still gives it away
    stat = weights.stat()
    with open(weights, "r+b") as f:
        f.seek(stat.st_size // 2)
        byte = f.read(1)
        f.seek(stat.st_size // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_mtime_ns == stat.st_mtime_ns and weights.stat().st_size == stat.st_size
    hashed.clear()
    changed = model_fingerprint(str(model))
    assert hashed.count("model.safetensors") == 1
    assert changed != original


def test_a_file_written_just_now_is_hashed_but_not_remembered(tiny_model, tmp_path, hashed, isolated_cache,
                                                              monkeypatch):
    # A second write in the same timestamp tick would keep size and mtime; its digest is not trusted yet.
    # "Just now" is a wide window here: on a loaded machine the copy and two hashes outlast the real 2 s.
    monkeypatch.setattr(backbone, "RACY_SECONDS", 3600)
    model = Path(shutil.copytree(tiny_model, tmp_path / "fresh"))
    model_fingerprint(str(model))
    model_fingerprint(str(model))
    assert hashed.count("model.safetensors") == 2
    assert not list((isolated_cache / "fingerprints").glob("*.json"))


def _fake_hub_cache(root: Path, repo_id: str, commit: str, model_files: Path | None = None) -> Path:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    if model_files is not None:
        for f in model_files.iterdir():
            shutil.copy(f, snapshot / f.name)
    else:
        (snapshot / "config.json").write_text('{"model_type": "bert"}')
    return snapshot


def test_hub_id_fingerprint_is_its_cached_commit(tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    _fake_hub_cache(tmp_path / "hub", "acme/encoder", commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert model_fingerprint("acme/encoder") == f"hub:acme/encoder@{commit}"
    # Not cached: the id and the revision asked for, as before.
    assert model_fingerprint("acme/other") == "hub:acme/other@main"
    monkeypatch.setenv("HF_REVISION", "v2")
    assert model_fingerprint("acme/encoder") == "hub:acme/encoder@v2"


def test_cached_hub_model_passes_the_offline_check(tiny_model, tmp_path, monkeypatch):
    from harness.encoders.model_check import check_model
    from harness.errors import ConfigError, InputError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _fake_hub_cache(tmp_path / "hub", "acme/encoder", "a" * 40, model_files=tiny_model)
    _fake_hub_cache(tmp_path / "hub", "acme/config-only", "b" * 40)
    check_model("acme/encoder")
    with pytest.raises(InputError, match="no weight files"):
        check_model("acme/config-only")
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache"):
        check_model("acme/absent")


def _edit_json(file: Path, **changes) -> None:
    data = json.loads(file.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    file.write_text(json.dumps(data, indent=4), encoding="utf-8")     # another layout, as another version writes


def test_a_library_upgrade_keeps_the_fingerprint_a_real_config_change_moves_it(tiny_model, tmp_path):
    """transformers writes its version into config.json: 5.23.0 and 5.24.0 saved byte-different folders of the
    same weights, and every cell key moved.  Incidental fields are out of the identity; number-changing ones in."""
    from harness.encoders.backbone import INCIDENTAL_JSON_FIELDS

    before = model_fingerprint(str(tiny_model))
    upgraded = tmp_path / "upgraded"
    shutil.copytree(tiny_model, upgraded)
    config = json.loads((upgraded / "config.json").read_text())
    assert "transformers_version" in config          # what save_pretrained writes today
    dtype = config.pop("dtype", None) or config.pop("torch_dtype", "float32")
    (upgraded / "config.json").write_text(json.dumps(config))
    _edit_json(upgraded / "config.json", transformers_version="9.99.0", _name_or_path="/somewhere/else",
               _commit_hash="f" * 40, torch_dtype=dtype)                        # the pre-5 name of the field
    _edit_json(upgraded / "tokenizer_config.json", name_or_path="/elsewhere")
    assert (upgraded / "config.json").read_bytes() != (tiny_model / "config.json").read_bytes()
    assert model_fingerprint(str(upgraded)) == before
    assert set(INCIDENTAL_JSON_FIELDS["config.json"]) >= {"transformers_version", "_name_or_path"}

    for field, value in [("layer_norm_eps", 1e-5), ("hidden_act", "relu"), ("dtype", "bfloat16")]:
        changed = tmp_path / f"changed-{field}"
        shutil.copytree(upgraded, changed)
        _edit_json(changed / "config.json", **{field: value, "torch_dtype": None} if field == "dtype"
                   else {field: value})
        assert model_fingerprint(str(changed)) != before, field
    lowered = tmp_path / "lowered"
    shutil.copytree(upgraded, lowered)
    _edit_json(lowered / "tokenizer_config.json", do_lower_case=False)
    assert model_fingerprint(str(lowered)) != before


def test_a_config_that_is_not_a_json_object_counts_byte_for_byte(tiny_model, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    (broken / "config.json").write_text("[1, 2]")
    other = tmp_path / "other"
    shutil.copytree(tiny_model, other)
    (other / "config.json").write_text("[1,2]")
    assert model_fingerprint(str(broken)) != model_fingerprint(str(other))
