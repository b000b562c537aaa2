"""The loss weights w_l + w_t of the ``mined`` method must be able to change the update under the
trainer's gradient clipping (paper 004 Sec. 3.5; the decision is in methods/mining/method.py).

Every run clips (``max_grad_norm`` far below the gradient's norm, as at the small scale where every
step's norm exceeded 1.0): a per-batch weight (``weighting: batch``, the released code) is undone by
the clipping, per-query weights (``weighting: sample``, the paper's text) are not."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from trainutil import make_tiny_bert

from harness.data.collections import TrainingData, TrainingSource
from harness.data.training import TrainingRow
from harness.errors import ConfigError
from harness.method import get_method

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = "river mountain violin comet bakery glacier harbor meadow lantern canyon orchard falcon".split()


def source(n: int = 24) -> TrainingSource:
    """Two languages (2:1) and three topics of unequal size, so portion weights differ within a batch."""
    rng = random.Random(3)
    rows = []
    for i in range(n):
        topic = WORDS[0] if i % 5 == 0 else WORDS[1 + i % 2]
        words = [topic, *rng.sample(WORDS, 4)]
        rows.append(TrainingRow(" ".join(words[:3]) + f" {i}", [" ".join(words) + f" passage {i}"],
                                [f"unrelated {rng.choice(WORDS)} note {i}"],
                                {"line": i + 1, "lang": "en" if i % 3 else "fr", "topic": topic}))
    return TrainingSource(name="toy", rows=rows, language="en", fingerprint=f"weighting-{n}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tiny-weighting"), dropout=0.0))


def trained_parameters(tiny: str, directory, **options) -> dict[str, np.ndarray]:
    from harness.train.model import build_model, load_weights

    method = get_method("mined")
    spec = method.spec("tiny", model=tiny, steps=3, batch_size=4, warmup_steps=0, n_hard_negatives=1, lr=1e-3,
                       max_grad_norm=1e-3, query_max_length=16, doc_max_length=24, save_every=100,
                       use_instructions=False,
                       method_options={"mine": False, "batches": "language_topic", "languages": "column:lang",
                                       "topics": "column:topic", **options})
    ckpt = method.train(spec, TrainingData([source()]), directory)
    grad_norms = [r["grad_norm"] for r in _log(ckpt.workdir / "train_log.jsonl")]
    assert len(grad_norms) == 3 and min(grad_norms) > 1e-2, grad_norms      # every step is clipped
    model, _, _ = build_model(spec)
    load_weights(model, ckpt.path)
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items() if v.dtype.is_floating_point}


def _log(path) -> list[dict]:
    import json

    return [json.loads(x) for x in path.read_text().splitlines() if '"step"' in x]


def max_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def test_per_query_weights_change_the_update_under_clipping(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    plain = trained_parameters(tiny, tmp_path / "plain")
    sample = trained_parameters(tiny, tmp_path / "sample", weights="portion", weighting="sample")
    batch = trained_parameters(tiny, tmp_path / "batch", weights="portion", weighting="batch")
    constant = trained_parameters(tiny, tmp_path / "constant", weights="constant", weighting="sample")
    # 3 AdamW steps of lr 1e-3 move a parameter by up to ~3e-3; per-query weights move some differently
    assert max_difference(plain, sample) > 1e-4
    # a per-batch scalar is undone by clipping (what made the three Table 9 variants identical) ...
    assert max_difference(plain, batch) < 1e-6
    # ... and a constant weight is a global loss scale, which AdamW ignores, clipped or not
    assert max_difference(plain, constant) < 1e-6


def test_sample_weighting_weights_each_query(tiny):
    from harness.train.context import LossOutput

    method = get_method("mined")
    spec = method.spec("tiny", model=tiny, batch_size=4, use_instructions=False,
                       method_options={"mine": False, "batches": "language_topic", "languages": "column:lang",
                                       "topics": "column:topic", "weights": "portion", "weighting": "sample"})
    data = TrainingData([source()])
    method.use_prepared(method.prepare(spec, data, {}).values)
    examples = [(0, 0), (0, 1), (0, 4)]
    w = method.sample_weights(examples)
    assert len(set(np.round(w, 9))) > 1                      # fr vs en rows: different weights
    losses = torch.tensor([1.0, 2.0, 4.0])

    class Ctx:
        options = method.resolve_options(dict(spec.method_options))
        batch = type("B", (), {"examples": examples})()

    got = float(method.reduce(LossOutput(losses=losses, group_ids=torch.zeros(3, dtype=torch.long)), Ctx))
    assert got == pytest.approx(float(np.mean(w * [1.0, 2.0, 4.0])))
    Ctx.options = {**Ctx.options, "weighting": "batch"}
    got = float(method.reduce(LossOutput(losses=losses, group_ids=torch.zeros(3, dtype=torch.long)), Ctx))
    assert got == pytest.approx(float(np.mean([1.0, 2.0, 4.0]) * w.mean()))
    Ctx.batch = type("B", (), {"examples": examples[:2]})()
    Ctx.options = {**Ctx.options, "weighting": "sample"}
    with pytest.raises(ConfigError, match="one loss per query"):
        method.reduce(LossOutput(losses=losses, group_ids=torch.zeros(3, dtype=torch.long)), Ctx)
    with pytest.raises(ConfigError, match="unknown weighting 'negative'"):
        method.resolve_options({"weighting": "negative"})
