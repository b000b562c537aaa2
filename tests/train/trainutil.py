"""Helpers shared by the trainer tests: a tiny random BERT and tiny training data."""
from __future__ import annotations

import os
import random
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
         "upsilon phi chi psi omega river mountain forest ocean desert valley island canyon glacier meadow").split()


def make_tiny_bert(directory: Path, dropout: float = 0.1, hidden: int = 32, layers: int = 2, seed: int = 0,
                   mlm: bool = False) -> Path:
    """Save a random BERT (``hidden`` wide, ``layers`` deep; with its MLM head if ``mlm``) with the real
    MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

    from harness.encoders.backbone import resolve_model

    path, _ = resolve_model("minilm")
    tokenizer = AutoTokenizer.from_pretrained(path)
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=256,
                     hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(seed)
    (BertForMaskedLM if mlm else BertModel)(cfg).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_data(n_sources: int = 3, rows: int = 12, negs: int = 2, seed: int = 0, prompts: bool = True):
    """In-memory training data: ``n_sources`` sources of ``rows`` rows with ``negs`` negatives each."""
    from harness.data.collections import TrainingData, TrainingSource
    from harness.data.training import TrainingRow

    rng = random.Random(seed)
    sources = []
    for s in range(n_sources):
        rows_ = [TrainingRow(_sentence(rng, 5), [_sentence(rng, 12)], [_sentence(rng, 12) for _ in range(negs)])
                 for _ in range(rows)]
        sources.append(TrainingSource(name=f"src{s}", rows=rows_, language="en", task="retrieval",
                                      symmetric=(s == n_sources - 1),
                                      prompt=f"Find passages for task {s}" if prompts else "",
                                      fingerprint=f"synthetic-{seed}-{s}"))
    return TrainingData(sources)


def load_tiny(model_dir: str, head=None, **spec_overrides):
    """``(spec, model, tokenizer, enc)`` for a tiny model directory (fp32, CPU), with a representation ``head``."""
    from harness.train.model import build_model
    from harness.train.spec import TrainSpec

    kw = dict(model=model_dir, pooling="mean", batch_size=8, steps=1, warmup_steps=0, n_hard_negatives=1,
              temperature=0.05, query_max_length=32, doc_max_length=64, precision="fp32",
              gradient_checkpointing=False, progress=False)
    kw.update(spec_overrides)
    spec = TrainSpec(**kw)
    model, tokenizer, enc = build_model(spec, head=head)
    return spec, model, tokenizer, enc


def step_context(spec, data, model, tokenizer, enc, examples, micro_index: int = 0, rank: int = 0, world: int = 1):
    """A TrainContext holding the tokenized micro-batch of ``examples`` (a global batch)."""
    import torch

    from harness.train.batching import build_batch, tokenize_batch
    from harness.train.context import TrainContext

    batch = build_batch(examples, data, spec, micro_index, rank, world)
    tokenize_batch(batch, tokenizer, spec, enc["append_eos"])
    ctx = TrainContext(spec=spec, data=data, model=model, tokenizer=tokenizer, device=torch.device("cpu"),
                       rank=rank, world_size=world)
    ctx.batch = batch
    return ctx


def plain_step(model, ctx, method, gradcache_chunk=None, forward_chunk=None):
    """One micro-batch with plain backward and no DDP."""
    import contextlib

    from harness.train.step import run_micro_batch

    return run_micro_batch(model, ctx, method, backward=lambda loss: loss.backward(),
                           sync=lambda last: contextlib.nullcontext(), step_weights=lambda: None,
                           gradcache_chunk=gradcache_chunk, forward_chunk=forward_chunk)


def grads(model) -> dict:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


# ---------------------------------------------------------------------- iDRO with ANCE episodes
class Killed(Exception):
    """A simulated kill (raised where a real run would be interrupted)."""


def idro_spec(model, keep_checkpoints: int = 5, **options):
    """A 7-step tiny iDRO run with ANCE episodes at steps 0, 3 and 6 (``options`` override the method's)."""
    from methods.idro import IDRO

    opts = {"k": 3, "niter": 10, "nredo": 1, "blocks": 1, "ance_refresh_steps": 3, "ance_depth": 8, "ance_keep": 3,
            **options}
    return IDRO.spec("tiny", model=model, batch_size=8, steps=7, warmup_steps=1, lr=1e-3, query_max_length=16,
                     doc_max_length=32, save_every=2, keep_checkpoints=keep_checkpoints, method_options=opts)


def train_killed_while_reencoding(monkeypatch, spec, data, workdir) -> None:
    """Start an iDRO run in ``workdir`` and kill it while it re-encodes the training corpus at the third episode."""
    import pytest

    from harness.train import negatives as N
    from methods.idro import IDRO

    real = N.encode_texts

    def dying_encode(ctx, texts, *args, **kwargs):
        if ctx.step == 6 and len(texts) > 40:                                  # the corpus, at the third episode
            raise Killed("killed while re-encoding the training corpus")
        return real(ctx, texts, *args, **kwargs)

    monkeypatch.setattr(N, "encode_texts", dying_encode)
    with pytest.raises(Killed):
        IDRO().train(spec, data, workdir)
    monkeypatch.setattr(N, "encode_texts", real)
