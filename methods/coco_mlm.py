"""The optional MLM term of COCO pretraining (paper 001, METHODS.md 2.1; option ``mlm_weight``).

The released COCO code continues coCondenser's pretraining, whose loss adds a masked-language-model
term to the contrastive one.  Here the term is optional (``mlm_weight`` 0 = off, the default) and
needs a backbone saved *with* its MLM head (an ``AutoModelForMaskedLM`` checkpoint such as
``BertForMaskedLM``); a model without one is refused before training (loading it with
``AutoModelForMaskedLM`` would silently create a random head).  The Condenser head itself (a
late-layer skip into a small head) is BERT-specific and not here.

* :class:`MlmDenseHead` loads the backbone with its MLM head and pools the last hidden state as the
  dense head does, so the contrastive views are unchanged;
* :func:`mask_tokens`: BERT's rule, ``probability`` (0.15) of the non-special, non-padding tokens
  chosen, 80% replaced by the mask token, 10% by a random token, 10% kept; labels -100 elsewhere;
  drawn from a generator the caller seeds, or from one seed per row (``row_seeds``, with a fixed
  ``width``), so that a row's mask does not depend on the rows padded with it: COCO seeds each
  document of the *global* batch (run seed, micro-batch, position), so 2 processes draw the masks
  of 1 process with the global batch, and resumes repeat them;
* :func:`mlm_loss`: mean cross-entropy over the chosen positions; :func:`mlm_loss_sum`: its sum
  and count, for a mean over the masked tokens of every rank.

Under DDP (2 processes or more) the trainer searches unused parameters (``find_unused_parameters``) from the output of
each forward through the wrapper; the MLM head's parameters are reached only by the MLM forward,
which goes around the wrapper, so DDP would mark them ready at forward time and again in backward
(a RuntimeError).  :class:`MlmDenseHead` therefore links the prediction logits to the pooled
representation through an empty slice (``logits[..., :0].sum()``, exactly 0.0 with an empty
gradient): the values do not change, the parameters are in the graph.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.encoders.backbone import resolve_model
from harness.encoders.heads import DenseHead
from harness.errors import ConfigError
from harness.train.api import is_distributed

IGNORE = -100


class MlmDenseHead(DenseHead):
    """Dense pooling of a backbone loaded with its MLM head (``AutoModelForMaskedLM``)."""

    backbone_kind = "masked-lm"

    def forward(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = getattr(outputs, "hidden_states", None)
        if hidden is None:
            raise ConfigError("MLM dense head: the backbone returned no hidden states")
        emb = super().forward(type("Outputs", (), {"last_hidden_state": hidden[-1]})(), attention_mask)
        logits = getattr(outputs, "logits", None)
        if logits is not None and emb.requires_grad and is_distributed():
            # Exactly +0.0: puts the MLM head in this forward's graph for DDP (see the module docstring).
            emb = emb + logits[..., :0].sum().to(emb.dtype)
        return emb

    def prepare_backbone(self, backbone: nn.Module) -> None:
        config: Any = backbone.config
        config.output_hidden_states = True

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backbone": "masked-lm"}


def check_mlm_backbone(name: str, method: str = "coco") -> None:
    """Refuse a model folder whose saved architecture has no masked-LM head (e.g. ``BertModel``)."""
    path, _ = resolve_model(name)
    config = Path(path) / "config.json"
    if not config.is_file():
        return                      # a hub id: transformers refuses architectures without an MLM head itself
    architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    if architectures and not any("MaskedLM" in a or a.endswith("ForPreTraining") for a in architectures):
        raise ConfigError(f"method {method}: mlm_weight > 0 needs a backbone with a masked-LM head, but model "
                          f"{name!r} is a {', '.join(architectures)} without one; set mlm_weight: 0 or use an "
                          "AutoModelForMaskedLM checkpoint (e.g. BertForMaskedLM)")


def _draws(shape: torch.Size, vocab: int, generator: torch.Generator | None, row_seeds: Sequence[int] | None,
           width: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(choice uniforms, 80/10/10 uniforms, random ids) of ``shape``: from ``generator``, or row by row."""
    if row_seeds is None:
        return (torch.rand(shape, generator=generator), torch.rand(shape, generator=generator),
                torch.randint(vocab, shape, generator=generator))
    rows, length = shape
    width = length if width is None else width
    if len(row_seeds) != rows or width < length:
        raise ValueError(f"mask_tokens: {len(row_seeds)} row seeds and width {width} for input ids of shape "
                         f"{tuple(shape)} (one seed per row, width >= the padded length)")
    parts: list[list[torch.Tensor]] = [[], [], []]
    for seed in row_seeds:
        gen = torch.Generator().manual_seed(int(seed))
        parts[0].append(torch.rand(width, generator=gen))
        parts[1].append(torch.rand(width, generator=gen))
        parts[2].append(torch.randint(vocab, (width,), generator=gen))
    choice, kind, ids = (torch.stack(p)[:, :length] if rows else torch.zeros(shape) for p in parts)
    return choice, kind, ids.long()


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer: Any, probability: float = 0.15,
                generator: torch.Generator | None = None, *, row_seeds: Sequence[int] | None = None,
                width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(masked input ids, labels)`` by BERT's 80/10/10 rule over the maskable tokens (see module docstring).

    With ``row_seeds`` (one per row) each row draws ``width`` (>= the padded length) values from its
    own seed and uses the first ones, so its mask is the same whatever rows it is padded with."""
    if not 0 < probability < 1:
        raise ConfigError(f"COCO mlm_probability must lie in (0, 1), got {probability}")
    if tokenizer.mask_token_id is None:
        raise ConfigError("the tokenizer has no mask token; the MLM term needs one")
    special = torch.tensor([tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True)
                            for ids in input_ids.tolist()], dtype=torch.bool).reshape(input_ids.shape)
    maskable = attention_mask.bool() & ~special
    choice, draw, random_ids = _draws(input_ids.shape, len(tokenizer), generator, row_seeds, width)
    chosen = (choice < probability) & maskable
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    masked = input_ids.clone()
    masked[chosen & (draw < 0.8)] = tokenizer.mask_token_id
    swap = chosen & (draw >= 0.8) & (draw < 0.9)
    masked[swap] = random_ids[swap]
    return masked, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` (B, L, V) at the positions whose label is not -100 (0 if none)."""
    if not bool((labels != IGNORE).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)


def mlm_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(summed cross-entropy, number of positions) over the labels that are not -100; a mean over several
    ranks divides the sum of the sums by the sum of the counts."""
    count = int((labels != IGNORE).sum())
    if count == 0:
        return logits.sum() * 0.0, 0
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE,
                            reduction="sum")
    return total, count
