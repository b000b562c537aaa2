"""The COCO method (METHODS.md 2.1): span pairs cut as the released code does, the batch-builder and
loss hooks, dropout off by default, a tiny pretraining run on the synthetic world's corpora, bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.errors import ConfigError
from methods.coco import Coco, coco_losses
from methods.coco_spans import document_chunks, pack_chunks, span_sources, split_sentences

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world():
    from harness.ablation.resolve import resolve_model, synthetic_world

    return synthetic_world("default"), resolve_model("synthetic:default/tiny-bert")


def corpora(world_dir, *names):
    return [str(world_dir / "eval" / n) for n in names]


def test_sentences_and_the_released_packing_rule():
    assert split_sentences("A b. C d!  E? F") == ["A b.", "C d!", "E?", "F"]
    assert split_sentences("甲乙。丙丁！戊") == ["甲乙。", "丙丁！", "戊"]
    rng = np.random.default_rng(0)
    # close when the next sentence would overflow 30 tokens; a longer sentence stays whole; empty ones vanish
    assert pack_chunks([10, 15, 10, 40, 0, 5], 30, 0.0, rng) == [[0, 1], [2], [3], [5]]
    assert pack_chunks([3, 3, 3], 30, 1.0, rng) == [[0], [1], [2]]          # always closed early
    sizes = [len(c) for c in pack_chunks([1] * 20000, 10**6, 0.1, np.random.default_rng(1))]
    assert len(sizes) / 20000 == pytest.approx(0.1, abs=0.01)               # early close with probability 0.1


def test_documents_are_dropped_as_released(world):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world[1])
    rng = np.random.default_rng(0)
    assert document_chunks("one single sentence here", tok, rng=rng) == []
    assert document_chunks("Short one. Short two.", tok, span_tokens=30, early_close=0.0, rng=rng) == []  # one chunk
    assert document_chunks("a. word word word word. more words here.", tok, span_tokens=4, early_close=0.0,
                           rng=rng) == []                                   # first chunk of <= 2 tokens
    assert document_chunks("Short one. Short two.", tok, span_tokens=2, early_close=0.0, rng=rng) == [
        "Short one.", "Short two."]


def test_span_sources_per_corpus_and_too_short_corpora(world, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world[1])
    data = span_sources(corpora(world[0], "latin_qa", "cjk_qa"), tok, span_tokens=12)
    assert data.names == ["latin_qa", "cjk_qa"]
    assert all(len(r.pos) >= 2 for s in data.sources for r in s.rows)
    again = span_sources(corpora(world[0], "latin_qa", "cjk_qa"), tok, span_tokens=12)
    assert [r.pos for r in again.sources[0].rows] == [r.pos for r in data.sources[0].rows]     # seeded
    other = span_sources(corpora(world[0], "latin_qa", "cjk_qa"), tok, span_tokens=13)
    assert data.fingerprint() != other.fingerprint()
    short = tmp_path / "short"
    short.mkdir()
    (short / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": f"d{i}", "text": "only one sentence"})
                                                  for i in range(3)) + "\n")
    with pytest.raises(ConfigError, match="none of its 3 documents yields two spans.*too short for span pairs"):
        span_sources([str(short)], tok)
    with pytest.raises(ConfigError, match="needs at least one pretraining corpus"):
        span_sources([], tok)
    spec = Coco.spec("tiny", model=world[1], method_options={"corpora": [str(short)]})
    with pytest.raises(ConfigError, match="too short for span pairs"):
        Coco().train(spec, None, tmp_path / "run")
    assert not (tmp_path / "run").exists()                                  # refused before any training


@pytest.fixture(scope="module")
def span_data(world):
    return Coco().span_data(tiny_spec(world))


def tiny_spec(world, **options):
    return Coco.spec("tiny", model=world[1], batch_size=6,
                     method_options={"corpora": corpora(world[0], "latin_qa", "cyrillic_news"), "span_tokens": 12,
                                     **options})


def coco_context(world, data, rank=0, world_size=1, dropout=False, model_dir=None):
    from harness.train.context import TrainContext
    from harness.train.model import build_model

    method = Coco()
    spec = tiny_spec(world).replace(dropout=dropout)
    if model_dir is not None:
        spec = spec.replace(model=model_dir)
    model, tok, enc = build_model(spec)
    model.train(spec.dropout)                           # as the trainer does before configure
    ctx = TrainContext(spec=spec, data=data, model=model, tokenizer=tok, device=torch.device("cpu"),
                       options=method.resolve_options(dict(spec.method_options)), rank=rank, world_size=world_size,
                       encoding=enc)
    method.configure(ctx)
    return method, ctx


EXAMPLES = [(0, 3), (1, 7), (0, 11), (1, 2), (0, 40), (1, 5)]


def test_batches_hold_two_distinct_chunks_of_each_document_split_over_ranks(world, span_data):
    method, ctx = coco_context(world, span_data)
    batch = method.make_batch(EXAMPLES, ctx, 0)
    decode = ctx.tokenizer.batch_decode

    def ids(view, i):
        feats = batch.views[view]
        return feats["input_ids"][i][feats["attention_mask"][i].bool()].tolist()

    for i, (s, r) in enumerate(EXAMPLES):
        chunks = [ctx.tokenizer(c)["input_ids"] for c in ctx.data.sources[s].rows[r].pos]
        assert ids("span_a", i) in chunks and ids("span_b", i) in chunks      # whole chunks of the document
        assert ids("span_a", i) != ids("span_b", i)                           # two distinct chunks
    a = decode(batch.views["span_a"]["input_ids"], skip_special_tokens=True)
    assert batch.group_ids.tolist() == [0, 1, 0, 1, 0, 1]
    assert decode(method.make_batch(EXAMPLES, ctx, 0).views["span_a"]["input_ids"], skip_special_tokens=True) == a
    halves = [method.make_batch(EXAMPLES, coco_context(world, span_data, r, 2)[1], 0) for r in (0, 1)]
    assert sum((decode(h.views["span_a"]["input_ids"], skip_special_tokens=True) for h in halves), []) == a
    encoded = {v: ctx.model(**batch.views[v]) for v in ("span_a", "span_b")}
    ctx.batch = batch
    from harness.train.context import EncodedBatch

    losses, groups = method.losses(EncodedBatch(encoded), ctx)
    assert losses.shape == (12,) and groups.tolist() == [0, 1, 0, 1, 0, 1] * 2
    assert torch.allclose(losses, coco_losses(encoded["span_a"], encoded["span_b"]))


def test_dropout_is_off_by_default_and_the_spec_field_turns_it_on(world, span_data, tmp_path):
    from trainutil import make_tiny_bert

    assert all(not Coco.spec(scale).dropout for scale in ("tiny", "small", "paper"))
    model_dir = str(make_tiny_bert(tmp_path / "bert", dropout=0.3))
    outputs = {}
    for dropout in (False, True):
        method, ctx = coco_context(world, span_data, dropout=dropout, model_dir=model_dir)
        # Train mode either way: HF applies gradient checkpointing only to modules in training mode.
        assert all(m.training for m in ctx.model.modules())
        feats = method.make_batch(EXAMPLES, ctx, 0).views["span_a"]
        outputs[dropout] = [ctx.model(**feats) for _ in range(2)]
    assert torch.equal(*outputs[False])                 # the released code: backbone without dropout
    ctx.model.eval()
    assert torch.equal(ctx.model(**feats), outputs[False][0])   # dropout p = 0 in train mode = eval mode
    assert not torch.allclose(*outputs[True])
    assert not torch.allclose(outputs[False][0], outputs[True][0])


def test_tiny_pretraining_on_the_synthetic_corpora(world, tmp_path):
    from harness.train.logs import read_log

    spec = tiny_spec(world).replace(steps=60, batch_size=16, lr=3e-3, warmup_steps=5)
    ckpt = Coco().train(spec, None, tmp_path / "run")
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    losses = [r["loss"] for r in log]
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    print(f"\nCOCO tiny: 60 steps of 16 documents (32 spans): loss {first:.3f} (steps 1-5) -> {last:.3f} (56-60); "
          f"chance level log(31) = {np.log(31):.3f}")
    assert last < 0.85 * first                          # from chance level (a random model: equal scores)
    assert all(sum(r["counts"].values()) == 16 for r in log)
    assert set().union(*(r["counts"] for r in log)) == {"latin_qa", "cyrillic_news"}
    info = json.loads((ckpt.path / "training.json").read_text())
    assert info["method"] == "coco" and info["similarity"] == "dot" and info["encoding"]["pooling"] == "cls"
