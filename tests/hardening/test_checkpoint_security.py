"""Checkpoints never run code when loaded: a crafted ``trainer_state.pt`` / ``rank_0.pt`` is
refused with an InputError naming the file, and nothing in it executes (a marker file that
its payload would create stays absent)."""
from __future__ import annotations

import collections
import json
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from trainutil import make_data, make_tiny_bert

from harness.cli import main
from harness.errors import InputError
from harness.train.checkpoint import (
    FORMAT,
    TRAINER_STATE,
    check_plain,
    checkpoint_name,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    set_rng_state,
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), dropout=0.0))


class Payload:
    """Unpickling this creates ``marker`` (builtins.open in write mode): proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def plant(workdir: Path, name: str, data: bytes) -> Path:
    folder = workdir / "checkpoints" / checkpoint_name(2)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder


def zip_payload(marker: Path) -> bytes:
    """The payload inside torch's own zip format (what ``torch.save`` writes)."""
    path = marker.parent / "payload.pt"
    torch.save({"step": 2, "optimizer": Payload(marker)}, path)
    data = path.read_bytes()
    path.unlink()
    return data


def test_the_payload_is_live_when_unpickled_unsafely(tmp_path):
    """Guards the tests below: the same bytes do create the marker through plain pickle / torch.load."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()
    marker.unlink()
    (tmp_path / "x.pt").write_bytes(zip_payload(marker))
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("fmt, reason", [("pickle-2", r"it references (io|builtins)\.open"),
                                         ("pickle-5", "objects other than tensors and plain data"),
                                         ("torch-zip", r"it references (io|builtins)\.open")])
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")      # torch notes protocol 5 is unusual
def test_malicious_trainer_state_is_refused_and_runs_nothing(tmp_path, fmt, reason):
    marker = tmp_path / "marker"
    data = zip_payload(marker) if fmt == "torch-zip" else pickle.dumps(Payload(marker), protocol=int(fmt[-1]))
    folder = plant(tmp_path / "run", TRAINER_STATE, data)
    assert latest_checkpoint(tmp_path / "run") == folder
    with pytest.raises(InputError) as info:
        load_checkpoint(folder)
    assert not marker.exists()
    assert info.value.path == str(folder / TRAINER_STATE)
    message = str(info.value)
    assert "not a safe checkpoint" in message and re.search(reason, message)
    assert "weights_only" not in message              # no advice to load it unsafely


def test_malicious_rank_state_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    folder = plant(tmp_path / "run", TRAINER_STATE, b"")
    torch.save({"step": 2, "world_size": 1, "format": FORMAT}, folder / TRAINER_STATE)
    (folder / "rank_0.pt").write_bytes(zip_payload(marker))
    with pytest.raises(InputError, match=r"rank_0\.pt: not a safe checkpoint \(it references (io|builtins)\.open"):
        load_checkpoint(folder)
    assert not marker.exists()


def test_old_format_checkpoint_is_refused_with_a_clear_message(tmp_path):
    """Format 1 (before this change): no "format" key, numpy RNG arrays pickled in rank_0.pt."""
    folder = plant(tmp_path / "run", TRAINER_STATE, b"")
    torch.save({"step": 2, "world_size": 1, "optimizer": {}}, folder / TRAINER_STATE)
    torch.save({"rng": {"numpy": np.random.get_state()}}, folder / "rank_0.pt")
    with pytest.raises(InputError, match="format 1 was written by an older version of the harness.*delete"):
        load_checkpoint(folder)
    # Even with the trainer state patched to the new format, its numpy arrays are not loaded.
    torch.save({"step": 2, "world_size": 1, "format": FORMAT}, folder / TRAINER_STATE)
    with pytest.raises(InputError, match=r"rank_0\.pt: not a safe checkpoint \(it references numpy"):
        load_checkpoint(folder)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04truncated"])
def test_unreadable_checkpoint_file_is_an_input_error(tmp_path, content):
    folder = plant(tmp_path / "run", TRAINER_STATE, content)
    with pytest.raises(InputError, match=r"trainer_state\.pt: not a (readable|safe) checkpoint"):
        load_checkpoint(folder)


def test_missing_rank_file_is_an_input_error(tmp_path):
    folder = plant(tmp_path / "run", TRAINER_STATE, b"")
    torch.save({"step": 2, "world_size": 1, "format": FORMAT}, folder / TRAINER_STATE)
    with pytest.raises(InputError, match=r"rank_0\.pt: checkpoint file is missing"):
        load_checkpoint(folder)


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    """The plain-data RNG state restores python, numpy and torch streams exactly."""
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    np.random.standard_normal()          # leaves a cached Gaussian (has_gauss=1) in numpy's legacy state
    random.gauss(0, 1)
    torch.save(rng_state(torch.device("cpu")), tmp_path / "rng.pt")
    expected = ([random.random() for _ in range(3)], np.random.standard_normal(3).tolist(),
                np.random.randint(0, 1 << 30, 3).tolist(), torch.rand(3).tolist())
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True), torch.device("cpu"))
    again = ([random.random() for _ in range(3)], np.random.standard_normal(3).tolist(),
             np.random.randint(0, 1 << 30, 3).tolist(), torch.rand(3).tolist())
    assert again == expected


def test_state_that_would_not_load_back_is_refused_at_save_time():
    check_plain({"t": 0.5, "rows": [[1, "a", 0.25]], "w": torch.ones(2), "betas": (0.9, 0.999), "x": None},
                "ok")
    with pytest.raises(TypeError, match=r"method\['t'\] is a numpy\.float64"):
        check_plain({"t": np.float64(0.5)}, "method")
    with pytest.raises(TypeError, match=r"method\['mean'\] is a numpy\.ndarray"):
        check_plain({"mean": np.zeros(3)}, "method")
    with pytest.raises(TypeError, match=r"state\[0\] is a .*Point"):
        check_plain([collections.namedtuple("Point", "x y")(1, 2)], "state")


def test_cli_resume_of_a_malicious_checkpoint_exits_2_without_traceback(tmp_path, tiny_model, capsys):
    marker = tmp_path / "marker"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for src in make_data(n_sources=2, rows=6).sources:
        (data_dir / f"{src.name}.jsonl").write_text("".join(
            json.dumps({"query": r.query, "pos": r.pos, "neg": r.neg}) + "\n" for r in src.rows))
    out = tmp_path / "out"
    args = ["train", "--data", str(data_dir), "--out", str(out), "--scale", "tiny", "--model", tiny_model,
            "--steps", "2", "--batch-size", "4", "--set", "save_every=1"]
    assert main(args) == 0
    # A run that looks interrupted, whose newest checkpoint someone replaced with a crafted file.
    (out / "done.json").unlink()
    folder = latest_checkpoint(out)
    assert folder is not None
    (folder / TRAINER_STATE).write_bytes(zip_payload(marker))
    capsys.readouterr()
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and not marker.exists()
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("harness train: error:")]
    assert len(errors) == 1 and f"{folder / TRAINER_STATE}: not a safe checkpoint" in errors[0]
    assert not (out / "done.json").exists()
