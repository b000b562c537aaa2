"""The released ANCE driver's per-episode restart (ClusterDRO option ``episode_lr: restart``; OpenMatch/COCO-DR
ANCE/drivers/run_ann.py run once per round with --single_warmup): the learning rate at the episode boundaries by
hand and against transformers' linear schedule, the optimizer state cleared at each later episode, the engine
hooks (Method.lr_factor / optimizer_restarts), and an exact kill-and-resume during an episode."""
from __future__ import annotations

import pytest
import torch
import trainutil
from safetensors.torch import load_file
from trainutil import Killed, make_data, train_killed_while_reencoding

from harness.errors import ConfigError
from harness.train.logs import read_log
from methods.clusters import restarted_linear_factor

pytestmark = pytest.mark.usefixtures("one_thread")

# paper scale, base: 3 episodes of 45,000 steps, warm-up 3,000; run_ann.py defaults 60,000 / 300,000 / 0.2
BASE = {"starts": [0, 45000, 90000], "warmup": 3000, "horizon": 60000, "total": 300000, "floor": 0.2}


def factor(step: int, **kw) -> float:
    return restarted_linear_factor(step, **{**BASE, **kw})


def test_lr_at_the_episode_boundaries_by_hand():
    # episode 1: peak 1; warm-up from 0; linear decay to 0 at 60,000, so 45,000 - 3,000 steps in: 15000/57000
    assert factor(0) == 0.0 and factor(1500) == 0.5 and factor(3000) == 1.0
    assert factor(44999) == pytest.approx(15001 / 57000, abs=1e-15)
    # episode 2 (a new run from checkpoint-45000): lr x max(0.2, 1 - 45000/300000) = 0.85, warm-up again from 0
    assert factor(45000) == 0.0 and factor(46500) == pytest.approx(0.425) and factor(48000) == pytest.approx(0.85)
    assert factor(89999) == pytest.approx(0.85 * 15001 / 57000)
    # episode 3: peak 0.7
    assert factor(90000) == 0.0 and factor(93000) == pytest.approx(0.7)
    assert factor(134999) == pytest.approx(0.7 * 15001 / 57000)
    # large: 30,000-step episodes, peaks 1, 0.9, 0.8; the floor 0.2 once an episode starts past 240,000 steps
    large = {"starts": [0, 30000, 60000]}
    assert [factor(s + 3000, **large) for s in large["starts"]] == pytest.approx([1.0, 0.9, 0.8])
    assert factor(273000, starts=[0, 270000]) == pytest.approx(0.2)
    # past the horizon the rate stays 0 (transformers clamps at 0)
    assert factor(70000, starts=[0]) == 0.0


def test_matches_transformers_linear_schedule_per_episode():
    from transformers import get_linear_schedule_with_warmup

    starts, length, warmup, horizon, total = [0, 7, 14], 7, 2, 9, 30
    peaks = [max(0.2, 1 - s / total) for s in starts]
    expected = []
    for peak in peaks:                                  # one fresh scheduler per episode, as each round of run_ann.py
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=peak)
        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=horizon)
        for _ in range(length):
            expected.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
    got = [restarted_linear_factor(s, starts, warmup, horizon, total, 0.2) for s in range(21)]
    assert got == pytest.approx(expected, abs=1e-12)


def idro_spec(model, **options):
    return trainutil.idro_spec(model, keep_checkpoints=10, **{"episode_lr": "restart", "restart_horizon": 5,
                                                              "restart_total": 10, **options})


def test_hooks_follow_the_option():
    from methods.idro import IDRO

    spec = idro_spec("m")
    assert IDRO().optimizer_restarts(spec) == [3, 6]
    lr = IDRO().lr_factor(spec)
    assert [lr(s) for s in range(7)] == pytest.approx([0, 1, 0.75, 0, 0.7, 0.525, 0])
    single = idro_spec("m", episode_lr="single")
    assert IDRO().lr_factor(single) is None and IDRO().optimizer_restarts(single) == []
    with pytest.raises(ConfigError, match="ance_refresh_steps"):
        IDRO().lr_factor(idro_spec("m", ance_refresh_steps=0))


def test_restart_trains_resumes_exactly_and_clears_the_optimizer(tiny_model_nodrop, tmp_path, monkeypatch):
    from methods.idro import IDRO

    spec, data = idro_spec(tiny_model_nodrop), make_data()
    IDRO().train(spec, data, tmp_path / "straight")
    log = read_log(tmp_path / "straight" / "train_log.jsonl")
    assert [r["lr"] for r in log] == pytest.approx([1e-3 * f for f in (0, 1, 0.75, 0, 0.7, 0.525, 0)])
    # the checkpoint before episode 2 holds 3 steps of moments; the one after a step of episode 2 only that step
    states = {s: torch.load(tmp_path / "straight" / "checkpoints" / f"step-{s:08d}" / "trainer_state.pt",
                            weights_only=False)["optimizer"]["state"] for s in (3, 4)}
    assert {int(v["step"]) for v in states[3].values()} == {3}
    assert {int(v["step"]) for v in states[4].values()} == {1}

    # killed while re-encoding the corpus at the third episode, then after a step of it: same run
    train_killed_while_reencoding(monkeypatch, spec, data, tmp_path / "killed")

    class KillAfter4(IDRO):
        name = IDRO.name

        def on_step_end(self, ctx):
            super().on_step_end(ctx)
            if ctx.step == 4:
                raise Killed("killed after the first step of episode 2")

    with pytest.raises(Killed):
        KillAfter4().train(spec, data, tmp_path / "killed-step")
    for run in ("killed", "killed-step"):
        IDRO().train(spec, data, tmp_path / run)
        other = read_log(tmp_path / run / "train_log.jsonl")
        assert [r["loss"] for r in other] == [r["loss"] for r in log]            # step for step, bit-exact
        assert [r["lr"] for r in other] == [r["lr"] for r in log]
        wa, wb = (load_file(str(tmp_path / r / "final" / "model.safetensors")) for r in ("straight", run))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("name", ["idro", "groupdro"])
