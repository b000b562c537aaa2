"""Small scale on real data (slow): the uniform baseline fine-tunes MiniLM on SciFact train and is
evaluated on SciFact test through the evaluation pipeline.

A short run (20 steps of 32 queries) guards the whole path at real scale: MiniLM, the
BEIR train qrels as training data, the checkpoint loaded by HFEncoder, dense retrieval
and trec_eval-exact nDCG@10.  The untuned model scores 0.645; the assertion only rules
out a broken pipeline (a collapse far below it), it does not claim an improvement.
"""
from __future__ import annotations

import pytest

from harness.method import get_method

pytestmark = [pytest.mark.slow, pytest.mark.needs_shared]


def test_uniform_small_on_scifact(shared_data, tmp_path, capsys):
    from harness.data.collections import load_training_data
    from harness.pipeline import ModelSpec, evaluate_model, load_benchmark

    method = get_method("uniform")
    spec = method.spec("small", steps=20, progress=False)
    data = load_training_data([{"path": shared_data / "scifact"}])
    ckpt = method.train(spec, data, tmp_path / "train")
    loaded = load_benchmark(shared_data / "scifact", suite="beir")
    stored = evaluate_model(ModelSpec("uniform-small", encoder=method.encoder(ckpt)), loaded, tmp_path / "eval",
                            cache_dir=tmp_path / "cache")
    ndcg = stored.evaluation.aggregate["ndcg@10"]
    with capsys.disabled():
        print(f"\nuniform small (20 steps) on SciFact test: nDCG@10 = {ndcg:.4f} (untuned MiniLM 0.645)")
    assert 0.55 < ndcg < 0.80
