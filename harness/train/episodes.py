"""Services for episodes: work between training stretches with the current model.

An episode (``Method.run_episode(ctx, directory)``, scheduled by
``Method.episode_steps``) re-encodes a corpus with the current checkpoint,
re-mines negatives (ANCE, METHODS.md 2.2 and 5), or re-clusters queries (iDRO).  The
trainer writes a checkpoint just before each episode and runs it under a forked RNG
seeded by the run seed and the step, so a run killed during an episode resumes from
that checkpoint, redoes the episode and continues exactly as an uninterrupted run
would.  What an episode produces that later steps use belongs in the method's
``state_dict``; files it writes go into its ``directory``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from harness.encoders.backbone import tokenize
from harness.train.encoding import encode_chunks

if TYPE_CHECKING:
    from harness.train.context import TrainContext


@torch.no_grad()
def encode_texts(ctx: TrainContext, texts: Sequence[str], max_length: int, batch_size: int = 64,
                 prompt: str = "") -> torch.Tensor:
    """Representations (CPU, fp32) of ``texts`` from the model being trained, in eval mode (no dropout).

    The train/eval mode of every submodule is restored afterwards (one flag for the whole model
    would not do: a backbone may sit in eval mode inside a wrapper in train mode); no gradient
    is recorded.
    """
    model = ctx.model
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        out = []
        append_eos = bool(ctx.encoding.get("append_eos", False))
        for i in range(0, len(texts), batch_size):
            feats = dict(tokenize(ctx.tokenizer, list(texts[i:i + batch_size]), max_length, prompt=prompt,
                                  append_eos=append_eos))
            emb, _ = encode_chunks(model, feats, None, ctx.device, grad=False, autocast=ctx.autocast)
            out.append(emb.float().cpu())
        hidden = 0 if not out else out[0].shape[1]
        return torch.cat(out) if out else torch.zeros(0, hidden)
    finally:
        for module, training in modes:
            module.training = training
