"""End to end on the synthetic world: train ``splade`` (tiny preset: the real SPLADE-tiny MLM) a few steps
on the world's training rows, then ``harness eval --model <run>`` takes the sparse path by itself (exact
backend, the run's pooling and lengths) and stores the sparsity statistics."""
from __future__ import annotations

import json

import pytest

from harness.cli import main

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]     # about 25 s on one thread


def test_train_then_eval_through_the_sparse_path(tmp_path, monkeypatch, capsys):
    from harness.data.collections import load_training_data
    from harness.synthetic import WorldSpec, make_world, write_world
    from methods.splade import Splade

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    world = write_world(make_world(WorldSpec.default(), seed=0), tmp_path / "world")
    spec = Splade.spec("tiny", steps=3, warmup_steps=0, batch_size=8, save_every=0,
                       method_options={"lambda_warmup_steps": 2})
    Splade().train(spec, load_training_data([str(world / "train")]), tmp_path / "run")
    out = tmp_path / "eval"
    code = main(["eval", "--model", str(tmp_path / "run"), "--suite", "synthetic", "--dataset-dir",
                 str(world / "eval" / "latin_qa"), "--out", str(out), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    encoder = manifest["encoder"]
    assert (encoder["encoder"], encoder["index"], encoder["pooling"]) == ("hf-sparse", "exact", "max")
    assert (encoder["query_max_length"], encoder["doc_max_length"]) == (32, 64)      # the run's, not the alias's
    sparsity = manifest["sparse"]["sparsity"]
    assert 0 < sparsity["query_nnz"]["mean"] < 30522 and sparsity["expected_flops"] > 0
    ndcg = json.loads(captured.out)["metrics"]["ndcg@10"]
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["method"]["lambda_q"] for r in log] == pytest.approx([3e-4 / 4, 3e-4, 3e-4])
    print(f"\n3 steps of SPLADE-tiny on the synthetic world, latin_qa nDCG@10 {ndcg:.4f}")
    assert ndcg > 0.3        # SPLADE-tiny untrained scores 0.77 here; 3 small steps keep it a working retriever
