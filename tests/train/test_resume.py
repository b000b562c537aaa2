"""Resume: an interrupted and resumed run reproduces the uninterrupted one step for step."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from trainutil import make_data

from harness.method import Method
from harness.train.logs import read_log
from harness.train.result import Checkpoint


class Stateful(Method):
    """A step counter (stateful scalar) and a weight vector with its own SGD optimizer."""

    name = "test-stateful"
    interrupt_at: int | None = None

    def configure(self, ctx):
        self.counter = 0
        self.log_alpha = torch.zeros(len(ctx.data), requires_grad=True)
        opt = torch.optim.SGD([self.log_alpha], lr=0.1, maximize=True)
        ctx.add_weight_optimizer("alpha", [self.log_alpha], opt, max_norm=1.0)

    def observe(self, out, ctx):
        with torch.no_grad():
            sums = torch.zeros(len(ctx.data)).index_add_(0, out.group_ids, out.losses.detach())
            self.log_alpha.grad = sums if self.log_alpha.grad is None else self.log_alpha.grad + sums

    def on_step_end(self, ctx):
        self.counter += 1
        if self.interrupt_at is not None and ctx.step == self.interrupt_at:
            raise KeyboardInterrupt

    def scalars(self):
        return {"counter": self.counter, "alpha0": float(self.log_alpha.detach()[0])}

    def state_dict(self):
        return {"counter": self.counter}

    def load_state_dict(self, state):
        self.counter = state["counter"]


def spec_for(model_dir, **kw):
    from harness.train.spec import TrainSpec

    base = dict(model=model_dir, pooling="mean", batch_size=4, grad_accum=2, steps=4, warmup_steps=1, save_every=2,
                keep_checkpoints=3, lr=1e-3, n_hard_negatives=1, temperature=0.05, query_max_length=32,
                doc_max_length=64, precision="fp32", gradient_checkpointing=False, progress=False)
    return TrainSpec(**{**base, **kw})


def weights(ckpt: Checkpoint) -> dict:
    files = list(ckpt.path.glob("*.safetensors"))
    assert len(files) == 1
    return load_file(str(files[0]))


def run_pair(tmp_path, spec, interrupt_at):
    data = make_data()
    straight = Stateful().train(spec, data, tmp_path / "straight")
    broken = Stateful()
    broken.interrupt_at = interrupt_at
    with pytest.raises(KeyboardInterrupt):
        broken.train(spec, data, tmp_path / "resumed")
    assert not (tmp_path / "resumed" / "done.json").exists()
    resumed = Stateful().train(spec, data, tmp_path / "resumed")
    return straight, resumed


def assert_same_run(straight: Checkpoint, resumed: Checkpoint, steps: int):
    log_a, log_b = read_log(straight.workdir / "train_log.jsonl"), read_log(resumed.workdir / "train_log.jsonl")
    assert [r["step"] for r in log_b] == list(range(1, steps + 1))          # the cut-off step was redone once
    for a, b in zip(log_a, log_b):
        assert a["loss"] == b["loss"], a["step"]                           # bit-exact, step for step
        assert a["lr"] == b["lr"] and a["counts"] == b["counts"] and a["method"] == b["method"]
    assert log_b[-1]["method"]["counter"] == steps
    wa, wb = weights(straight), weights(resumed)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_reproduces_losses_and_weights(tmp_path, tiny_model):
    straight, resumed = run_pair(tmp_path, spec_for(tiny_model), interrupt_at=3)   # last checkpoint: step 2
    assert_same_run(straight, resumed, 4)
    assert json.loads((resumed.workdir / "done.json").read_text())["step"] == 4


def test_resume_with_lora_adapters(tmp_path, tiny_model):
    spec = spec_for(tiny_model, lora={"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["query", "value"]})
    straight, resumed = run_pair(tmp_path, spec, interrupt_at=3)                   # last checkpoint: step 2
    assert (resumed.path / "adapter_config.json").exists()
    assert_same_run(straight, resumed, 4)


def test_finished_run_is_returned_and_changed_spec_refused(tmp_path, tiny_model):
    from harness.errors import ConfigError

    spec = spec_for(tiny_model, steps=2, save_every=0)
    data = make_data()
    first = Stateful().train(spec, data, tmp_path / "run")
    again = Stateful().train(spec, data, tmp_path / "run")         # cached: no retraining
    assert again == first
    with pytest.raises(ConfigError, match="different spec.*lr"):
        Stateful().train(spec.replace(lr=5e-4), data, tmp_path / "run")
