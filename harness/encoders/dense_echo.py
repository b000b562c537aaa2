"""Dense echo embeddings: a decoder reads each text twice and its hidden states are pooled over the second
occurrence only (Springer et al. 2024, "Repetition Improves Language Model Embeddings", arXiv 2402.15449).

A causal decoder's token states only see the tokens before them; in ``Document:{text}\\nDocument again:{text}``
every token of the second occurrence has seen the whole text once, so pooling *those* states gives an
embedding of the whole text.  :class:`EchoDenseEncoder` fills each text into the query or document template
of :mod:`harness.encoders.echo_inputs` (the echo-embeddings template syntax: pieces tokenised separately
without added special tokens, each braced piece cut to the max length separately, right padding), runs the
backbone (``AutoModel``: last hidden states, after the final norm) and pools over the pooled positions:

* ``mean``: the mean of the hidden states at the pooled positions (echo-embeddings' ``EchoPooling('mean')``);
* ``last``: the hidden state at the last pooled position (``EchoPooling('last')``).

Which positions are pooled: the braced pieces without ``!`` that hold ``%%text%%`` (the second occurrence),
plus, with ``include_eos`` (the default here), the other pooled braced pieces, i.e. the template's final
``{</s>}``.  With ``include_eos`` the mask is exactly echo-embeddings' ``embed_mask`` (jakespringer/
echo-embeddings, ``echo_embeddings.py``: ``EchoParser`` marks every braced piece without ``!``), so ``last``
reads the EOS state; without it only the text's tokens are pooled.  A row with no pooled position (an empty
text, no EOS) gets the zero vector under ``mean`` and the first state under ``last``, as the reference does.

Released checkpoints (``jspringer/echo-mistral-7b-instruct-lasttoken`` / ``-meantoken``) are registered as
known models with ``echo: true`` (``suites/models/known_models.yaml``); :func:`harness.pipeline.build_encoder`
builds this encoder for them and for the ``*-echo-dense`` aliases (:func:`load_echo_dense_encoder`).  Paper 003
(Mistral-SPLADE) compares its sparse model with these dense echo models in its Table 2.
"""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.encoders.backbone import model_fingerprint, resolve_model
from harness.encoders.base import Encoder
from harness.encoders.echo_inputs import (
    PROMPT,
    default_templates,
    echo_token_rows,
    pad_echo_rows,
    pad_id_of,
    parse_template,
)
from harness.encoders.hf import resolve_device, resolve_dtype
from harness.encoders.model_check import check_model, load_errors
from harness.errors import ConfigError
from harness.progress import bar_disabled

