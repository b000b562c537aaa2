"""A tiny backbone trains on one CPU thread unless a thread count was chosen; the count is restored after."""
from __future__ import annotations

import types

import pytest
import torch
from trainutil import make_data

from harness.method import Method
from harness.train.trainer import TINY_HIDDEN, tiny_model_threads


def _model(hidden: int) -> torch.nn.Module:
    module = torch.nn.Module()
    module.backbone = torch.nn.Linear(2, 2)                     # type: ignore[assignment]
    module.backbone.config = types.SimpleNamespace(hidden_size=hidden)   # type: ignore[assignment]
    return module


@pytest.fixture
def no_thread_choice(monkeypatch):
    for name in ("HARNESS_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_tiny_models_take_one_thread_unless_chosen(no_thread_choice, monkeypatch):
    cpu = torch.device("cpu")
    assert tiny_model_threads(_model(32), cpu) == 1
    assert tiny_model_threads(_model(TINY_HIDDEN), cpu) == 1
    assert tiny_model_threads(_model(384), cpu) is None                 # MiniLM's width: torch's default
    assert tiny_model_threads(_model(32), torch.device("cuda")) is None
    assert tiny_model_threads(torch.nn.Linear(2, 2), cpu) is None       # no config: left alone
    monkeypatch.setenv("HARNESS_NUM_THREADS", "2")
    assert tiny_model_threads(_model(32), cpu) is None
    monkeypatch.delenv("HARNESS_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")                          # what --threads sets
    assert tiny_model_threads(_model(32), cpu) is None


class Watch(Method):
    """Records the thread count inside the steps."""

    name = "test-thread-watch"
    seen: list[int] = []

    def on_step_end(self, ctx):
        Watch.seen.append(torch.get_num_threads())


def test_trainer_uses_one_thread_and_restores_the_count(no_thread_choice, tmp_path, tiny_model):
    from harness.train.spec import TrainSpec

    spec = TrainSpec(model=tiny_model, pooling="mean", batch_size=4, steps=2, warmup_steps=0, save_every=0,
                     n_hard_negatives=1, query_max_length=16, doc_max_length=16, precision="fp32",
                     gradient_checkpointing=False, progress=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        Watch.seen = []
        Watch().train(spec, make_data(), tmp_path / "run")
        assert Watch.seen == [1, 1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
