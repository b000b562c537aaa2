"""COCO's optional MLM term (option ``mlm_weight``): BERT masking, the loss equals the contrastive mean plus
the weight times a hand-computed MLM cross-entropy on the same fixed masks, refusal without an MLM head."""
from __future__ import annotations

import pytest
import torch
from trainutil import make_tiny_bert

from harness.errors import ConfigError
from methods.coco import Coco, CocoBatch, coco_losses
from methods.coco_mlm import IGNORE, MlmDenseHead, mask_tokens, mlm_loss, mlm_loss_sum

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLES = [(0, 3), (1, 7), (0, 11), (1, 2), (0, 40), (1, 5)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from harness.ablation.resolve import synthetic_world

    root = tmp_path_factory.mktemp("models")
    return (synthetic_world("default"), str(make_tiny_bert(root / "mlm", dropout=0.0, mlm=True)),
            str(make_tiny_bert(root / "plain", dropout=0.0)))


def mlm_spec(world, model, **options):
    corpora = [str(world[0] / "eval" / n) for n in ("latin_qa", "cyrillic_news")]
    return Coco.spec("tiny", model=model, batch_size=6, steps=3, warmup_steps=0, progress=False,
                     method_options={"corpora": corpora, "span_tokens": 12, "span_max_length": 32,
                                     "mlm_weight": 0.5, **options})


def test_bert_masking_rule_is_seeded_and_spares_special_and_padding_tokens(world):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world[1])
    feats = tok(["alpha beta gamma delta " * 30, "short one"], padding=True, truncation=True, max_length=128,
                return_tensors="pt")
    ids, mask = feats["input_ids"], feats["attention_mask"]
    masked, labels = mask_tokens(ids, mask, tok, 0.15, torch.Generator().manual_seed(0))
    again = mask_tokens(ids, mask, tok, 0.15, torch.Generator().manual_seed(0))
    assert torch.equal(masked, again[0]) and torch.equal(labels, again[1])
    chosen = labels != IGNORE
    assert not chosen[mask == 0].any()                                          # no padding position
    assert not chosen[:, 0].any() and not chosen[ids == tok.sep_token_id].any()  # no [CLS] / [SEP]
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(masked[~chosen], ids[~chosen])
    share = chosen[0].sum().item() / (mask[0].sum().item() - 2)
    assert 0.07 < share < 0.25
    replaced = (masked[chosen] == tok.mask_token_id).float().mean().item()
    assert 0.6 < replaced < 0.95                                                # ~80% become [MASK]
    with pytest.raises(ConfigError, match=r"mlm_probability must lie in \(0, 1\)"):
        mask_tokens(ids, mask, tok, 1.5)


def test_row_seeded_masks_do_not_depend_on_the_rows_padded_together(world):
    """COCO seeds each document of the global batch: a row's mask must be the same alone (as on one rank of
    two) as padded with longer rows (one process with the global batch)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world[1])
    texts = ["alpha beta gamma delta epsilon zeta eta theta", "one two three four five six seven eight nine ten "
             "eleven twelve thirteen fourteen fifteen sixteen"]
    both = tok(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    alone = tok(texts[:1], padding=True, truncation=True, max_length=32, return_tensors="pt")
    assert alone["input_ids"].shape[1] < both["input_ids"].shape[1]
    m_both, l_both = mask_tokens(both["input_ids"], both["attention_mask"], tok, 0.4, row_seeds=[11, 12], width=32)
    m_one, l_one = mask_tokens(alone["input_ids"], alone["attention_mask"], tok, 0.4, row_seeds=[11], width=32)
    n = alone["input_ids"].shape[1]
    assert torch.equal(m_one[0], m_both[0, :n]) and torch.equal(l_one[0], l_both[0, :n])
    assert (l_both[0] != IGNORE).sum() > 0 and (l_both[1] != IGNORE).sum() > 0
    other, _ = mask_tokens(alone["input_ids"], alone["attention_mask"], tok, 0.4, row_seeds=[99], width=32)
    assert not torch.equal(other, m_one)                                        # the seed matters
    with pytest.raises(ValueError, match="one seed per row"):
        mask_tokens(both["input_ids"], both["attention_mask"], tok, 0.4, row_seeds=[11], width=32)


def test_mlm_loss_sum_over_two_halves_gives_the_mean_of_the_whole(world):
    """The global MLM mean of two ranks is (sum_0 + sum_1) / (count_0 + count_1), not the mean of the means."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, 50, generator=gen)
    labels = torch.full((4, 6), IGNORE)
    labels[0, 1], labels[0, 3], labels[0, 4], labels[2, 2] = 7, 8, 9, 10      # 3 masked tokens in half 0, 1 in 1
    whole = mlm_loss(logits, labels)
    (s0, c0), (s1, c1) = mlm_loss_sum(logits[:2], labels[:2]), mlm_loss_sum(logits[2:], labels[2:])
    assert (c0, c1) == (3, 1)
    assert float((s0 + s1) / (c0 + c1)) == pytest.approx(float(whole), rel=1e-6)
    assert float((s0 / c0 + s1 / c1) / 2) != pytest.approx(float(whole), rel=1e-3)
    empty, n = mlm_loss_sum(logits[1:2], labels[1:2])
    assert n == 0 and float(empty) == 0.0


