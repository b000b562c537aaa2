"""Episodes between training stretches: re-encode the corpus with the current model and re-mine hard
negatives (ANCE style); a run killed during an episode resumes by redoing it and ends bit-identical."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from trainutil import make_data

from harness.errors import ConfigError
from harness.method import Method
from harness.train.batching import build_batch, tokenize_batch
from harness.train.episodes import encode_texts
from harness.train.logs import read_log

# Tiny models train fastest on one thread (the shared fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


class Miner(Method):
    """Every 2 steps: encode all queries and positives, take each query's best-scoring other positive
    among a random 3/4 of the corpus as its hard negative; batches use the mined negatives."""

    name = "test-miner"
    episode_every = 2

    def __init__(self, fail_at: int | None = None):
        self.fail_at = fail_at

    def configure(self, ctx):
        self.mined: dict[str, str] = {}
        self.episodes: list[int] = []
        self.used: list[tuple[str, str]] = []

    def run_episode(self, ctx, directory):
        rows = [(s, r) for s, src in enumerate(ctx.data.sources) for r in range(len(src.rows))]
        corpus = [ctx.data.sources[s].rows[r].pos[0] for s, r in rows]
        q = encode_texts(ctx, [ctx.data.sources[s].rows[r].query for s, r in rows], ctx.spec.query_max_length)
        p = encode_texts(ctx, corpus, ctx.spec.doc_max_length, batch_size=16)
        scores = q @ p.T
        scores.fill_diagonal_(float("-inf"))                           # a query's own positive is no negative
        pool = torch.randperm(len(corpus))[: 3 * len(corpus) // 4]       # the episode's own seeded RNG
        hardest = pool[scores[:, pool].argmax(dim=1)]
        (directory / "negatives.tsv").write_text("".join(f"{s}\t{r}\t{int(h)}\n" for (s, r), h in zip(rows, hardest)))
        if self.fail_at == ctx.step:
            raise RuntimeError("killed during the episode")
        self.mined = {f"{s}:{r}": corpus[int(h)] for (s, r), h in zip(rows, hardest)}
        self.episodes.append(ctx.step)

    def make_batch(self, examples, ctx, micro_index):
        batch = build_batch(examples, ctx.data, ctx.spec, micro_index, ctx.rank, ctx.world_size)
        if self.mined:
            n = batch.passages_per_query
            for i, (s, r) in enumerate(batch.examples):
                batch.passages[i * n + 1] = self.mined[f"{s}:{r}"]
                self.used.append((f"{s}:{r}", batch.passages[i * n + 1]))
        return tokenize_batch(batch, ctx.tokenizer, ctx.spec, ctx.encoding["append_eos"])

    def state_dict(self):
        return {"mined": dict(self.mined)}

    def load_state_dict(self, state):
        self.mined = dict(state["mined"])


def spec_for(model_dir, **kw):
    from harness.train.spec import TrainSpec

    base = dict(model=model_dir, pooling="mean", batch_size=4, steps=6, warmup_steps=1, save_every=0,
                keep_checkpoints=5, lr=1e-3, n_hard_negatives=1, temperature=0.05, query_max_length=32,
                doc_max_length=64, sampling="mixed", precision="fp32", gradient_checkpointing=False, progress=False)
    return TrainSpec(**{**base, **kw})


def weights(workdir):
    return load_file(str(next((workdir / "final").glob("*.safetensors"))))


def test_killed_episode_is_redone_and_the_run_ends_bit_identical(tmp_path, tiny_model):
    spec, data = spec_for(tiny_model), make_data()
    straight = Miner()
    straight.train(spec, data, tmp_path / "straight")
    assert straight.episodes == [2, 4]
    with pytest.raises(RuntimeError, match="killed during the episode"):
        Miner(fail_at=4).train(spec, data, tmp_path / "resumed")
    assert (tmp_path / "resumed" / "checkpoints" / "step-00000004").is_dir()       # written just before it
    assert not (tmp_path / "resumed" / "done.json").exists()
    resumed = Miner()
    resumed.train(spec, data, tmp_path / "resumed")
    assert resumed.episodes == [4]                                                   # only the killed one, redone
    log_a, log_b = (read_log(tmp_path / run / "train_log.jsonl") for run in ("straight", "resumed"))
    assert [r["step"] for r in log_b] == list(range(1, 7))
    assert [r["loss"] for r in log_a] == [r["loss"] for r in log_b]                  # bit-exact, step for step
    wa, wb = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    for step in (2, 4):
        name = f"episodes/step-{step:08d}/negatives.tsv"
        assert (tmp_path / "straight" / name).read_text() == (tmp_path / "resumed" / name).read_text()
    # The mined negatives were used, and they are other rows' positives, not the rows' own negatives.
    assert len(straight.used) == 4 * 4                                               # steps 3-6, 4 queries each
    for key, negative in straight.used:
        s, r = map(int, key.split(":"))
        row = data.sources[s].rows[r]
        assert negative not in row.neg and negative not in row.pos


class NoisyEpisode(Method):
    """An episode that draws random numbers and switches the model to eval mode (through encode_texts)."""

    name = "test-noisy-episode"
    episode_every = 1

    def run_episode(self, ctx, directory):
        encode_texts(ctx, ["alpha beta"], 8)
        (directory / "noise.txt").write_text(str(torch.rand(3).tolist()))


def test_episodes_leave_the_training_stream_alone(tmp_path, tiny_model):
    spec, data = spec_for(tiny_model, steps=3), make_data()
    Method().train(spec, data, tmp_path / "plain")
    NoisyEpisode().train(spec, data, tmp_path / "noisy")
    wa, wb = weights(tmp_path / "plain"), weights(tmp_path / "noisy")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    noise = [(tmp_path / "noisy" / f"episodes/step-{s:08d}/noise.txt").read_text() for s in (1, 2)]
    assert noise[0] != noise[1]                                    # seeded per step, not one fixed draw


def test_episode_schedule_is_checked(tmp_path, tiny_model_nodrop):
    class Late(Method):
        name = "test-late-episode"

        def episode_steps(self, spec):
            return [spec.steps]

    class Undefined(Method):
        name = "test-undefined-episode"
        episode_every = 1

    with pytest.raises(ConfigError, match=r"episode steps \[3\] are not steps of a 3-step run"):
        Late().train(spec_for(tiny_model_nodrop, steps=3), make_data(), tmp_path / "late")
    with pytest.raises(ConfigError, match="defines no run_episode"):
        Undefined().train(spec_for(tiny_model_nodrop, steps=3), make_data(), tmp_path / "undefined")


def test_dry_run_plan_lists_the_episodes(tiny_model_nodrop):
    from harness.train.plan import training_plan

    spec, data = spec_for(tiny_model_nodrop, steps=7), make_data()
    assert training_plan(spec, data, Miner())["episodes"] == {"before_steps": [2, 4, 6]}
    assert "episodes" not in training_plan(spec, data, Method())
