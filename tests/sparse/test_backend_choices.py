"""Sparse backends chosen by name through the pipeline and the CLI: options recorded in the result, unknown
backends and quantisations refused before any encoding, with the list of choices."""
from __future__ import annotations

import pytest
from optional_extras import require_extra

from harness.errors import ConfigError


def test_seismic_through_the_pipeline_records_its_options_and_recall(dataset, tmp_path):
    require_extra("seismic")
    from harness.pipeline import ModelSpec, evaluate_model, load_benchmark

    loaded = load_benchmark(dataset)
    cache = tmp_path / "cache"
    exact = evaluate_model(ModelSpec("splade-tiny"), loaded, tmp_path / "exact", cache_dir=cache)
    result = evaluate_model(ModelSpec("splade-tiny", sparse_backend="seismic:query_cut=1000,n_postings=100"), loaded,
                            tmp_path / "seismic", cache_dir=cache)
    sparse = result.manifest["sparse"]
    assert sparse["backend"] == "seismic"
    assert sparse["seismic"]["query_cut"] == 1000 and sparse["seismic"]["n_postings"] == 100
    assert sparse["seismic"]["heap_factor"] == 0.7                      # defaults recorded too
    assert set(sparse["recall_vs_exact"]) == {"recall@10", "recall@100", "recall@1000"}
    assert sparse["recall_vs_exact"]["recall@10"] == 1.0                # five documents, every query term: nothing lost
    assert result.manifest["encoder"]["index"] == "seismic:query_cut=1000,n_postings=100"
    assert sparse["timings"]["corpus_from_cache"] is True               # the exact run's weights reused
    assert result.metrics["ndcg@10"] == pytest.approx(exact.metrics["ndcg@10"])
    # the seismic run holds every document the exact one retrieved, in the same order
    ref, got = exact.run().to_dict(), result.run().to_dict()
    for qid, docs in ref.items():
        assert sorted(got[qid], key=lambda d: -got[qid][d]) == sorted(docs, key=lambda d: -docs[d])


@pytest.mark.parametrize("spec, message", [
    ({"sparse_backend": "seismik"}, "unknown sparse retrieval backend 'seismik'; choose one of exact, "
                                    "lucene-impact, seismic"),
    ({"sparse_backend": "lucene-impact", "quantization": "bmp"},
     "unknown impact quantisation 'bmp'; choose one of pyserini \\(round\\(w / 5 \\* 256\\)\\), splade"),
    ({"sparse_backend": "seismic:querycut=3"}, "unknown seismic option 'querycut'"),
])
def test_bad_backends_are_refused_by_the_pipeline_before_encoding(dataset, tmp_path, spec, message):
    from harness.pipeline import ModelSpec, evaluate_model, load_benchmark

    if spec["sparse_backend"].startswith("seismic:"):
        require_extra("seismic")      # without it seismic is refused for its missing package, not its option
    loaded = load_benchmark(dataset)
    with pytest.raises(ConfigError, match=message):
        evaluate_model(ModelSpec("splade-tiny", **spec), loaded, tmp_path / "out", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "out").exists()
    assert not list((tmp_path / "cache").rglob("shard-*"))             # no document was encoded


@pytest.mark.parametrize("flag, value, choices", [
    ("--sparse-backend", "seismik", ("exact", "lucene-impact")),
    ("--quantization", "bmp", ("pyserini", "splade")),
])
def test_bad_backends_are_refused_by_the_cli_with_the_choices(dataset, tmp_path, capsys, flag, value, choices):
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["eval", "--model", "splade-tiny", "--dataset-dir", str(dataset), "--out", str(tmp_path / "x"),
              "--sparse-backend", "lucene-impact", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: '{value}'" in err and all(c in err for c in choices)
    assert not (tmp_path / "x").exists()


def test_the_cli_quantisation_choices_are_the_engine_rules():
    from harness.cli.eval import QUANTIZATIONS as CLI_RULES
    from harness.retrieval.impact import QUANTIZATIONS

    assert tuple(CLI_RULES) == tuple(QUANTIZATIONS)


def test_progress_false_keeps_encoding_bars_off(dataset, tmp_path, capfd, monkeypatch):
    """`harness run --no-progress` reaches the evaluation: no encoding bars on stderr (dense and sparse), even
    where bars are forced on (HARNESS_PROGRESS=on, as on a terminal: captured stderr is none)."""
    from harness.pipeline import ModelSpec, evaluate_model, load_benchmark
    from harness.progress import PROGRESS_ENV

    monkeypatch.setenv(PROGRESS_ENV, "on")

    loaded = load_benchmark(dataset)
    for name in ("splade-tiny", "minilm"):
        evaluate_model(ModelSpec(name), loaded, tmp_path / name, cache_dir=tmp_path / "cache", progress=False)
    assert "encode" not in capfd.readouterr().err
    evaluate_model(ModelSpec("minilm"), loaded, tmp_path / "again", cache_dir=tmp_path / "cache2")
    assert "encode" in capfd.readouterr().err      # the default shows them (the check above can fail)
