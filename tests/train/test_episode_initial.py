"""The step-0 checkpoint (TrainSpec ``save_initial``): the first point of a per-episode curve.

Paper 001's Figure 4 / Figure 6 start at Epi-1, the model after the BM25 warm-up, i.e. the fine-tuning run's
state before its first step.  ``save_initial`` writes that state as ``checkpoints/step-00000000`` before the
step-0 episode runs: its weights are the starting model's, the trained run is bit-for-bit the one without it,
and a kill during the step-0 episode resumes from it and redoes the episode.
"""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from trainutil import Killed, idro_spec, make_data

from harness.train.logs import read_log


def _weights(folder) -> dict[str, torch.Tensor]:
    from transformers import AutoModel

    return {k: v.detach().clone() for k, v in AutoModel.from_pretrained(str(folder)).state_dict().items()}


def test_step0_checkpoint_is_the_starting_model_and_resumes_exactly(tiny_model_nodrop, tmp_path, monkeypatch):
    from harness.train.checkpoint import latest_checkpoint
    from methods.idro import IDRO

    data = make_data()
    plain = idro_spec(tiny_model_nodrop, keep_checkpoints=10)
    spec = plain.replace(save_initial=True)
    assert spec.fingerprint() == plain.fingerprint()           # not part of the run's key
    IDRO().train(plain, data, tmp_path / "plain")
    IDRO().train(spec, data, tmp_path / "initial")
    folder = tmp_path / "initial" / "checkpoints" / "step-00000000"
    assert (folder / "trainer_state.pt").is_file()
    assert not (tmp_path / "plain" / "checkpoints" / "step-00000000").exists()
    start, saved = _weights(tiny_model_nodrop), _weights(folder / "model")
    assert set(start) == set(saved) and all(torch.equal(start[k], saved[k]) for k in start)
    state = torch.load(folder / "trainer_state.pt", weights_only=True)
    assert state["step"] == 0 and state["optimizer"]["state"] == {}
    log = read_log(tmp_path / "plain" / "train_log.jsonl")
    assert [r["loss"] for r in read_log(tmp_path / "initial" / "train_log.jsonl")] == [r["loss"] for r in log]

    # killed at the end of the step-0 episode (after the step-0 checkpoint): resumes there, redoes it, same run
    class KillInEpisode0(IDRO):
        name = IDRO.name

        def run_episode(self, ctx, directory):
            super().run_episode(ctx, directory)
            if ctx.step == 0:
                raise Killed("killed during the step-0 episode")

    with pytest.raises(Killed):
        KillInEpisode0().train(spec, data, tmp_path / "killed")
    assert latest_checkpoint(tmp_path / "killed").name == "step-00000000"
    killed_log = tmp_path / "killed" / "train_log.jsonl"
    assert not killed_log.exists() or not read_log(killed_log)
    IDRO().train(spec, data, tmp_path / "killed")
    assert [r["loss"] for r in read_log(tmp_path / "killed" / "train_log.jsonl")] == [r["loss"] for r in log]
    wa, wb = (load_file(str(tmp_path / r / "final" / "model.safetensors")) for r in ("plain", "killed"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