def test_restart_episodes_start_the_cluster_weights_afresh(name, tmp_path):
    """Each round of the released driver builds its DRO loss anew (add_group_loss after from_pretrained): the
    weights (and the greedy rule's EMAs) of the previous episode are not carried into the next."""
    from harness.method import get_method

    method = get_method(name)
    method.negatives, method.cluster_steps, method.restarts, method.device = None, set(), {3}, torch.device("cpu")
    fresh = torch.ones(3, dtype=torch.float64)
    method.weights = torch.tensor([0.2, 3.0, 1.5], dtype=torch.float64)
    extra = {}
    if name == "groupdro":
        method.ema_losses, method.ema_counts = torch.tensor([0.5, 0.1, 0.9]), torch.tensor([2.0, 3.0, 4.0])
        extra = {"ema_losses": torch.zeros(3), "ema_counts": torch.ones(3)}
    method.fresh_state = {"weights": fresh, **extra}

    class Ctx:
        step = 2

    method.run_episode(Ctx(), tmp_path)                         # not a restart step: kept
    assert method.weights.tolist() == [0.2, 3.0, 1.5]
    Ctx.step = 3
    method.run_episode(Ctx(), tmp_path)
    assert method.weights.tolist() == [1.0, 1.0, 1.0] and method.weights is not fresh
    if name == "groupdro":
        assert method.ema_losses.tolist() == [0.0] * 3 and method.ema_counts.tolist() == [1.0] * 3


def _latest_name(workdir) -> str:
    from harness.train.checkpoint import latest_checkpoint

    return latest_checkpoint(workdir).name


def _scaled_accelerator():
    """A CPU accelerator with a loss scaler that doubles its scale after every step without overflow (init 1024,
    growth interval 1), so a carried-over scale and a fresh one differ after a few steps."""
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    acc.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    return acc


def test_restart_resets_the_fp16_loss_scaler(tiny_model_nodrop, tmp_path):
    """Each round of the released driver is a new process whose apex amp.initialize builds a new dynamic loss
    scaler (ANCE/drivers/run_ann.py): at an episode restart the scaler returns to its initial scale and growth
    tracker; the checkpoint before the restart keeps the grown scale, so a resumed run resets it again."""
    from harness.train.trainer import Trainer
    from methods.idro import IDRO

    def scaler_state(run: str, step: int) -> dict:
        path = tmp_path / run / "checkpoints" / f"step-{step:08d}" / "trainer_state.pt"
        return torch.load(path, weights_only=True)["scaler"]

    spec, data = idro_spec(tiny_model_nodrop), make_data()
    Trainer(spec, data, tmp_path / "straight", method=IDRO(), accelerator=_scaled_accelerator()).run()
    fresh = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1).state_dict()
    # restarts at steps 3 and 6: the checkpoints before them hold the 3 doublings of their episode's steps, the
    # one after step 4 a single one (a fresh scaler's init scale, doubled once); the run's end, one step after
    # the restart at 6, the same
    assert scaler_state("straight", 3)["scale"] == 1024.0 * 2 ** 3
    assert scaler_state("straight", 4)["scale"] == fresh["scale"] * 2
    assert scaler_state("straight", 6)["scale"] == fresh["scale"] * 2 ** 3
    assert scaler_state("straight", 7)["scale"] == fresh["scale"] * 2

    # single mode (one schedule over the run, no restarts): the scale keeps growing, 7 doublings at the end
    single = idro_spec(tiny_model_nodrop, episode_lr="single")
    Trainer(single, data, tmp_path / "single", method=IDRO(), accelerator=_scaled_accelerator()).run()
    assert scaler_state("single", 7)["scale"] == 1024.0 * 2 ** 7

    # killed during the third episode, resumed from the checkpoint before it (grown scale): reset again, same run
    class KillInEpisode3(IDRO):
        name = IDRO.name

        def run_episode(self, ctx, directory):
            super().run_episode(ctx, directory)
            if ctx.step == 6:
                raise Killed("killed during the episode before step 6")

    with pytest.raises(Killed):
        Trainer(spec, data, tmp_path / "killed", method=KillInEpisode3(), accelerator=_scaled_accelerator()).run()
    assert _latest_name(tmp_path / "killed") == "step-00000006"
    Trainer(spec, data, tmp_path / "killed", method=IDRO(), accelerator=_scaled_accelerator()).run()
    for step in (6, 7):
        assert scaler_state("killed", step) == scaler_state("straight", step)
    losses = [[r["loss"] for r in read_log(tmp_path / run / "train_log.jsonl")] for run in ("straight", "killed")]
    assert losses[0] == losses[1]
