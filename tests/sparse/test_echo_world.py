"""Echo-Mistral-SPLADE end to end on the synthetic world (slow): the tiny preset (the world's tiny decoder with
an untied LM head) trained with LoRA and with full fine-tuning under a frozen head, the paper's interpretability
check before and after each (share of a text's top-20 terms that occur in the text, stored in
method/echo_splade.json), then ``harness eval --model <run>`` through the echo sparse path; and the real SmolLM2
GGUF behind the ``smollm2`` aliases (tied head, recorded)."""
from __future__ import annotations

import json

import pytest

from harness.cli import main

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from harness.synthetic import WorldSpec, make_world, write_world

    return write_world(make_world(WorldSpec.default(), seed=0), tmp_path_factory.mktemp("echo-world") / "world")


def test_lora_keeps_terms_in_text_better_than_full_finetuning_then_eval(world, tmp_path, monkeypatch, capsys):
    from harness.data.collections import load_training_data
    from methods.echo_splade import EchoSplade

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = load_training_data([str(world / "train")])
    records = {}
    for mode, overrides in (("lora", {}), ("full", {"lora": None})):
        spec = EchoSplade.spec("tiny", steps=20, save_every=0, **overrides)
        EchoSplade().train(spec, data, tmp_path / mode)
        records[mode] = json.loads((tmp_path / mode / "method" / "echo_splade.json").read_text())
    lora, full = records["lora"], records["full"]
    for record in (lora, full):
        assert record["tied_head"] is False
        assert record["frozen_unchanged"] == {"input_embeddings": True, "lm_head": True}
    assert lora["tuning"] == "lora" and full["tuning"] == "full-frozen-head"
    assert lora["interpretability"]["before"] == full["interpretability"]["before"]     # same model, same texts
    before = lora["interpretability"]["before"]["mean_share"]
    after = {m: r["interpretability"]["after"]["mean_share"] for m, r in records.items()}
    with capsys.disabled():
        print(f"\ntop-20 terms in the text: before {before:.4f}; after 20 steps LoRA {after['lora']:.4f}, "
              f"full fine-tuning with frozen head {after['full']:.4f}")
    # the paper's argument: a frozen head alone does not keep the logits on the text's tokens, LoRA does better
    assert before - after["full"] > before - after["lora"]

    capsys.readouterr()          # what was printed so far is not the eval's JSON
    out = tmp_path / "eval"
    code = main(["eval", "--model", str(tmp_path / "lora"), "--suite", "synthetic", "--dataset-dir",
                 str(world / "eval" / "latin_qa"), "--out", str(out), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    encoder = manifest["encoder"]
    assert (encoder["encoder"], encoder["index"], encoder["echo"]) == ("hf-echo-sparse", "exact", True)
    assert "Document again:" in encoder["doc_template"] and encoder["include_eos"] is False
    assert manifest["sparse"]["sparsity"]["doc_nnz"]["mean"] > 0
    ndcg = json.loads(captured.out)["metrics"]["ndcg@10"]
    with capsys.disabled():
        print(f"LoRA echo-splade after 20 tiny steps, latin_qa nDCG@10 {ndcg:.4f}, "
              f"mean non-zeros per document {manifest['sparse']['sparsity']['doc_nnz']['mean']:.1f}")
    assert 0 <= ndcg <= 1


def test_smollm2_aliases(tmp_path, monkeypatch):
    from harness.encoders.model_check import check_model
    from harness.encoders.refs import GGUF_MARKER, resolve_model
    from harness.encoders.sparse import EchoSparseEncoder, is_sparse_model, load_sparse_encoder
    from methods.echo_splade import EchoSplade, is_tied, top_terms_in_text

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    path, defaults = resolve_model("smollm2")                # converted from the GGUF once, then reused
    assert (tmp_path / "cache" / "gguf").is_dir() and json.loads((tmp_path / "cache" / "gguf" / path.split("/")[-1]
                                                                   / GGUF_MARKER).read_text())["dtype"] == "float32"
    check_model("smollm2-echo-splade")
    assert is_sparse_model("smollm2-echo-splade") and not is_sparse_model("smollm2")
    echo, plain = load_sparse_encoder("smollm2-echo-splade"), load_sparse_encoder("smollm2-plain-splade")
    assert isinstance(echo, EchoSparseEncoder) and echo.echo and not plain.echo
    texts = ["Aspirin lowers the risk of heart attack", "The tumor suppressor p53 regulates the cell cycle"]
    weights = echo.encode_docs(texts, progress=False)
    ids = echo.text_token_ids(texts)
    shares = [top_terms_in_text(weights.to_dense()[i], ids[i]) for i in range(2)]
    print(f"\nSmolLM2 echo, untrained: nnz {weights.nnz.tolist()}, top-20 in-text share {shares}")
    assert all(n > 0 for n in weights.nnz)
    model, _ = echo._load()
    assert is_tied(model)
    head = EchoSplade().representation_head(EchoSplade.spec("small"))
    assert head.describe()["lm"] == "causal"
