"""Every way a model reference can be broken ends in one clear message through the real CLI.

Each case runs ``harness eval --model <bad> --dataset-dir <tiny BEIR folder>`` and expects
exit status 2, a message naming the path and the problem, no traceback, and no result
directory.  The good tiny model through the same command is the control: it succeeds.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.cli import main

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="module")
def good_model(tmp_path_factory) -> Path:
    from harness.encoders.tiny import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))   # empty: nothing is cached
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "harness-cache"))
    monkeypatch.setenv("HARNESS_NUM_THREADS", "1")


@pytest.fixture
def dataset(tmp_path) -> Path:
    folder = tmp_path / "tiny-beir"
    (folder / "qrels").mkdir(parents=True)
    docs = {"d1": "the cat sat on the red book", "d2": "a dog runs by the river", "d3": "protein gene drug effect"}
    queries = {"q1": "cat book", "q2": "dog river"}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs.items())
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items())
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return folder


def copy_model(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "model"))


def run_eval(model: str | Path, dataset: Path, out: Path, capsys) -> tuple[int, str]:
    code = main(["eval", "--model", str(model), "--dataset-dir", str(dataset), "--out", str(out)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_refused(model: str | Path, dataset: Path, tmp_path: Path, capsys, *fragments: str) -> str:
    out = tmp_path / "result"
    code, text = run_eval(model, dataset, out, capsys)
    assert code == 2, text
    assert "Traceback" not in text
    assert "harness eval: error:" in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert not out.exists()
    # Exactly one error line: one clear message, not a chain.
    assert len([line for line in text.splitlines() if line.strip()]) == 1, text
    return text


def test_good_model_is_evaluated(good_model, dataset, tmp_path, env, capsys):
    out = tmp_path / "result"
    code, text = run_eval(good_model, dataset, out, capsys)
    assert code == 0, text
    assert (out / "metrics.json").is_file() or any(out.iterdir())


def test_path_that_does_not_exist(dataset, tmp_path, env, capsys):
    missing = tmp_path / "models" / "no-such-model"
    assert_refused(missing, dataset, tmp_path, capsys, str(missing), "does not exist", "check the path")


def test_relative_path_that_does_not_exist(dataset, tmp_path, env, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_refused("./runs/final", dataset, tmp_path, capsys, "runs/final", "does not exist")


def test_hub_id_offline_not_in_cache(dataset, tmp_path, env, capsys):
    text = assert_refused("some-org/some-model", dataset, tmp_path, capsys, "'some-org/some-model'",
                          "not in the local Hugging Face cache", "offline", "HF_HUB_CACHE")
    assert str(tmp_path / "hub-cache") in text


def test_empty_folder(dataset, tmp_path, env, capsys):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    assert_refused(empty, dataset, tmp_path, capsys, str(empty), "is empty")


def test_no_weight_files(good_model, dataset, tmp_path, env, capsys):
    model = copy_model(good_model, tmp_path)
    (model / "model.safetensors").unlink()
    assert_refused(model, dataset, tmp_path, capsys, str(model), "no weight files", "model.safetensors")


def test_truncated_safetensors(good_model, dataset, tmp_path, env, capsys):
    model = copy_model(good_model, tmp_path)
    weights = model / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size // 2)   # an interrupted download
    assert_refused(model, dataset, tmp_path, capsys, str(weights), "truncated or corrupt", f"file has {size // 2}")


def test_corrupt_safetensors_header(good_model, dataset, tmp_path, env, capsys):
    model = copy_model(good_model, tmp_path)
    weights = model / "model.safetensors"
    with open(weights, "r+b") as f:
        f.seek(8)
        f.write(b"#garbage#")   # the JSON header no longer parses
    assert_refused(model, dataset, tmp_path, capsys, str(weights), "header is not valid JSON")


def test_weight_file_that_is_not_safetensors_at_all(good_model, dataset, tmp_path, env, capsys):
    model = copy_model(good_model, tmp_path)
    (model / "model.safetensors").write_bytes(b"<html>404 Not Found</html>")   # a saved error page
    assert_refused(model, dataset, tmp_path, capsys, str(model / "model.safetensors"), "truncated or corrupt")


def test_invalid_config_json(good_model, dataset, tmp_path, env, capsys):
    model = copy_model(good_model, tmp_path)
    config = model / "config.json"
    lines = config.read_text().splitlines()
    lines[3] = lines[3] + " oops"   # a stray word on line 4
    config.write_text("\n".join(lines) + "\n")
    assert_refused(model, dataset, tmp_path, capsys, f"{config}:4", "malformed JSON")


def test_config_json_that_is_not_an_object(good_model, dataset, tmp_path, env, capsys):
    model = copy_model(good_model, tmp_path)
    (model / "config.json").write_text("[1, 2]\n")
    assert_refused(model, dataset, tmp_path, capsys, str(model / "config.json"), "expected a JSON object")


def test_folder_without_tokenizer_files(good_model, dataset, tmp_path, env, capsys):
    # transformers would build a 5-token tokenizer from config.json alone and score every query as [UNK].
    model = copy_model(good_model, tmp_path)
    for name in ("tokenizer.json", "vocab.txt"):
        (model / name).unlink(missing_ok=True)
    assert (model / "tokenizer_config.json").exists()
    assert_refused(model, dataset, tmp_path, capsys, str(model), "no tokenizer files", "[UNK]")


def test_a_file_instead_of_a_folder(good_model, dataset, tmp_path, env, capsys):
    assert_refused(good_model / "model.safetensors", dataset, tmp_path, capsys, "is a file, not a model folder")


def test_failure_at_load_time_is_wrapped(good_model, dataset, tmp_path, env, capsys):
    # Passes the cheap checks; transformers itself refuses the unknown architecture (a ValueError).
    model = copy_model(good_model, tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = "no-such-architecture"
    (model / "config.json").write_text(json.dumps(config))
    assert_refused(model, dataset, tmp_path, capsys, str(model), "could not load the model")


# ------------------------------------------------------------------ the training path
def _break(kind: str, good: Path, tmp_path: Path) -> tuple[Path, str]:
    """A broken model of ``kind`` and the fragment its message must contain."""
    if kind == "missing":
        return tmp_path / "no-such-model", "does not exist"
    model = copy_model(good, tmp_path)
    if kind == "no-tokenizer":
        (model / "tokenizer.json").unlink()
        return model, "no tokenizer files"
    if kind == "truncated":
        with open(model / "model.safetensors", "r+b") as f:
            f.truncate(1000)
        return model, "truncated or corrupt"
    # A LoRA adapter folder whose base model is gone.
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone"),
                                                             "peft_type": "LORA"}))
    shutil.copy(model / "model.safetensors", adapter / "adapter_model.safetensors")
    return adapter, "base model"


@pytest.mark.parametrize("kind", ["missing", "no-tokenizer", "truncated", "adapter-without-base"])
def test_training_loaders_refuse_bad_models(kind, good_model, tmp_path, env):
    from harness.errors import InputError
    from harness.train.model import build_model, load_frozen_model
    from harness.train.spec import TrainSpec

    model, fragment = _break(kind, good_model, tmp_path)
    spec = TrainSpec(model=str(model), pooling="mean", batch_size=4, steps=2, warmup_steps=0)
    for load in (lambda: build_model(spec), lambda: load_frozen_model(str(model), spec)):
        with pytest.raises(InputError) as info:
            load()
        assert str(model) in str(info.value) and fragment in str(info.value)
