"""Representation heads: backbone outputs -> one representation per text.

The engine place both inference (:mod:`harness.encoders.sparse`) and training
(:mod:`harness.train.model`) use.

A method picks its head with ``Method.representation_head(spec)`` (None: the dense
head the spec describes).  A head also says which transformers class the backbone
is loaded with (``backbone_kind``), because a sparse head needs vocabulary logits:

* :class:`DenseHead`: ``cls`` / ``mean`` / ``last`` pooling of the last hidden
  states, optionally L2-normalised (the trainer's default, METHODS.md 0.2);
* :class:`SparseHead`: SPLADE term weights (METHODS.md 4.1)
  ``w_j = max_i log(1 + relu(logit_ij))`` over the non-padding tokens (special tokens
  included), from an MLM head (``backbone_kind="masked-lm"``) or a decoder's LM head
  (``"causal-lm"``, Echo-Mistral-SPLADE); ``aggregation="sum"`` is the sum variant;
* :class:`MarkedSparseHead`: the same weights pooled only over the positions a *marked*
  attention mask flags :data:`POOLED` (echo templates pool the second occurrence of the
  text, :mod:`harness.encoders.echo_inputs`); the backbone sees the mask binarised.

A head may also shape how its backbone is loaded: ``load_kwargs()`` (extra
``from_pretrained`` arguments, e.g. a quantisation config) and ``prepare_backbone(model)``
(called once on the loaded model, before any LoRA wrapping: freeze layers, install hooks).

Heads hold no parameters of their own (the MLM/LM head is part of the backbone), so
saved model folders and checkpoints are the backbone's alone.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.encoders.backbone import load_backbone, resolve_model
from harness.encoders.pooling import pool
from harness.errors import ConfigError

# Which ``transformers`` auto class loads the backbone a head reads from.
BACKBONE_CLASSES = {"base": "AutoModel", "masked-lm": "AutoModelForMaskedLM", "causal-lm": "AutoModelForCausalLM"}
AGGREGATIONS = ("max", "sum")
# A marked attention mask: 0 padding, 1 attended, POOLED attended and pooled (MarkedSparseHead).
POOLED = 2


class Head(nn.Module):
    """Turns a backbone's forward outputs (and the attention mask) into a (B, D) representation."""

    backbone_kind: str = "base"          # a key of BACKBONE_CLASSES

    def forward(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:   # pragma: no cover
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What ``training.json`` records about the head."""
        return {"type": type(self).__name__}

    def saved_pooling(self) -> str | None:
        """The ``pooling`` a saved model folder records for this head (None: the spec's dense pooling)."""
        return None

    def load_kwargs(self) -> dict[str, Any]:
        """Extra ``from_pretrained`` arguments for the backbone (none by default)."""
        return {}

    def prepare_backbone(self, backbone: nn.Module) -> None:
        """Adjust the freshly loaded backbone (before LoRA wrapping); nothing by default."""


class DenseHead(Head):
    """Pooled last hidden states (``cls``/``mean``/``last``), L2-normalised if ``normalize``."""

    def __init__(self, pooling: str, normalize: bool):
        super().__init__()
        self.pooling, self.normalize = pooling, normalize

    def forward(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        emb = pool(outputs.last_hidden_state, attention_mask, self.pooling)
        if self.normalize:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        return emb

    def describe(self) -> dict[str, Any]:
        return {"type": "dense", "pooling": self.pooling, "normalize": self.normalize}


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor, aggregation: str = "max") -> torch.Tensor:
    """(B, L, V) vocabulary logits -> (B, V) SPLADE weights over the unmasked tokens.

    The activations are >= 0, so zeroing the padding positions before the sum excludes
    them exactly (naver/splade multiplies by the mask the same way).  For the max,
    log(1 + relu(.)) is non-decreasing, so it is applied after a max over the unmasked
    logits: the same values without a (B, L, V) activation tensor (the largest tensor of
    a SPLADE forward), and the same gradients except at exact ties: ``amax`` splits a
    term's gradient evenly between the positions tied at its largest logit, naver's
    ``torch.max(dim=1)`` gives all of it to one of them (equal sums).
    """
    if aggregation not in AGGREGATIONS:
        raise ConfigError(f"unknown SPLADE aggregation {aggregation!r}; choose one of {', '.join(AGGREGATIONS)}")
    if aggregation == "max":
        padded = (attention_mask == 0).unsqueeze(-1)
        return torch.log1p(torch.relu(logits.masked_fill(padded, float("-inf")).amax(dim=1)))
    return (torch.log1p(torch.relu(logits)) * attention_mask.unsqueeze(-1).to(logits.dtype)).sum(dim=1)


class SparseHead(Head):
    """SPLADE term weights from the backbone's MLM head (or a decoder's LM head with ``lm="causal"``)."""

    def __init__(self, aggregation: str = "max", lm: str = "masked"):
        super().__init__()
        if lm not in ("masked", "causal"):
            raise ConfigError(f"sparse head: lm must be 'masked' or 'causal', got {lm!r}")
        splade_pool(torch.zeros(1, 1, 1), torch.ones(1, 1), aggregation)    # validates the aggregation
        self.aggregation, self.lm = aggregation, lm
        self.backbone_kind = f"{lm}-lm"

    def forward(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        logits = getattr(outputs, "logits", None)
        if logits is None:
            raise ConfigError("sparse head: the backbone returned no vocabulary logits (load it with an LM head)")
        return splade_pool(logits, attention_mask, self.aggregation)

    def describe(self) -> dict[str, Any]:
        return {"type": "sparse", "aggregation": self.aggregation, "lm": self.lm}

    def saved_pooling(self) -> str | None:
        # max/sum in harness_encoder.json mark the folder as a term-weight model for evaluation.
        return self.aggregation


class MarkedSparseHead(SparseHead):
    """SPLADE term weights pooled over the positions marked :data:`POOLED` in the attention mask.

    The backbone gets the mask binarised (a forward pre-hook installed by :meth:`prepare_backbone`)
    and, when it supports ``logits_to_keep``, computes vocabulary logits only from the first pooled
    column of the batch on (the echo's first occurrence needs none); the head aligns the mask with
    the logits it receives.
    """

    def __init__(self, aggregation: str = "max", lm: str = "causal"):
        super().__init__(aggregation, lm)

    def forward(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        logits = getattr(outputs, "logits", None)
        if logits is None:
            raise ConfigError("sparse head: the backbone returned no vocabulary logits (load it with an LM head)")
        pooled = (attention_mask == POOLED)[:, attention_mask.shape[1] - logits.shape[1]:]
        return splade_pool(logits, pooled.to(attention_mask.dtype), self.aggregation)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "mask": "marked"}

    def prepare_backbone(self, backbone: nn.Module) -> None:
        install_marked_mask_hook(backbone)


def install_marked_mask_hook(backbone: nn.Module) -> None:
    """Let ``backbone`` take a marked attention mask: binarise it and keep only the logits from the first
    pooled column on (``logits_to_keep``, when the model's forward has it and the caller gave none)."""
    import inspect

    try:
        keeps = "logits_to_keep" in inspect.signature(backbone.forward).parameters
    except (TypeError, ValueError):
        keeps = False

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        mask = kwargs.get("attention_mask")
        if mask is None or mask.ndim != 2:
            return args, kwargs
        columns = (mask == POOLED).any(dim=0).nonzero()
        if not len(columns):            # an ordinary mask: the call goes through untouched
            return args, kwargs
        kwargs["attention_mask"] = (mask > 0).to(mask.dtype)
        if keeps and "logits_to_keep" not in kwargs:
            kwargs["logits_to_keep"] = mask.shape[1] - int(columns[0])
        return args, kwargs

    backbone.register_forward_pre_hook(hook, with_kwargs=True)


def load_backbone_for(name: str, head: Head):
    """``(model, tokenizer, defaults)`` with the auto class ``head`` needs (``AutoModel`` for dense heads)."""
    import transformers  # lazy: importing transformers costs seconds; only loading a backbone needs it

    if head.backbone_kind == "base":
        return load_backbone(name)
    if head.backbone_kind not in BACKBONE_CLASSES:
        raise ConfigError(f"head {type(head).__name__}: unknown backbone kind {head.backbone_kind!r}")
    path, defaults = resolve_model(name)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model = getattr(transformers, BACKBONE_CLASSES[head.backbone_kind]).from_pretrained(path, **head.load_kwargs())
    head.prepare_backbone(model)
    return model, tokenizer, defaults