def test_loss_is_the_contrastive_mean_plus_the_weighted_hand_computed_mlm_ce(world):
    from trainutil import plain_step
    from transformers import AutoModel

    from harness.train.context import TrainContext
    from harness.train.model import build_model

    method = Coco()
    spec = mlm_spec(world, world[1])
    head = method.representation_head(spec)
    assert isinstance(head, MlmDenseHead)
    model, tok, enc = build_model(spec, head=head)
    model.train()
    data = method.span_data(spec)
    ctx = TrainContext(spec=spec, data=data, model=model, tokenizer=tok, device=torch.device("cpu"),
                       options=method.resolve_options(dict(spec.method_options)), encoding=enc)
    method.configure(ctx)
    batch = method.make_batch(EXAMPLES, ctx, 0)
    assert isinstance(batch, CocoBatch) and batch.mlm is not None
    assert torch.equal(method.make_batch(EXAMPLES, ctx, 0).mlm["labels"], batch.mlm["labels"])   # fixed masks
    assert not torch.equal(method.make_batch(EXAMPLES, ctx, 1).mlm["labels"], batch.mlm["labels"])
    # The contrastive views are those of the plain backbone: the MLM head only adds logits.
    plain = AutoModel.from_pretrained(world[1])
    with torch.no_grad():
        reps = model(**batch.views["span_a"])
        expected = plain(**batch.views["span_a"]).last_hidden_state[:, 0]
    assert torch.allclose(reps, expected, atol=1e-5)
    with torch.no_grad():
        a, b = (model(**batch.views[v]) for v in ("span_a", "span_b"))
        contrastive = coco_losses(a, b).mean()
        logits = model.backbone(input_ids=batch.mlm["input_ids"], attention_mask=batch.mlm["attention_mask"]).logits
        labels = batch.mlm["labels"]
        logp = torch.log_softmax(logits.double(), dim=-1)
        picked = [-logp[i, t, labels[i, t]] for i in range(labels.shape[0]) for t in range(labels.shape[1])
                  if labels[i, t] != IGNORE]
        hand = torch.stack(picked).mean()
    assert len(picked) > 3
    ctx.batch = batch
    res = plain_step(model, ctx, method)
    assert res.loss == pytest.approx(float(contrastive + 0.5 * hand), rel=1e-5)
    assert method.scalars()["mlm_loss"] == pytest.approx(float(hand), rel=1e-5)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters()
               if "cls.predictions" in n)                                       # the MLM head is trained too


def test_a_short_run_logs_the_mlm_term_and_saves_a_loadable_encoder(world, tmp_path):
    from transformers import AutoModel

    from harness.train.logs import read_log

    Coco().train(mlm_spec(world, world[1]), None, tmp_path / "run")
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    assert len(log) == 3 and all(r["method"]["mlm_loss"] > 0 for r in log)
    assert AutoModel.from_pretrained(str(tmp_path / "run" / "final")).config.hidden_size == 32


def test_mlm_needs_a_backbone_with_an_mlm_head(world, tmp_path):
    spec = mlm_spec(world, world[2])
    with pytest.raises(ConfigError, match="mlm_weight > 0 needs a backbone with a masked-LM head.*BertModel"):
        Coco().train(spec, None, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert Coco().representation_head(mlm_spec(world, world[2], mlm_weight=0)) is None    # off by default
    with pytest.raises(ConfigError, match="mlm_weight must be >= 0"):
        Coco().representation_head(mlm_spec(world, world[1], mlm_weight=-1))
