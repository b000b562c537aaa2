"""RetroMAE pre-training (paper 002's first stage): whole-word masks, the enhanced decoder's attention, the loss
against a hand computation on the same masks, a short run that saves the encoder only, and PEG's ``pretrain``
option declaring it as a stage its fine-tuning starts from."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from trainutil import make_tiny_bert

from harness.errors import ConfigError
from methods.peg import PEG
from methods.retromae import (
    IGNORE,
    EnhancedDecoderLayer,
    RetroMAE,
    RetroMAEHead,
    corrupt,
    decoder_attention,
    retromae_loss,
    whole_word_mask,
    whole_word_masks,
    word_starts,
)

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLES = [(0, 3), (1, 7), (0, 11), (1, 2)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from harness.ablation.resolve import synthetic_world

    root = tmp_path_factory.mktemp("models")
    return synthetic_world("default"), str(make_tiny_bert(root / "mlm", dropout=0.0, mlm=True))


def pt_spec(world, **train):
    corpora = [str(world[0] / "eval" / n) for n in ("latin_qa", "cyrillic_news")]
    return RetroMAE.spec("tiny", **{"model": world[1], "batch_size": 4, "steps": 3, "warmup_steps": 0,
                                    "doc_max_length": 32, "method_options": {"corpora": corpora}, **train})


def test_whole_words_are_masked_together_at_the_rate():
    tokens = ["[CLS]", "play", "##ing", "the", "gui", "##tar", "is", "fun", "and", "loud", "[SEP]"]
    words = word_starts(tokens)
    assert words == [0, 1, 1, 2, 3, 3, 4, 5, 6, 7, 8]
    maskable = [t not in ("[CLS]", "[SEP]") for t in tokens]
    for seed in range(20):
        mask = whole_word_mask(words, maskable, 0.3, np.random.default_rng(seed))
        assert not mask[0] and not mask[-1]
        assert mask[1] == mask[2] and mask[4] == mask[5]                  # a word's pieces go together
        assert mask.sum() == 3                                            # round(11 tokens x 0.3) = 3 tokens


def test_a_pool_of_masks_keeps_words_whole_and_fills_the_count_exactly():
    # 40 tokens: [CLS], 12 two-piece words, 14 one-token words, [SEP]
    tokens = ["[CLS]"] + [t for i in range(12) for t in (f"w{i}", "##x")] + [f"c{i}" for i in range(14)] + ["[SEP]"]
    words = word_starts(tokens)
    maskable = [t not in ("[CLS]", "[SEP]") for t in tokens]
    masks = whole_word_masks(words, maskable, 0.5, np.random.default_rng(0), 64)
    assert masks.shape == (64, len(tokens)) and len(tokens) == 40
    assert (masks.sum(1) == 20).all()                                      # round(40 x 0.5), always reachable
    pieces = np.array([i for i in range(1, 24, 2)])
    assert (masks[:, pieces] == masks[:, pieces + 1]).all()                # "w" and its "##x" go together
    assert not masks[:, [0, 39]].any() and len({m.tobytes() for m in masks}) > 50


def test_decoder_rows_never_see_themselves_and_always_see_the_sentence_embedding():
    words = list(range(12))
    maskable = [False] + [True] * 10 + [False]
    allowed = decoder_attention(words, maskable, 0.5, np.random.default_rng(0))
    assert allowed.shape == (12, 12)
    assert not allowed.diagonal().any()
    assert allowed[1:, 0].all()                                          # e_X^ (position 0) visible to every other row
    # each row hides its own position plus one drawn mask of round(12 tokens x 0.5) = 6 words
    hidden = (~allowed[1:11, 1:11]).sum(1)
    assert ((hidden == 6) | (hidden == 7)).all()


def test_bert_corruption_keeps_labels_only_where_masked():
    ids = np.arange(100, 140)
    mask = np.zeros(40, dtype=bool)
    mask[::2] = True
    out, labels = corrupt(ids, mask, 1, 30000, np.random.default_rng(0))
    assert (labels[~mask] == IGNORE).all() and (labels[mask] == ids[mask]).all()
    assert (out[~mask] == ids[~mask]).all() and (out[mask] == 1).mean() > 0.5


def test_decoder_output_ignores_what_a_row_may_not_see():
    torch.manual_seed(0)
    layer = EnhancedDecoderLayer(16, 2, 32, dropout=0.0, attention_dropout=0.0).eval()
    query, kv = torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    allowed = torch.ones(1, 5, 5, dtype=torch.bool)
    allowed[0, 2, 3] = False
    out = layer(query, kv, allowed)
    changed = kv.clone()
    changed[0, 3] += 5.0
    again = layer(query, changed, allowed)
    assert torch.allclose(out[0, 2], again[0, 2], atol=1e-6)             # row 2 cannot see position 3
    assert not torch.allclose(out[0, 1], again[0, 1], atol=1e-3)         # row 1 can


def test_loss_is_the_sum_of_the_two_token_means():
    enc = torch.tensor([[0.0, 2.0, 0.0], [4.0, 0.0, 0.0]])
    dec = torch.tensor([[1.0, 1.0, 1.0], [3.0, 0.0, 0.0]])
    terms = {"encoder": enc, "encoder_mask": torch.tensor([[False, True, False], [True, False, False]]),
             "decoder": dec, "decoder_mask": torch.tensor([[True, True, True], [True, False, False]])}
    loss, per_text = retromae_loss(terms)
    assert float(loss) == pytest.approx(6 / 2 + 6 / 4)
    assert per_text.tolist() == pytest.approx([2.0 + 1.0, 4.0 + 3.0])


def test_step_loss_equals_a_hand_computation_on_the_same_masks(world):
    from trainutil import plain_step

    from harness.train.context import TrainContext
    from harness.train.model import build_model

    method = RetroMAE()
    spec = pt_spec(world)
    head = method.representation_head(spec)
    model, tok, enc = build_model(spec, head=head)
    model.train()
    data = method.prepare(spec, None, {}).data
    ctx = TrainContext(spec=spec, data=data, model=model, tokenizer=tok, device=torch.device("cpu"),
                       options=method.resolve_options(dict(spec.method_options)), encoding=enc)
    method.configure(ctx)
    batch = method.make_batch(EXAMPLES, ctx, 0)
    targets = dict(head.targets)
    assert torch.equal(method.make_batch(EXAMPLES, ctx, 0).views["text"]["input_ids"], batch.views["text"]["input_ids"])
    head.set_targets(targets)
    # By hand: encoder MLM on the masked ids; decoder from [CLS] with the masked attention; both token means.
    with torch.no_grad():
        out = model.backbone(**batch.views["text"])
        logp = torch.log_softmax(out.logits.double(), -1)
        lab = targets["encoder_labels"]
        enc_ce = torch.stack([-logp[i, t, lab[i, t]] for i in range(lab.shape[0]) for t in range(lab.shape[1])
                              if lab[i, t] != IGNORE]).mean()
        cls = out.hidden_states[-1][:, :1]
        emb = model.backbone.bert.embeddings
        kv = torch.cat([cls, emb(input_ids=targets["input_ids"])[:, 1:]], 1)
        q = emb.position_embeddings(torch.arange(kv.shape[1]))[None] + cls
        dec_logits = model.backbone.cls(head.decoder(q, kv, targets["decoder_attention"].bool()))
        dlogp = torch.log_softmax(dec_logits.double(), -1)
        dlab = targets["decoder_labels"]
        dec_ce = torch.stack([-dlogp[i, t, dlab[i, t]] for i in range(dlab.shape[0]) for t in range(dlab.shape[1])
                              if dlab[i, t] != IGNORE]).mean()
    assert (dlab != IGNORE).sum() > (lab != IGNORE).sum() > 0           # every token is a decoder target
    ctx.batch = batch
    head.set_targets(targets)
    res = plain_step(model, ctx, method)
    assert res.loss == pytest.approx(float(enc_ce + dec_ce), rel=1e-5)
    assert method.scalars()["decoder_mlm"] == pytest.approx(float(dec_ce), rel=1e-5)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert any(n.startswith("head.decoder") and g.abs().sum() > 0 for n, g in grads.items())
    assert any("encoder.layer" in n and g.abs().sum() > 0 for n, g in grads.items())


def test_a_short_run_saves_the_encoder_without_the_decoder(world, tmp_path):
    from safetensors import safe_open

    from harness.train.logs import read_log

    RetroMAE().train(pt_spec(world), None, tmp_path / "run")
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    assert len(log) == 3 and all(r["method"]["encoder_mlm"] > 0 and r["method"]["decoder_mlm"] > 0 for r in log)
    with safe_open(str(tmp_path / "run" / "final" / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert names and not any("decoder." in n and "predictions" not in n for n in names)


def test_peg_declares_retromae_as_the_stage_its_fine_tuning_starts_from(world):
    corpora = [str(world[0] / "eval" / "latin_qa")]
    spec = PEG.spec("tiny", model=world[1], method_options={
        "pretrain": {"preset": "paper", "train": {"steps": 7}, "options": {"corpora": corpora}}})
    (stage,) = PEG().stages(spec)
    assert stage.method == "retromae" and stage.starts_from
    assert stage.spec.lr == 2e-5 and stage.spec.doc_max_length == 512 and stage.spec.steps == 7
    assert stage.spec.model == world[1] and stage.spec.method_options["corpora"] == corpora
    assert PEG().stages(PEG.spec("tiny", model=world[1])) == []
    with pytest.raises(ConfigError, match="pretrain must be a mapping"):
        PEG().stages(PEG.spec("tiny", model=world[1], method_options={"pretrain": {"corpora": corpora}}))
    assert isinstance(RetroMAE().representation_head(spec), RetroMAEHead)


@pytest.mark.slow
def test_both_reconstruction_losses_fall_in_a_short_run(world, tmp_path):
    """12 steps at lr 5e-3 on the tiny BERT: both token-mean cross-entropies fall from ln(vocab) ~ 10.3 (measured:
    10.3 -> 8.3 for each over 12 steps, 6.5 after 30; about 45 s on 2 loaded CPU cores)."""
    from harness.train.logs import read_log

    RetroMAE().train(pt_spec(world, steps=12, lr=0.005, batch_size=8), None, tmp_path / "run")
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    for part in ("encoder_mlm", "decoder_mlm"):
        values = [r["method"][part] for r in log]
        assert values[0] == pytest.approx(10.33, abs=0.2)
        assert np.mean(values[-3:]) < np.mean(values[:3]) - 1.0, (part, values)


# ---------------------------------------------------------------------- long texts (the released preprocessing)
def released_blocks(tokenizer, text: str, max_length: int) -> list[list[int]]:
    """The examples (input ids with special tokens) the released RetroMAE builds from one document: an
    independent reading of examples/pretrain/preprocess.py (sentences tokenized without special tokens, appended to
    a block that is closed before a sentence once it holds max_length - 2 tokens or more) and src/pretrain/data.py
    (each block cut at max_length - 2 tokens, then [CLS] ... [SEP]); sentences from the stand-in splitter."""
    from methods.coco_spans import split_sentences

    target = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    blocks, current = [], []
    for sentence in split_sentences(text):
        if len(current) >= target:
            blocks.append(current)
            current = []
        current.extend(tokenizer(sentence, add_special_tokens=False)["input_ids"])
    if current:
        blocks.append(current)
    return [[tokenizer.cls_token_id, *b[:target], tokenizer.sep_token_id] for b in blocks]     # BERT's one-text form


LONG = ("The river rises in the northern hills. It flows south through three towns! Farmers use its water "
        "for rice and wheat. Is the delta fertile? Yes, very much so. Floods came in the spring of that year. "
        "A new dam was built upstream. Fishermen complained about the catch. The mayor promised to study it. "
        "Nothing changed for a decade. Then the rains failed twice in a row.")


def test_blocks_pack_sentences_as_the_released_preprocessing():
    from methods.retromae import pack_blocks

    # closed before a sentence once it holds >= target tokens: overshoots stay, only the last block may be short
    assert pack_blocks([5, 5, 5, 5, 5], 10) == [[0, 1], [2, 3], [4]]
    assert pack_blocks([12, 3, 9, 1], 10) == [[0], [1, 2], [3]]
    assert pack_blocks([3, 3, 3], 10) == [[0, 1, 2]]
    assert pack_blocks([], 10) == []


@pytest.mark.parametrize("max_length", [16, 24, 512])
def test_a_long_document_becomes_the_released_examples(world, max_length):
    from transformers import AutoTokenizer

    from methods.retromae import document_blocks

    tok = AutoTokenizer.from_pretrained(world[1])
    blocks = document_blocks(LONG, tok, max_length)
    # what make_batch feeds the encoder for each block = the released collator's input ids, block by block
    ours = [tok(b, truncation=True, max_length=max_length)["input_ids"] for b in blocks]
    assert ours == released_blocks(tok, LONG, max_length)
    # the 79-token document: 5 blocks at 16 (14 per block), 3 at 24 (two run past 22 and are cut), 1 at 512
    sizes = [len(tok(b, add_special_tokens=False)["input_ids"]) for b in blocks]
    assert sizes == {16: [15, 14, 15, 20, 15], 24: [24, 27, 28], 512: [79]}[max_length]


def test_the_released_title_rule_and_the_sources(world, tmp_path):
    import json

    from transformers import AutoTokenizer

    from methods.retromae import released_text, text_sources

    assert released_text("Nile", "Text.") == "Nile Text." and released_text("Ok", "Text.") == "Text."
    docs = [{"_id": "long", "title": "Rivers", "text": LONG}, {"_id": "short", "title": "ab", "text": "One line."}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(world[1])
    blocks = text_sources([tmp_path], tok, long_texts="blocks", max_length=24).sources[0]
    ids = [r.query for r in blocks.rows]
    assert ids[0] == "long" and ids[1:-1] == [f"long#{k}" for k in range(1, len(ids) - 1)] and ids[-1] == "short"
    assert blocks.rows[0].pos[0].startswith("Rivers The river") and blocks.rows[-1].pos == ["One line."]
    # the blocks partition the document's tokens in order (what a block has past the length is cut in make_batch)
    long_ids = tok("Rivers " + LONG, add_special_tokens=False)["input_ids"]
    assert [t for r in blocks.rows[:-1] for t in tok(r.pos[0], add_special_tokens=False)["input_ids"]] == long_ids
    truncated = text_sources([tmp_path], long_texts="truncate").sources[0]
    assert [r.query for r in truncated.rows] == ["long", "short"] and truncated.rows[1].pos == ["ab One line."]
    assert truncated.fingerprint != blocks.fingerprint
    assert text_sources([tmp_path], tok, long_texts="blocks", max_length=32).sources[0].fingerprint != \
        blocks.fingerprint
    with pytest.raises(ConfigError, match="long_texts"):
        text_sources([tmp_path], tok, long_texts="split")


def test_the_stage_prepares_blocks_by_default(world):
    method = RetroMAE()
    spec = pt_spec(world)
    assert method.resolve_options(dict(spec.method_options))["long_texts"] == "blocks"
    data = method.prepare(spec, None, {}).data
    plain = method.prepare(pt_spec(world, method_options={**spec.method_options, "long_texts": "truncate"}),
                           None, {}).data
    # the synthetic texts run past 32 tokens: more examples than documents, each within the length
    assert sum(data.sizes) > sum(plain.sizes)