ECHO_POOLING = ("mean", "last")
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def echo_pool(hidden: torch.Tensor, pooling_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Pool ``hidden`` (B, L, H) over the positions where ``pooling_mask`` (B, L) is non-zero: their ``mean``,
    or the state at the ``last`` of them (the zero vector / position 0 for a row without one)."""
    mask = (pooling_mask > 0)
    if mode == "mean":
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
    if mode == "last":
        positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
        last = torch.where(mask, positions, torch.zeros_like(positions)).amax(dim=1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    raise ConfigError(f"unknown echo pooling {mode!r}; choose one of {', '.join(ECHO_POOLING)}")


def is_dense_echo_model(name: str) -> bool:
    """A model read as dense echo embeddings: a known checkpoint or alias whose defaults say ``echo`` and dense."""
    try:
        _, defaults = resolve_model(name)
    except ConfigError:
        return False
    return defaults.representation == "dense" and defaults.echo is True


class EchoDenseEncoder(Encoder):
    """Dense embeddings of a decoder over echo (or plain) templates, pooled on the marked positions (see the
    module docstring).

    Settings: explicit arguments win over the model's defaults (a known checkpoint's or an alias's:
    pooling, normalisation, max length, prompts).  ``echo`` False reads the text once (the plain templates),
    ``include_eos`` (default True: echo-embeddings' ``embed_mask``) pools the template's EOS piece too,
    ``query_template`` / ``doc_template`` take the echo-embeddings syntax.  ``query_prompt`` fills the
    ``%%prompt%%`` of the instructed query template (the per-task instruction of the released models);
    without one the query template has no instruction.  Max lengths bound each braced piece separately, as in
    the reference parser.  The templates, ``include_eos`` and pooling are part of :meth:`identity` (the cache key).
    """

    kind = "dense"

    def __init__(self, model: str, *, pooling: str | None = None, normalize: bool | None = None,
                 echo: bool | None = None, include_eos: bool | None = None, query_template: str | None = None,
                 doc_template: str | None = None, query_prompt: str | None = None, doc_prompt: str | None = None,
                 query_max_length: int | None = None, doc_max_length: int | None = None, batch_size: int = 16,
                 device: str | None = None, dtype: str | torch.dtype = "auto", shard_size: int | None = None):
        self.model_name = model
        check_model(model)
        self.path, defaults = resolve_model(model)
        self.pooling = pooling if pooling is not None else defaults.pooling
        if self.pooling not in ECHO_POOLING:
            raise ConfigError(f"echo dense pooling must be one of {', '.join(ECHO_POOLING)} (over the pooled "
                              f"positions), got {self.pooling!r}")
        self.normalize = bool(defaults.normalize if normalize is None else normalize)
        self.similarity = "cos" if self.normalize else "dot"
        self.echo = bool(True if echo is None else echo)
        self.include_eos = bool(True if include_eos is None else include_eos)
        self.query_prompt = query_prompt if query_prompt is not None else defaults.query_prompt
        self.doc_prompt = doc_prompt if doc_prompt is not None else defaults.doc_prompt
        templates = default_templates(self.echo)
        self.query_template = query_template or templates["query_instructed" if self.query_prompt else "query"]
        self.doc_template = doc_template or templates["document"]
        for side, prompt, template in (("query", self.query_prompt, self.query_template),
                                       ("doc", self.doc_prompt, self.doc_template)):
            parse_template(template)
            if prompt and PROMPT not in template:
                raise ConfigError(f"{side}_prompt {prompt!r} given, but the {side} template {template!r} has no "
                                  f"{PROMPT} piece to put it in")
        lengths = {"query_max_length": query_max_length if query_max_length is not None
                   else defaults.query_max_length or defaults.max_length,
                   "doc_max_length": doc_max_length if doc_max_length is not None
                   else defaults.doc_max_length or defaults.max_length,
                   "batch_size": batch_size}
        if shard_size is not None:
            lengths["shard_size"] = shard_size
        for name, value in lengths.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        self.query_max_length = int(lengths["query_max_length"])
        self.doc_max_length = int(lengths["doc_max_length"])
        self.batch_size = batch_size
        self.shard_size = shard_size
        self.devices = None
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self._model: torch.nn.Module | None = None
        self._tokenizer: Any = None
        self._fingerprint: str | None = None

    # ----------------------------------------------------------------- identity
    def identity(self) -> dict[str, Any]:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.path)
        return {"encoder": "hf-echo-dense", "model": self._fingerprint, "pooling": self.pooling,
                "normalize": self.normalize, "echo": self.echo, "include_eos": self.include_eos,
                "query_template": self.query_template, "doc_template": self.doc_template,
                "query_prompt": self.query_prompt, "doc_prompt": self.doc_prompt,
                "query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length,
                "dtype": _DTYPE_NAMES[self.dtype]}

    def for_device(self, device: str) -> EchoDenseEncoder:
        """This encoder on ``device``, not loaded yet (same identity)."""
        clone = copy.copy(self)
        clone.device, clone._model, clone._tokenizer = torch.device(device), None, None
        return clone

    # ------------------------------------------------------------------ loading
    def _load(self):
        if self._model is not None:
            return self._model, self._tokenizer
        from transformers import AutoModel, AutoTokenizer

        with load_errors(self.path):
            tokenizer = AutoTokenizer.from_pretrained(self.path)
            model = AutoModel.from_pretrained(self.path, dtype=self.dtype)
        if getattr(model.config, "is_encoder_decoder", False):
            raise ConfigError(f"echo embeddings read a decoder's hidden states; {self.model_name!r} is an "
                              "encoder-decoder model")
        model.to(self.device).eval()
        self._model, self._tokenizer = model, tokenizer
        return model, tokenizer

    @property
    def dim(self) -> int:
        model, _ = self._load()
        return int(model.config.hidden_size)

    # ----------------------------------------------------------------- encoding
    def inputs(self, texts: Sequence[str], side: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask, pooling_mask)`` of ``texts`` on ``side`` (query or doc), unsorted."""
        _, tokenizer = self._load()
        template, prompt, max_length = self._side(side)
        rows = echo_token_rows(tokenizer, list(texts), template, max_length, self.include_eos, prompt)
        return pad_echo_rows(rows, pad_id_of(tokenizer))

    def _side(self, side: str) -> tuple[str, str, int]:
        if side == "query":
            return self.query_template, self.query_prompt, self.query_max_length
        if side == "doc":
            return self.doc_template, self.doc_prompt, self.doc_max_length
        raise ConfigError(f"unknown side {side!r}; query or doc")

    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,
                       progress: bool = True) -> np.ndarray:
        return self._encode(texts, "query", batch_size, progress)

    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,
                    progress: bool = True) -> np.ndarray:
        return self._encode(texts, "doc", batch_size, progress)

    def _encode(self, texts: Sequence[str], side: str, batch_size: int | None, progress: bool) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        model, tokenizer = self._load()
        out = np.empty((len(texts), int(model.config.hidden_size)), dtype=np.float32)
        if len(texts) == 0:
            return out
        template, prompt, max_length = self._side(side)
        rows = echo_token_rows(tokenizer, list(texts), template, max_length, self.include_eos, prompt)
        lengths = np.fromiter((len(ids) for ids, _ in rows), dtype=np.int64, count=len(rows))
        order = np.argsort(-lengths, kind="stable")     # longest first: little padding, an OOM shows at once
        step = batch_size or self.batch_size
        pad_id = pad_id_of(tokenizer)
        autocast = (torch.autocast(device_type="cuda", dtype=self.dtype)
                    if self.device.type == "cuda" and self.dtype != torch.float32 else contextlib.nullcontext())
        with torch.inference_mode(), autocast, tqdm(total=len(rows), desc=f"encode {side}s (echo dense)",
                                                     unit="text", disable=bar_disabled(progress),
                                                     leave=False) as bar:
            for start in range(0, len(rows), step):
                batch = order[start:start + step]
                input_ids, attention, pooled = pad_echo_rows([rows[i] for i in batch.tolist()], pad_id)
                hidden = model(input_ids=input_ids.to(self.device),
                               attention_mask=attention.to(self.device)).last_hidden_state
                emb = echo_pool(hidden.float(), pooled.to(self.device), self.pooling)
                if self.normalize:
                    emb = torch.nn.functional.normalize(emb, p=2, dim=-1)
                out[batch] = emb.cpu().numpy()
                bar.update(len(batch))
        return out


ECHO_DENSE_OPTIONS = ("pooling", "normalize", "echo", "include_eos", "query_template", "doc_template",
                      "query_prompt", "doc_prompt", "query_max_length", "doc_max_length", "batch_size", "device",
                      "dtype", "shard_size")


def load_echo_dense_encoder(name: str, **overrides: Any) -> EchoDenseEncoder:
    """:class:`EchoDenseEncoder` from keyword overrides (``None``: not given); other options are refused."""
    given = {k: v for k, v in overrides.items() if v is not None}
    given.pop("cpu_fusion", None)           # a CPU speed switch of the plain encoder: nothing to fuse here
    unknown = sorted(set(given) - set(ECHO_DENSE_OPTIONS))
    if unknown:
        raise ConfigError(f"option(s) {', '.join(unknown)} not supported by the echo dense encoder of {name!r}; "
                          f"allowed: {', '.join(ECHO_DENSE_OPTIONS)}")
    return EchoDenseEncoder(name, **given)


__all__ = ["ECHO_POOLING", "echo_pool", "is_dense_echo_model", "EchoDenseEncoder", "ECHO_DENSE_OPTIONS",
           "load_echo_dense_encoder"]
