"""PEG's progressive weights around another method's per-sample loss (option ``base``, harness.method.compose):
w_q times the base's losses, the same t and sigma as PEG alone, a_n refused, cell keys of old configs unmoved."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
from trainutil import grads, load_tiny, make_data, make_tiny_bert, plain_step, step_context

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.cli import main
from harness.errors import ConfigError
from harness.method import get_method
from harness.method.compose import Composed, compose
from harness.train.context import Candidates, EncodedBatch, LossOutput
from harness.train.logs import read_log
from methods.debiased import debiased_losses
from methods.peg import PEG, progressive_weights

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = [(0, 0), (0, 3), (0, 5), (0, 7), (0, 1), (0, 9)]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_nodrop(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("peg-wrap-tiny"), dropout=0.0))


def runner(options):
    """What the trainer runs for ``peg`` under ``options``: PEG alone, or PEG around its base."""
    peg = PEG()
    return compose(peg, peg.resolve_options(options))


def configured(spec, model, tok, enc, options):
    method = runner(options)
    ctx = step_context(spec.replace(method_options=options), make_data(), model, tok, enc, EXAMPLES)
    ctx.options = method.resolve_options(options)
    method.configure(ctx)
    return method, ctx


def peg_of(method):
    return method.wrapper if isinstance(method, Composed) else method


# ------------------------------------------------------------------ (1) around uniform = PEG alone
@pytest.mark.parametrize("scale_negatives", [False, True])
def test_around_uniform_equals_peg_alone_loss_and_gradients(tiny_nodrop, scale_negatives):
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES), temperature=0.05)
    # beta 0: about half the queries lie below sigma, so w_q < 1 for some of them
    own = {"scale_negatives": scale_negatives, "beta": 0.0, "t_init": 0.2}
    results = []
    for options in (own, {**own, "base": "uniform"}):
        model.zero_grad(set_to_none=True)
        method, ctx = configured(spec, model, tok, enc, options)
        res = plain_step(model, ctx, method)
        results.append((res.loss, grads(model), peg_of(method)))
    (loss_a, g_a, peg_a), (loss_b, g_b, peg_b) = results
    assert peg_b.wraps is not scale_negatives          # a_n kept around uniform: PEG forms its own loss
    assert loss_b == pytest.approx(loss_a, rel=1e-6, abs=1e-7)
    assert peg_a.t == pytest.approx(peg_b.t, abs=1e-12) and peg_a.batches == peg_b.batches == 1
    sa, sb = peg_a.scalars(), peg_b.scalars()
    assert sa.keys() == sb.keys() and all(sa[k] == pytest.approx(sb[k], abs=1e-9) for k in sa)
    assert 0 < sa["downweighted_share"] < 1 and sa["mean_w"] < 1
    assert g_a.keys() == g_b.keys() and max(float(g.abs().max()) for g in g_a.values()) > 1e-4
    for k in g_a:   # fp32: InfoNCE divides by tau where PEG multiplies by 1 / tau (rounding, amplified by 1/tau)
        assert float((g_a[k] - g_b[k]).abs().max()) <= 1e-4 * max(float(g_a[k].abs().max()), 1e-3), k


# ------------------------------------------------------------------ (2) around debiased, by hand
class HandContext:
    """The few context services the debiased loss and PEG's reduce read: cosine candidates, one passage per
    query (the positive on the diagonal), a single rank."""

    def __init__(self, options, similarity="cos"):
        self.spec = SimpleNamespace(similarity=similarity, temperature=0.05)
        self.options, self.micro_step, self.step = options, 0, 0

    def candidates(self, q, p):
        sim = F.normalize(q, dim=-1) @ F.normalize(p, dim=-1).T
        return Candidates(sim, torch.ones_like(sim, dtype=torch.bool), torch.arange(len(q)))

    def batch_group_ids(self):
        return torch.zeros(4, dtype=torch.long)

    def all_gather(self, tensor):
        return tensor

    def all_reduce_sum(self, tensor):
        return tensor


def test_around_debiased_weights_each_query_by_hand():
    # One query direction; passage j at cosine c_j from it: every row's scores are (c_0, .., c_3), the
    # positive on the diagonal.  mean = 0.6, sigma = 0.6 - 0.1 = 0.5: w = (1, 0.2/0.5, 0.4/0.5, 1).
    c = torch.tensor([0.9, 0.2, 0.4, 0.9], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64).repeat(4, 1)
    p = torch.stack([c, (1 - c ** 2).sqrt(), torch.zeros(4, dtype=torch.float64)], 1).requires_grad_()
    options = {"base": "debiased", "base_options": {"tau_plus": 0.1}, "scale_negatives": False, "t_init": 0.2}
    method = runner(options)
    assert isinstance(method, Composed) and method.base.name == "debiased"
    ctx: Any = HandContext(method.resolve_options(options))
    method.configure(ctx)
    encoded = EncodedBatch({"query": q, "passage": p})
    losses, groups = method.losses(encoded, ctx)
    loss = method.reduce(LossOutput(losses, groups, encoded), ctx)
    loss.backward()

    w = torch.tensor([1.0, 0.4, 0.8, 1.0], dtype=torch.float64)
    p_ref = p.detach().clone().requires_grad_()
    sim = F.normalize(q, dim=-1) @ F.normalize(p_ref, dim=-1).T
    per_query = debiased_losses(sim, torch.ones(4, 4, dtype=torch.bool), torch.arange(4), 0.05, 0.1)
    expected = (w * per_query).mean()
    expected.backward()                                       # w constant: no gradient through w_q
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-12)
    assert float(loss.detach()) < float(per_query.detach().mean())             # queries 1 and 2 are down-weighted
    torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-10, atol=1e-12)
    assert torch.equal(losses.detach(), per_query.detach())   # the base's per-sample losses, unweighted
    peg = method.wrapper
    assert isinstance(peg, PEG) and peg.t == pytest.approx(0.5 * 0.6 + 0.5 * 0.2, abs=1e-12) and peg.batches == 1
    s = method.scalars()
    assert s["sigma"] == pytest.approx(0.5, abs=1e-12) and s["pos_sim"] == pytest.approx(0.6, abs=1e-12)
    assert s["downweighted_share"] == 0.5 and s["mean_w"] == pytest.approx(0.8, abs=1e-12)
    # a_n condition (not applied): rows 0 and 3 lie above sigma and each has one negative scoring 0.9 (a tie)
    assert s["modulated_share"] == pytest.approx(2 / 12) and s["emphasised_share"] == s["damped_share"] == 0
    # the kernel gives the same weights
    kernel = progressive_weights(c, 0.2)
    torch.testing.assert_close(kernel.weights, w)
    torch.testing.assert_close(kernel.new_t, torch.tensor(0.4, dtype=torch.float64))


def test_a_dot_product_base_is_read_as_cosines(tiny_nodrop):
    """SPLADE-like bases score by dot product: PEG reads cos(q, p) of each query and its positive instead."""
    spec, model, tok, enc = load_tiny(tiny_nodrop, batch_size=len(EXAMPLES), temperature=0.05, similarity="dot")
    options = {"base": "debiased", "scale_negatives": False, "beta": 0.0}
    method, ctx = configured(spec, model, tok, enc, options)
    res = plain_step(model, ctx, method)
    out = res.output
    q, p = out.q.detach(), out.p.detach()
    cos = F.cosine_similarity(q, p[::2], dim=-1)             # 2 passages per query: the positive first
    dot = out.candidates.sim.detach()[torch.arange(6), out.candidates.targets]
    assert not torch.allclose(cos, dot)                       # the two readings differ on this model
    w = progressive_weights(cos, 0.0, beta=0.0).weights
    assert bool((w < 1).any())
    assert res.loss == pytest.approx(float((w * out.losses.detach()).mean()), rel=1e-6)
    scalars = method.scalars()
    assert scalars["pos_sim"] == pytest.approx(float(cos.mean()), abs=1e-6)
    assert "modulated_share" not in scalars and scalars["mean_w"] == pytest.approx(float(w.mean()), abs=1e-6)


# ------------------------------------------------------------------ (3) a suite-file line, resumed exactly
TRAIN = {"steps": 8, "batch_size": 16, "warmup_steps": 1, "n_hard_negatives": 1, "lr": 1e-3,
         "use_instructions": False, "seed": 3, "save_every": 4}


def _suite(path: Path) -> Path:
    raw = {"name": "pegwrap", "version": 1, "description": "PEG's progressive weights around the debiased loss",
           "baseline": "debiased", "metrics": ["ndcg@10"], "stats": {"test": "randomization", "seed": 0},
           "variants": [{"id": "debiased", "method": "debiased"},
                        {"id": "debiased-peg", "method": "peg",
                         "options": {"base": "debiased", "scale_negatives": False}}],
           "scales": {"tiny": {"model": "synthetic:default/tiny-bert", "data": ["synthetic:default"], "train": TRAIN,
                               "benchmarks": [{"id": "latin_qa", "suite": "synthetic", "max_queries": 30,
                                               "dataset_dir": "synthetic:default/eval/latin_qa"}]}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_suite_line_trains_peg_around_debiased_and_resumes_exactly(tmp_path, monkeypatch):
    suite_file = _suite(tmp_path / "pegwrap.yaml")
    cell = {c.variant.id: c for c in expand_train_cells(load_suite(str(suite_file)), "tiny")}["debiased-peg"]
    assert cell.spec is not None and cell.method == "peg"
    assert cell.spec.method_options == {"base": "debiased", "scale_negatives": False}      # as the line wrote them
    straight = tmp_path / "straight"
    assert main(["run", str(suite_file), "--results-root", str(straight), "--no-progress"]) == 0
    log = read_log(straight / "cells" / "train" / cell.key / "train_log.jsonl")
    assert [r["step"] for r in log] == list(range(1, 9))
    t = 0.0
    for record in log:
        m = record["method"]
        t = 0.5 * m["pos_sim"] + 0.5 * t                      # one micro-batch per step
        assert m["t"] == pytest.approx(t, abs=1e-6) and m["sigma"] == pytest.approx(m["pos_sim"] - 0.1, abs=1e-6)
        # the loss is the w_q-weighted mean of the logged per-sample (debiased) losses: never above it
        assert record["loss"] <= record["infonce"] + 1e-6 and 0 < m["mean_w"] <= 1
    assert any(r["method"]["downweighted_share"] > 0 and r["loss"] < r["infonce"] for r in log)
    state = json.loads((straight / "cells" / "train" / cell.key / "method" / "peg_state.json").read_text())
    assert state["batches"] == 8 and state["t"] == log[-1]["method"]["t"]
    assert state["options"]["base"] == "debiased" and not state["options"]["scale_negatives"]

    # Killed after step 5 (last checkpoint: step 4), then resumed: the same run, bit for bit.
    def interrupt(self, ctx):
        if ctx.step == 5:
            raise KeyboardInterrupt

    resumed = tmp_path / "resumed"
    with monkeypatch.context() as patch:
        patch.setattr(PEG, "on_step_end", interrupt)
        assert main(["run", str(suite_file), "--results-root", str(resumed), "--no-progress"]) == 130
    loaded: list[dict] = []
    original = PEG.load_state_dict

    def recording(self, state):
        loaded.append(dict(state))
        original(self, state)

    monkeypatch.setattr(PEG, "load_state_dict", recording)
    assert main(["run", str(suite_file), "--results-root", str(resumed), "--no-progress"]) == 0
    assert [s["batches"] for s in loaded] == [4] and loaded[0]["t"] == log[3]["method"]["t"]
    again = read_log(resumed / "cells" / "train" / cell.key / "train_log.jsonl")
    assert [r["step"] for r in again] == list(range(1, 9))
    for a, b in zip(log, again):
        assert a["loss"] == b["loss"] and a["infonce"] == b["infonce"] and a["method"] == b["method"]


# ------------------------------------------------------------------ (4) refusals and keys
@pytest.mark.parametrize("base", ["debiased", "splade"])
def test_a_n_around_a_base_is_refused_naming_the_option(base):
    with pytest.raises(ConfigError) as exc:
        PEG().resolve_options({"base": base})
    message = str(exc.value)
    assert message.startswith(f"method 'peg' around base {base!r}: scale_negatives (a_n) rescales hard negatives "
                              "inside InfoNCE's log-sum-exp")
    assert "set scale_negatives: false" in message
    with pytest.raises(ConfigError, match="tau is the temperature of PEG's own loss.*remove tau"):
        PEG().resolve_options({"base": base, "scale_negatives": False, "tau": 0.02})
    with pytest.raises(ConfigError, match="a_mode shapes a_n only"):
        PEG().resolve_options({"base": base, "scale_negatives": False, "a_mode": "neg"})
    # around uniform a_n is PEG's own loss over the same candidates: kept, with its temperature
    assert PEG().resolve_options({"base": "uniform", "tau": 0.02})["scale_negatives"] is True
    with pytest.raises(ConfigError, match="around base 'uniform': tau"):
        PEG().resolve_options({"base": "uniform", "scale_negatives": False, "tau": 0.02})


def test_the_refusal_points_at_the_suite_line(tmp_path, capsys):
    suite_file = _suite(tmp_path / "bad.yaml")
    raw = yaml.safe_load(suite_file.read_text())
    raw["variants"][1]["options"] = {"base": "debiased"}
    suite_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["run", str(suite_file), "--dry-run", "--results-root", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "variant 'debiased-peg' at scale 'tiny': method 'peg' around base 'debiased': scale_negatives (a_n)" in err
    assert not (tmp_path / "r").exists()


def test_a_base_without_query_and_passage_views_is_refused():
    method = runner({"base": "debiased", "scale_negatives": False})
    ctx: Any = HandContext(method.resolve_options({"base": "debiased", "scale_negatives": False}))
    method.configure(ctx)
    out = LossOutput(torch.ones(4), torch.zeros(4, dtype=torch.long), EncodedBatch({"span_a": torch.ones(4, 3)}))
    with pytest.raises(ConfigError, match="reads each query's similarity with its positive.*have span_a"):
        method.reduce(out, ctx)


def test_existing_peg_cells_keep_their_keys():
    """Run keys hash the options as written: the inherited base options (defaults: none) enter no key of an
    existing PEG configuration, and PEG's revision is unchanged."""
    suite = load_suite(str(REPO / "suites" / "ablations" / "peg.yaml"))
    raw = {v.id: dict(v.options or {}) for v in suite.variants}
    for cell in expand_train_cells(suite, "tiny"):
        if cell.variant.method == "none":       # a released checkpoint's row: evaluated, never trained
            assert cell.spec is None
            continue
        assert cell.spec is not None
        options = cell.spec.result_dict()["method_options"]
        assert "base" not in options and "base_options" not in options
        assert options == raw[cell.variant.id]
    assert PEG.revision == 1 and get_method("peg").default_options["base"] is None
