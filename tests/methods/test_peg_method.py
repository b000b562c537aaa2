"""The PEG method in the shared trainer: presets, the loss it forms from the trainer's candidates
(vanilla = the trainer's InfoNCE; full = the kernel), the gradient cache, logging, export, and
a resumed run that continues t step for step."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from trainutil import load_tiny, make_data, make_tiny_bert, plain_step, step_context

from harness.errors import ConfigError, InputError
from harness.method import get_method, list_methods
from harness.train.logs import read_log
from harness.train.spec import TrainSpec
from methods.peg import PEG, peg_loss, read_query_weights

EXAMPLES = [(0, 0), (0, 3), (0, 5), (0, 7), (0, 1), (0, 9)]
VANILLA = {"weight_queries": False, "scale_negatives": False}


@pytest.fixture(scope="module")
def tiny_nodrop(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("peg-tiny"), dropout=0.0))


def configured(spec, data, model, tok, enc, **options):
    method = PEG()
    ctx = step_context(spec.replace(method_options=options), data, model, tok, enc, EXAMPLES)
    ctx.options = method.resolve_options(options)
    method.configure(ctx)
    return method, ctx


# ------------------------------------------------------------------ registry and presets
def test_registered_with_the_paper_recipe():
    assert "peg" in list_methods()
    paper = get_method("peg").spec("paper")
    assert paper.batch_size == 432 * 32 and paper.n_hard_negatives == 5
    assert (paper.query_max_length, paper.doc_max_length) == (64, 256)
    assert (paper.similarity, paper.temperature, paper.lr, paper.schedule) == ("cos", 0.01, 1e-5, "linear")
    assert paper.steps == math.ceil(5 * 110_000_000 / (432 * 32))                        # 5 epochs over 110M rows
    assert paper.in_batch_negatives and paper.cross_batch_negatives and paper.use_instructions
    assert PEG.default_options["alpha"] == 0.5 and PEG.default_options["beta"] == 0.1
    assert PEG.default_options["a_mode"] == "pos" and PEG.default_options["statistics"] == "global"
    assert get_method("peg").spec("small").model == "minilm"


def test_bad_options_are_refused(tiny_nodrop):
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES))
    data = make_data()
    with pytest.raises(ConfigError, match="a_mode must be one of"):
        configured(spec, data, model, tok, enc, a_mode="both")
    with pytest.raises(ConfigError, match="t_mode must be one of"):
        configured(spec, data, model, tok, enc, t_mode="fixed")
    with pytest.raises(ConfigError, match="weight_queries must be true or false"):
        configured(spec, data, model, tok, enc, weight_queries="yes")
    with pytest.raises(ConfigError, match="cosine"):
        configured(spec.replace(similarity="dot"), data, model, tok, enc)
    with pytest.raises(ConfigError, match="unknown option"):
        PEG().resolve_options({"gamma": 1.0})


# ------------------------------------------------------------------ the loss on a real micro-batch
@pytest.mark.parametrize("in_batch", [True, False])
def test_vanilla_equals_the_trainers_infonce(tiny_nodrop, in_batch):
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES), temperature=0.01,
                                      in_batch_negatives=in_batch)
    method, ctx = configured(spec, make_data(), model, tok, enc, **VANILLA)
    res = plain_step(model, ctx, method)
    assert res.loss == pytest.approx(res.mean_sample_loss, abs=1e-5)


def test_candidates_reproduce_the_trainers_infonce(tiny_nodrop):
    """The trainer hook PEG builds on: ctx.candidates gives the scores, mask and targets of InfoNCE."""
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES), temperature=0.05)
    ctx = step_context(spec, make_data(), model, tok, enc, EXAMPLES)
    from harness.train.encoding import encode_chunks
    from harness.train.losses import info_nce

    q, _ = encode_chunks(model, ctx.batch.features["query"], None, ctx.device, grad=False)
    p, _ = encode_chunks(model, ctx.batch.features["passage"], None, ctx.device, grad=False)
    cand = ctx.candidates(q, p)
    assert cand.sim.shape == cand.allowed.shape == (6, 12) and cand.targets.tolist() == [0, 2, 4, 6, 8, 10]
    assert bool(cand.allowed.all())                                           # IBN: every column is a candidate
    reference = info_nce(q, p, 2, temperature=0.05, similarity="cos", reduction="none")
    assert torch.equal(ctx.per_sample_losses(q, p), reference)
    hn_only = ctx.candidates(q, p, in_batch=False)
    assert hn_only.allowed.sum(1).tolist() == [2] * 6
    torch.testing.assert_close(ctx.per_sample_losses(q, p, in_batch=False),
                               info_nce(q, p, 2, temperature=0.05, similarity="cos", in_batch=False,
                                        reduction="none"))


def test_full_peg_equals_the_kernel_on_the_same_batch(tiny_nodrop):
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES), temperature=0.01)
    method, ctx = configured(spec, make_data(), model, tok, enc, t_init=0.2)
    res = plain_step(model, ctx, method)
    q, p = (torch.nn.functional.normalize(x.detach(), dim=-1) for x in (res.output.q, res.output.p))
    sim = q @ p.T
    pos = sim[torch.arange(6), torch.arange(6) * 2]
    neg = torch.stack([torch.cat([sim[i, :2 * i], sim[i, 2 * i + 1:]]) for i in range(6)])
    loss, t = peg_loss(pos, neg, 0.2, tau=0.01)
    assert res.loss == pytest.approx(float(loss), abs=1e-5)
    assert method.t == pytest.approx(float(t), abs=1e-7) and method.t == pytest.approx(0.5 * float(pos.mean()) + 0.1)
    scal = method.scalars()
    assert scal["t"] == method.t and scal["sigma"] == pytest.approx(float(pos.mean()) - 0.1, abs=1e-6)
    hard = (neg >= pos[:, None]) & (pos >= pos.mean() - 0.1)[:, None]
    assert scal["modulated_share"] == pytest.approx(int(hard.sum()) / hard.numel(), abs=1e-12)


def test_gradient_cache_gives_the_same_gradients(tiny_nodrop):
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES), temperature=0.01)
    data = make_data()
    grads = []
    for chunk in (None, 2):
        model.zero_grad(set_to_none=True)
        method, ctx = configured(spec, data, model, tok, enc)
        res = plain_step(model, ctx, method, gradcache_chunk=chunk)
        grads.append(({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, res.loss,
                      method.t))
    (g1, l1, t1), (g2, l2, t2) = grads
    assert l1 == pytest.approx(l2, abs=1e-6) and t1 == pytest.approx(t2, abs=1e-7)
    assert g1.keys() == g2.keys()
    for k in g1:            # tau = 0.01 makes gradients large: compare relative to each tensor's scale
        assert float((g1[k] - g2[k]).abs().max()) <= 1e-5 * max(float(g1[k].abs().max()), 1.0), k


# ------------------------------------------------------------------ training runs: logging, export, resume
def spec_for(model_dir: str, **kw) -> TrainSpec:
    base = dict(model=model_dir, pooling="mean", batch_size=6, steps=6, warmup_steps=1, save_every=2,
                keep_checkpoints=3, lr=1e-3, n_hard_negatives=2, temperature=0.05, query_max_length=32,
                doc_max_length=64, precision="fp32", gradient_checkpointing=False, progress=False,
                use_instructions=False, method_options={"record_query_weights": True})
    return TrainSpec(**{**base, **kw})


class Interrupted(PEG):
    interrupt_at: int | None = None

    def on_step_end(self, ctx):
        if self.interrupt_at is not None and ctx.step == self.interrupt_at:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, tiny_nodrop):
    workdir = tmp_path_factory.mktemp("peg-run")
    return PEG().train(spec_for(tiny_nodrop), make_data(), workdir)


def test_logged_t_follows_the_momentum_recurrence(straight_run):
    log = read_log(straight_run.workdir / "train_log.jsonl")
    assert len(log) == 6
    t = 0.0
    for record in log:
        m = record["method"]
        t = 0.5 * m["pos_sim"] + 0.5 * t                 # one micro-batch per step: t^(s) from the batch mean
        assert m["t"] == pytest.approx(t, abs=1e-6)
        assert m["sigma"] == pytest.approx(m["pos_sim"] - 0.1, abs=1e-6)
        assert 0 <= m["downweighted_share"] <= 1 and 0 <= m["modulated_share"] <= 1
        assert m["emphasised_share"] + m["damped_share"] <= m["modulated_share"] + 1e-12
        assert m["mean_w"] <= 1


def test_export_writes_state_plot_and_query_weights(straight_run):
    out = straight_run.workdir / "method"
    state = json.loads((out / "peg_state.json").read_text())
    log = read_log(straight_run.workdir / "train_log.jsonl")
    assert state["t"] == log[-1]["method"]["t"] and state["batches"] == 6 and state["tau"] == 0.05
    assert (out / "progressive_state.png").stat().st_size > 1000 and (out / "progressive_state.pdf").exists()
    rows = read_query_weights(out / "query_weights.tsv")
    assert len(rows) == 6 * 6 and [r["step"] for r in rows[::6]] == [1, 2, 3, 4, 5, 6]
    for step in range(1, 7):
        ws = np.array([r["w"] for r in rows if r["step"] == step])
        share = float(np.mean(ws < 1))
        assert share == pytest.approx(log[step - 1]["method"]["downweighted_share"], abs=1e-9)
        assert ws.mean() == pytest.approx(log[step - 1]["method"]["mean_w"], abs=1e-5)


def test_read_query_weights_names_the_bad_line(tmp_path):
    bad = tmp_path / "query_weights.tsv"
    bad.write_text("step\tsource\trow\tpos_sim\tw\n1\tsrc0\t3\t0.5\t1.0\n2\tsrc0\tx\t0.5\t1.0\n")
    with pytest.raises(InputError, match=r"query_weights.tsv:3: malformed row"):
        read_query_weights(bad)
    bad.write_text("a\tb\n")
    with pytest.raises(InputError, match=r":1: expected the header"):
        read_query_weights(bad)


def test_resume_continues_t_step_for_step(tmp_path, tiny_nodrop, straight_run):
    spec = spec_for(tiny_nodrop)
    broken = Interrupted()
    broken.interrupt_at = 5                                   # last checkpoint: step 4
    with pytest.raises(KeyboardInterrupt):
        broken.train(spec, make_data(), tmp_path / "resumed")
    resumed = PEG().train(spec, make_data(), tmp_path / "resumed")
    log_a = read_log(straight_run.workdir / "train_log.jsonl")
    log_b = read_log(resumed.workdir / "train_log.jsonl")
    assert [r["step"] for r in log_b] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(log_a, log_b):
        assert a["loss"] == b["loss"] and a["method"] == b["method"]          # bit-exact, t included
    assert (resumed.workdir / "method" / "query_weights.tsv").read_text() == \
        (straight_run.workdir / "method" / "query_weights.tsv").read_text()


def test_constant_t_and_local_statistics(tmp_path, tiny_nodrop):
    spec = spec_for(tiny_nodrop, steps=2, save_every=0,
                    method_options={"t_mode": "constant", "t_init": 0.4, "statistics": "local"})
    ckpt = PEG().train(spec, make_data(), tmp_path / "const")
    assert [r["method"]["t"] for r in read_log(ckpt.workdir / "train_log.jsonl")] == [0.4, 0.4]
