"""check_model accepts every valid kind of model reference, cheaply (no weights loaded)."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from harness.encoders.backbone import resolve_model
from harness.encoders.model_check import check_model
from harness.errors import ConfigError, InputError


@pytest.mark.parametrize("name", ["bm25", "BM25", "minilm", "all-MiniLM-L6-v2", "synthetic:default/tiny-bert",
                                  "synthetic:tdro/tiny-decoder"])
def test_builtin_references_are_accepted(name):
    check_model(name)


@pytest.mark.parametrize("name, message", [("synthetic:default/tiny-gpt", "expected synthetic:<preset>/tiny-bert"),
                                           ("synthetic:nope/tiny-bert", "unknown world preset 'nope'"),
                                           ("  ", "empty model name")])
def test_bad_builtin_references_are_refused(name, message):
    with pytest.raises(ConfigError, match=message):
        check_model(name)


def test_model_folder_is_checked_without_loading_weights(tiny_bert_dir, monkeypatch):
    import safetensors.torch

    def no_load(*args, **kwargs):
        raise AssertionError("check_model must not load tensors")

    monkeypatch.setattr(safetensors.torch, "load_file", no_load)
    started = time.perf_counter()
    check_model(str(tiny_bert_dir))
    assert time.perf_counter() - started < 1.0


def test_trained_run_folder_is_accepted_and_resolves_to_its_model(tiny_bert_dir, tmp_path):
    from harness.encoders.hf import HFEncoder

    run = tmp_path / "run"
    shutil.copytree(tiny_bert_dir, run / "final")
    (run / "run.json").write_text(json.dumps({"method": "uniform"}))
    (run / "done.json").write_text("{}")
    check_model(str(run))
    assert resolve_model(str(run))[0] == str(run / "final")
    assert HFEncoder(str(run), device="cpu").path == str(run / "final")
    # A broken model inside the run folder is reported with its real path.
    (run / "final" / "tokenizer.json").unlink()
    with pytest.raises(InputError, match="no tokenizer files") as info:
        check_model(str(run))
    assert info.value.path == str(run / "final")


def test_lora_adapter_folder_is_accepted_with_its_base(tiny_bert_dir, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny_bert_dir)}))
    shutil.copy(tiny_bert_dir / "model.safetensors", adapter / "adapter_model.safetensors")
    check_model(str(adapter))   # tokenizer comes from the base
    (adapter / "adapter_model.safetensors").unlink()
    with pytest.raises(InputError, match="without adapter weights"):
        check_model(str(adapter))


def test_sharded_checkpoint_with_a_missing_shard_is_refused(tiny_bert_dir, tmp_path):
    model = Path(shutil.copytree(tiny_bert_dir, tmp_path / "sharded"))
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(InputError, match="listed in model.safetensors.index.json is missing") as info:
        check_model(str(model))
    assert info.value.path.endswith("model-00002-of-00002.safetensors")
