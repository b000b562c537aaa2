"""The ``splade`` method on the shared trainer (METHODS.md 4.1): its loss recomputed by hand from the MLM
logits (InfoNCE, dot, no temperature + lambda_q FLOPS(Q) + lambda_d (FLOPS(D+) + FLOPS(D-)) / 2 with the
warm-up's lambda / T^2 at the first call), the same under the gradient cache, the warm-up counter in the
checkpoint (kill-and-resume reproduces lambda and losses step for step), the saved folder marked sparse,
and bad input refused."""
from __future__ import annotations

import json

import pytest
import torch
from trainutil import load_tiny, make_data, make_tiny_bert, plain_step, step_context

from harness.errors import ConfigError
from harness.train.logs import read_log
from methods.splade import Splade, check_mlm_model, flops_lambda

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), dropout=0.0, mlm=True))


def spec_for(model: str, **overrides):
    base = dict(model=model, batch_size=6, steps=6, warmup_steps=0, save_every=2, query_max_length=16,
                doc_max_length=24, method_options={"lambda_warmup_steps": 4, "lambda_q": 0.01, "lambda_d": 0.02})
    return Splade.spec("tiny", **{**base, **overrides})


def by_hand(model, ctx, lam_q: float, lam_d: float, regularizer: str = "flops", candidates: str = "official") -> float:
    """The SPLADE loss of the micro-batch from the backbone's MLM logits, written out independently: the ranking
    part over every in-batch positive plus the row's own negatives (official), or every passage (all)."""
    def weights(feats):
        logits = model.backbone(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"]).logits
        act = torch.log1p(torch.relu(logits)) * feats["attention_mask"].unsqueeze(-1)    # padding -> 0
        return act.amax(dim=1)

    def reg(w):
        return (w.abs().mean(0) ** 2).sum() if regularizer == "flops" else w.abs().sum(1).mean()

    with torch.no_grad():
        q, p = weights(ctx.batch.features["query"]), weights(ctx.batch.features["passage"])
        scores = q @ p.T                                          # every passage of the batch, temperature 1
        n = ctx.batch.passages_per_query
        targets = torch.arange(len(q)) * n
        if candidates == "official":                              # other rows' negatives are not candidates
            for i in range(len(q)):
                for j in range(len(p)):
                    if j % n != 0 and j // n != i:
                        scores[i, j] = float("-inf")
        infonce = torch.nn.functional.cross_entropy(scores, targets)
        pos, neg = p[targets], p[torch.ones(len(p), dtype=torch.bool).index_fill_(0, targets, False)]
        return float(infonce + lam_q * reg(q) + lam_d * (reg(pos) + reg(neg)) / 2)


@pytest.mark.parametrize(("regularizer", "candidates"), [("flops", "official"), ("l1", "official"), ("flops", "all")])
def test_loss_is_infonce_plus_warmed_up_regularisers(tiny_mlm, regularizer, candidates):
    options = {"lambda_q": 0.3, "lambda_d": 0.1, "lambda_warmup_steps": 10, "regularizer": regularizer,
               "candidates": candidates}
    results = []
    for chunk in (None, 4):
        method = Splade()
        spec = spec_for(tiny_mlm, method_options=options)
        _, model, tok, enc = load_tiny(tiny_mlm, head=method.representation_head(spec), similarity="dot",
                                       temperature=1.0, batch_size=6, query_max_length=16, doc_max_length=24)
        ctx = step_context(spec, make_data(), model, tok, enc, [(0, i) for i in range(3)] + [(1, i) for i in range(3)])
        ctx.options = method.resolve_options(options)
        method.configure(ctx)
        expected = by_hand(model, ctx, 0.3 / 100, 0.1 / 100, regularizer, candidates)   # first call: lambda / T^2
        results.append(plain_step(model, ctx, method, gradcache_chunk=chunk))
        assert results[-1].loss == pytest.approx(expected, rel=1e-5)
        scalars = method.scalars()
        assert scalars["lambda_q"] == pytest.approx(0.003) and scalars["lambda_d"] == pytest.approx(0.001)
        assert 0 < scalars["nnz_q"] <= tok.vocab_size and scalars["reg_q"] > 0
    assert results[0].loss == pytest.approx(results[1].loss, rel=1e-6)


def test_kill_and_resume_reproduces_lambda_and_losses(tiny_mlm, tmp_path):
    class Killed(Exception):
        pass

    class KilledAfterStep3(Splade):
        name = "splade"

        def on_step_end(self, ctx):
            super().on_step_end(ctx)
            if ctx.step == 3:
                raise Killed

    spec, data = spec_for(tiny_mlm), make_data()
    Splade().train(spec, data, tmp_path / "straight")
    with pytest.raises(Killed):
        KilledAfterStep3().train(spec, data, tmp_path / "resumed")
    Splade().train(spec, data, tmp_path / "resumed")                 # resumes from the step-2 checkpoint
    straight, resumed = (read_log(tmp_path / run / "train_log.jsonl") for run in ("straight", "resumed"))
    assert [r["step"] for r in resumed] == list(range(1, 7))
    assert [r["loss"] for r in straight] == [r["loss"] for r in resumed]            # bit-exact, step for step
    assert [r["method"] for r in straight] == [r["method"] for r in resumed]
    # The warm-up as logged: lambda_q * (t / T)^2 for t < T = 4, then lambda_q (naver's schedule).
    assert [r["method"]["lambda_q"] for r in resumed] == pytest.approx(
        [flops_lambda(t, 0.01, 4) for t in range(1, 7)], rel=1e-12)
    assert [r["method"]["lambda_q"] for r in resumed][:4] == pytest.approx([0.01 / 16, 0.01 / 4, 0.01 * 9 / 16, 0.01])


def test_a_resume_without_the_counter_is_refused(tiny_mlm, tmp_path):
    class Forgetful(Splade):
        name = "splade"

        def load_state_dict(self, state):         # drops the warm-up counter: lambda would restart at step 1
            pass

    spec, data = spec_for(tiny_mlm, steps=4), make_data()

    class Stop(Exception):
        pass

    class StopAfter3(Splade):
        name = "splade"

        def on_step_end(self, ctx):
            super().on_step_end(ctx)
            if ctx.step == 3:         # after the step-2 checkpoint
                raise Stop

    with pytest.raises(Stop):
        StopAfter3().train(spec, data, tmp_path / "run")
    with pytest.raises(ConfigError, match="warm-up counter"):
        Forgetful().train(spec, data, tmp_path / "run")


def test_trained_folder_is_marked_sparse(tiny_mlm, tmp_path):
    from harness.encoders.sparse import SparseMLMEncoder, is_sparse_model

    spec = spec_for(tiny_mlm, steps=2, method_options={"pooling": "sum", "lambda_warmup_steps": 2})
    ckpt = Splade().train(spec, make_data(), tmp_path / "run")
    saved = json.loads((ckpt.path / "harness_encoder.json").read_text())
    assert saved["pooling"] == "sum" and saved["normalize"] is False and saved["doc_max_length"] == 24
    assert json.loads((ckpt.path / "training.json").read_text())["head"]["aggregation"] == "sum"
    assert is_sparse_model(str(tmp_path / "run")) and not is_sparse_model(tiny_mlm)
    encoder = SparseMLMEncoder(str(tmp_path / "run"))
    assert (encoder.pooling, encoder.query_max_length, encoder.doc_max_length) == ("sum", 16, 24)
    assert json.loads((tmp_path / "run" / "method" / "splade.json").read_text())["steps"] == 2


def test_bad_input_is_refused(tiny_mlm, tmp_path):
    plain = str(make_tiny_bert(tmp_path / "plain-bert"))                   # a BertModel: no MLM head
    with pytest.raises(ConfigError, match="BertModel without a masked-LM head"):
        check_mlm_model(plain)
    with pytest.raises(ConfigError, match="without a masked-LM head"):
        Splade().train(spec_for(plain), make_data(), tmp_path / "plain")
    check_mlm_model(tiny_mlm)
    with pytest.raises(ConfigError, match="similarity 'dot' and temperature 1.0"):
        Splade().train(spec_for(tiny_mlm, similarity="cos"), make_data(), tmp_path / "cos")
    with pytest.raises(ConfigError, match="similarity 'dot' and temperature 1.0"):
        Splade().train(spec_for(tiny_mlm, temperature=0.05), make_data(), tmp_path / "tau")
    with pytest.raises(ConfigError, match="unknown regularizer 'l2'"):
        Splade().train(spec_for(tiny_mlm, method_options={"regularizer": "l2"}), make_data(), tmp_path / "l2")
    with pytest.raises(ConfigError, match="unknown pooling 'mean'"):
        Splade().train(spec_for(tiny_mlm, method_options={"pooling": "mean"}), make_data(), tmp_path / "mean")
    with pytest.raises(ConfigError, match="lambda_q must be a number >= 0"):
        Splade().train(spec_for(tiny_mlm, method_options={"lambda_q": -1}), make_data(), tmp_path / "neg")
    # paper 003's candidates use no mined negatives; they need in-batch negatives
    with pytest.raises(ConfigError, match="candidates 'paper' use in-batch negatives only"):
        Splade().train(spec_for(tiny_mlm, n_hard_negatives=1, method_options={"candidates": "paper"}), make_data(),
                       tmp_path / "paper-hn")
    with pytest.raises(ConfigError, match="candidates 'official' score every in-batch positive"):
        Splade().train(spec_for(tiny_mlm, in_batch_negatives=False), make_data(), tmp_path / "no-in-batch")


def test_presets():
    paper = Splade.spec("paper")
    assert (paper.model, paper.batch_size, paper.query_max_length, paper.doc_max_length) == \
        ("bert-base-uncased", 512, 256, 256)
    assert (paper.lr, paper.warmup_steps, paper.steps, paper.schedule) == (2e-5, 6000, 150_000, "linear")
    assert (paper.similarity, paper.temperature, paper.n_hard_negatives) == ("dot", 1.0, 0)
    assert Splade().resolve_options(dict(paper.method_options))["lambda_warmup_steps"] == 50_000
    # paper 003: in-batch negatives only; the SPLADE++-style presets: one BM25 negative, naver's candidates
    assert Splade().resolve_options(dict(paper.method_options))["candidates"] == "paper"
    for scale in ("small", "tiny"):
        spec = Splade.spec(scale)
        assert spec.n_hard_negatives == 1
        assert Splade().resolve_options(dict(spec.method_options))["candidates"] == "official"
    assert Splade.spec("small").model == Splade.spec("tiny").model == "splade-tiny"
