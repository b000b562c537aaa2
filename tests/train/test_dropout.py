"""The trained model is in train mode (dropout active) unless the spec turns dropout off:
``from_pretrained`` hands back a backbone in eval mode, and training used to stay in it."""
from __future__ import annotations

import pytest
import torch
from trainutil import make_data, make_tiny_bert

from harness.method import Method
from harness.train.logs import read_log


class ModeProbe(Method):
    """The uniform behaviour, recording whether every module is in training mode at each micro-batch."""

    name = "mode-probe"
    presets = {"tiny": {"model": "minilm", "pooling": "mean", "batch_size": 4, "steps": 3, "warmup_steps": 0,
                        "lr": 1e-3, "precision": "fp32", "gradient_checkpointing": False, "progress": False,
                        "temperature": 0.05, "query_max_length": 16, "doc_max_length": 16,
                        "use_instructions": False}}

    def configure(self, ctx):
        self.modes: list[bool] = []

    def observe(self, out, ctx):
        self.modes.append(all(m.training for m in ctx.model.modules()))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny"), dropout=0.3, hidden=32)


def _train(tiny, tmp_path, dropout: bool):
    torch.set_num_threads(1)
    method = ModeProbe()
    spec = method.spec("tiny", model=str(tiny), dropout=dropout)
    method.train(spec, make_data(n_sources=2, rows=8), tmp_path)
    return method.modes, [r["loss"] for r in read_log(tmp_path / "train_log.jsonl")]


def test_dropout_is_active_by_default_and_off_on_request(tiny, tmp_path):
    on_modes, on_losses = _train(tiny, tmp_path / "on", dropout=True)
    off_modes, off_losses = _train(tiny, tmp_path / "off", dropout=False)
    again_modes, again_losses = _train(tiny, tmp_path / "again", dropout=True)
    assert on_modes == [True] * 3 and off_modes == [False] * 3
    assert on_losses == again_losses                 # dropout is seeded: runs are still reproducible
    assert on_losses[0] != off_losses[0]             # the same first batch, different masks: dropout acted
