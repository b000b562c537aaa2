"""``harness eval`` with a sparse model: the sparse path is chosen by itself, the backend by name."""
from __future__ import annotations

import json

import pytest

from harness.cli import main


def test_eval_splade_tiny_with_both_backends(dataset, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    manifests, metrics = {}, {}
    for backend in ("exact", "lucene-impact"):
        out = tmp_path / backend
        args = ["eval", "--model", "splade-tiny", "--dataset-dir", str(dataset), "--out", str(out),
                "--sparse-backend", backend, "--format", "json"]
        if backend == "lucene-impact":
            args += ["--quantization", "splade"]
        assert main(args) == 0
        manifests[backend] = json.loads((out / "manifest.json").read_text())
        metrics[backend] = json.loads(capsys.readouterr().out)["metrics"]
    exact, impact = manifests["exact"], manifests["lucene-impact"]
    assert exact["encoder"]["encoder"] == "hf-sparse" and exact["encoder"]["index"] == "exact"
    assert impact["encoder"]["quantization"] == "splade" and impact["sparse"]["quantization_rule"] == "rint(w * 100)"
    stats = exact["sparse"]["sparsity"]
    assert stats["query_nnz"]["mean"] > 5 and stats["doc_nnz"]["mean"] > 5 and stats["expected_flops"] > 0
    assert set(stats["doc_nnz"]) == {"mean", "max", "p50", "p90", "p99"}
    # The second evaluation reused the cached corpus weights.
    assert impact["sparse"]["timings"]["corpus_from_cache"] is True
    # Five documents on clearly separate topics: both backends put every relevant document first.
    assert metrics["exact"]["ndcg@10"] == pytest.approx(1.0)
    assert metrics["lucene-impact"]["ndcg@10"] == pytest.approx(1.0)


def test_an_unknown_backend_is_refused(dataset, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--model", "splade-tiny", "--dataset-dir", str(dataset), "--out", str(tmp_path / "x"),
              "--sparse-backend", "seismic-typo"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_sparse_options_with_a_dense_model_are_ignored_with_a_warning(dataset, tmp_path, caplog):
    import argparse

    from harness.cli.eval import warn_ignored_options

    args = argparse.Namespace(model="minilm", pooling=None, query_prompt=None, doc_prompt=None, normalize=None,
                              max_length=None, batch_size=None, index=None, k1=None, b=None,
                              sparse_backend="lucene-impact", quantization=None)
    assert warn_ignored_options(args, lexical=False) == ["sparse_backend"]
    args.index, args.sparse_backend = "HNSW32", None
    assert warn_ignored_options(args, lexical=False, sparse=True) == ["index"]
