"""Sparse encoders over masked-LM backbones (and decoder LM heads): vocabulary logits -> term weights.

:class:`SparseMLMEncoder` loads a model with ``transformers.AutoModelForMaskedLM`` and turns
each text into one weight per vocabulary entry, ``log(1 + relu(logit))`` aggregated over the
text's tokens by ``max`` or ``sum`` (the pooling of :class:`harness.encoders.heads.SparseHead`,
so training and evaluation share one implementation; padding is excluded, special tokens are
kept).  Results are :class:`~harness.encoders.sparse_vectors.SparseVectors` (CSR), optionally
pruned to the ``top_k`` largest weights per text.  Similarity is the plain dot product.

The vocabulary logits are ``(batch, length, vocabulary)`` floats, far larger than hidden
states, so batches are cut by a token budget as well as by ``batch_size``; texts are sorted
by token length so that a batch pads to almost nothing.

:class:`EchoSparseEncoder` does the same from a decoder's LM head (``AutoModelForCausalLM``) over echo
or plain templates, pooled on the marked positions only (:mod:`harness.encoders.echo_inputs`; its
settings and checks: :mod:`harness.encoders.sparse_echo`).
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
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
    text_token_ids,
)
from harness.encoders.heads import AGGREGATIONS, splade_pool
from harness.encoders.hf import _DTYPE_NAMES, _pad_right, resolve_device, resolve_dtype
from harness.encoders.model_check import check_model, has_tokenizer, load_errors
from harness.encoders.settings import read_encoder_config
from harness.encoders.sparse_echo import (
    EchoSettings,
    check_causal_lm,
    first_given,
    is_echo_model,
    read_echo_settings,
)
from harness.encoders.sparse_vectors import SparseVectors
from harness.encoders.texts import detached
from harness.errors import ConfigError, InputError
from harness.progress import bar_disabled

DEFAULT_TOKEN_BUDGET = 8192     # tokens per forward: bounds the (tokens x vocabulary) logits in memory


def _positive(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


class SparseMLMEncoder(Encoder):
    """Term weights from a masked-LM head (see the module docstring).

    ``pooling`` is the aggregation over tokens (``max`` or ``sum``); prompts and max lengths
    are as for dense encoders; ``query_top_k`` / ``doc_top_k`` prune each text to its k
    largest weights (None: keep all).  Defaults come from the alias table (``splade-tiny``).
    """

    kind = "sparse"
    similarity = "dot"

    def __init__(self, model: str, *, pooling: str | None = None, query_prompt: str | None = None,
                 doc_prompt: str | None = None, query_max_length: int | None = None,
                 doc_max_length: int | None = None, query_top_k: int | None = None, doc_top_k: int | None = None,
                 batch_size: int = 32, token_budget: int = DEFAULT_TOKEN_BUDGET, device: str | None = None,
                 dtype: str | torch.dtype = "auto"):
        self.model_name = model
        check_model(model)
        self.path, defaults = resolve_model(model)
        # A folder the trainer wrote (harness_encoder.json) encodes as it was trained: its aggregation,
        # prompts and max lengths sit between the model defaults and explicit arguments.
        saved = read_encoder_config(self.path) if Path(self.path).is_dir() else {}
        default_pooling = saved.get("pooling", defaults.pooling)
        self.pooling = pooling or (default_pooling if default_pooling in AGGREGATIONS else "max")
        if self.pooling not in AGGREGATIONS:
            raise ConfigError(f"unknown sparse pooling {self.pooling!r}; choose one of {', '.join(AGGREGATIONS)}")
        self.query_prompt = query_prompt or saved.get("query_prompt", "")
        self.doc_prompt = doc_prompt or saved.get("doc_prompt", "")
        self.query_max_length = query_max_length or saved.get("query_max_length", defaults.max_length)
        self.doc_max_length = doc_max_length or saved.get("doc_max_length", defaults.max_length)
        for name, value in (("query_max_length", self.query_max_length), ("doc_max_length", self.doc_max_length),
                            ("batch_size", batch_size), ("token_budget", token_budget)):
            _positive(name, value)
        _positive("query_top_k", query_top_k, allow_none=True)
        _positive("doc_top_k", doc_top_k, allow_none=True)
        self.query_top_k, self.doc_top_k = query_top_k, doc_top_k
        self.batch_size, self.token_budget = batch_size, token_budget
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self._model: torch.nn.Module | None = None   # loaded on first use
        self._tokenizer: Any = None
        self._fingerprint: str | None = None

    def identity(self) -> dict[str, Any]:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.path)
        return {"encoder": "hf-sparse", "model": self._fingerprint, "representation": "mlm-log1p-relu",
                "pooling": self.pooling, "query_prompt": self.query_prompt, "doc_prompt": self.doc_prompt,
                "query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length,
                "query_top_k": self.query_top_k, "doc_top_k": self.doc_top_k, "dtype": _DTYPE_NAMES[self.dtype]}

    # ------------------------------------------------------------------ loading
    def _load(self):
        if self._model is not None:
            return self._model, self._tokenizer
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        with load_errors(self.path):
            tokenizer = AutoTokenizer.from_pretrained(self.path, trust_remote_code=False)
            try:
                model = AutoModelForMaskedLM.from_pretrained(self.path, dtype=self.dtype, trust_remote_code=False)
            except ValueError as exc:
                if "Unrecognized configuration class" not in str(exc):
                    raise
                raise ConfigError(f"model {self.model_name!r} has no masked-LM head (AutoModelForMaskedLM does not "
                                  "support its architecture); a sparse MLM encoder needs one") from None
        if tokenizer.pad_token_id is None:
            raise ConfigError(f"tokenizer of {self.model_name!r} has no pad token")
        model.to(self.device).eval()
        self._model, self._tokenizer = model, tokenizer
        return model, tokenizer

    @property
    def vocab_size(self) -> int:
        model, _ = self._load()
        return int(model.get_output_embeddings().weight.shape[0])

    def vocabulary(self) -> list[str]:
        """Token string of every vocabulary id (``vocabulary()[id]``)."""
        _, tokenizer = self._load()
        return [str(t) for t in tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))]

    # ----------------------------------------------------------------- encoding
    # Sparse vectors instead of the dense Encoder's arrays: retrieval goes through harness.retrieval.sparse.
    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,  # type: ignore[override]
                       progress: bool = True) -> SparseVectors:
        return self._encode(texts, self.query_max_length, self.query_prompt, self.query_top_k, batch_size,
                            progress, "encode queries")

    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,  # type: ignore[override]
                    progress: bool = True) -> SparseVectors:
        return self._encode(texts, self.doc_max_length, self.doc_prompt, self.doc_top_k, batch_size,
                            progress, "encode docs")

    def _batches(self, lengths: np.ndarray, order: np.ndarray, batch_size: int) -> list[np.ndarray]:
        """Consecutive slices of ``order`` (longest first) within ``batch_size`` texts and the token budget."""
        out, start, n = [], 0, len(order)
        while start < n:
            width = int(lengths[order[start]])          # the longest of this batch comes first
            size = max(1, min(batch_size, self.token_budget // max(width, 1)))
            out.append(order[start:start + size])
            start += size
        return out

    def _encode(self, texts: Sequence[str], max_length: int, prompt: str, top_k: int | None,
                batch_size: int | None, progress: bool, desc: str) -> SparseVectors:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        model, tokenizer = self._load()
        vocab = self.vocab_size
        if len(texts) == 0:
            return SparseVectors.empty(vocab)
        # prompt + t is a new string anyway; the corpus's own strings are tokenised as copies (texts.detached)
        full = [prompt + t for t in texts] if prompt else detached(texts)
        ids = tokenizer(full, max_length=max_length, truncation=True, return_attention_mask=False,
                        return_token_type_ids=False)["input_ids"]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
        pad_id = int(tokenizer.pad_token_id)
        blocks: list[SparseVectors] = []
        autocast = (torch.autocast(device_type="cuda", dtype=self.dtype)
                    if self.device.type == "cuda" and self.dtype != torch.float32 else contextlib.nullcontext())
        with torch.inference_mode(), autocast, tqdm(total=len(ids), desc=desc, unit="text",
                                                     disable=bar_disabled(progress), leave=False) as bar:
            for rows in self._batches(lengths, order, batch_size or self.batch_size):
                input_ids, mask = _pad_right([ids[i] for i in rows], lengths[rows], pad_id)
                mask = mask.to(self.device)
                logits = model(input_ids=input_ids.to(self.device), attention_mask=mask).logits
                weights = splade_pool(logits.float(), mask, self.pooling)
                blocks.append(SparseVectors.from_dense(weights.cpu().numpy(), top_k))
                bar.update(len(rows))
        # Back to input order: block rows follow ``order``.
        stacked = SparseVectors.concatenate(blocks)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return stacked.take(inverse)


class EchoSparseEncoder(SparseMLMEncoder):
    """Term weights from a decoder's LM head over echo (or plain) templates (see the module docstring).

    Beyond :class:`~harness.encoders.sparse.SparseMLMEncoder`'s options: ``echo`` (True: the text twice,
    pooled on the second occurrence; False: once), ``include_eos`` (pool the template's EOS piece too),
    ``query_template`` / ``doc_template`` (echo syntax; default: the mode's); ``query_top_k`` / ``doc_top_k``
    default to the saved or alias ``top_k`` (untrained LM heads give almost every term a positive weight).
    ``query_prompt`` fills the
    ``%%prompt%%`` of the (instructed) query template; ``doc_prompt`` needs a document template with one.
    """

    def __init__(self, model: str, *, echo: bool | None = None, include_eos: bool | None = None,
                 query_template: str | None = None, doc_template: str | None = None, **kwargs: Any):
        super().__init__(model, **kwargs)
        _, defaults = resolve_model(model)
        saved = read_echo_settings(self.path) if Path(self.path).is_dir() else {}
        if not kwargs.get("query_prompt") and saved.get("query_prompt"):
            self.query_prompt = str(saved["query_prompt"])      # the prompt the model was trained with
        top_k = first_given(saved.get("top_k"), defaults.top_k)
        if kwargs.get("query_top_k") is None:
            self.query_top_k = top_k
        if kwargs.get("doc_top_k") is None:
            self.doc_top_k = top_k
        self.echo = bool(first_given(echo, saved.get("echo"), defaults.echo, True))
        self.include_eos = bool(first_given(include_eos, saved.get("include_eos"), False))
        self.base_model: str | None = saved.get("base_model")
        templates = default_templates(self.echo)
        if saved.get("echo", self.echo) != self.echo:
            saved = {}                  # the other mode asked for: its default templates, not the saved ones
        self.query_template = str(first_given(query_template, saved.get("query_template"),
                                         templates["query_instructed" if self.query_prompt else "query"]))
        self.doc_template = str(first_given(doc_template, saved.get("doc_template"), templates["document"]))
        settings = EchoSettings(self.echo, self.include_eos, self.query_template, self.doc_template)  # validates
        for side, prompt, template in (("query", self.query_prompt, settings.query_template),
                                       ("doc", self.doc_prompt, settings.doc_template)):
            if prompt and PROMPT not in str(template):
                raise ConfigError(f"{side}_prompt {prompt!r} given, but the {side} template {template!r} has no "
                                  f"{PROMPT} piece to put it in")
        check_causal_lm(model)

    def identity(self) -> dict[str, Any]:
        base = super().identity()
        return {**base, "encoder": "hf-echo-sparse", "representation": "lm-log1p-relu", "echo": self.echo,
                "include_eos": self.include_eos, "query_template": self.query_template,
                "doc_template": self.doc_template}

    # ------------------------------------------------------------------ loading
    def _load(self):
        if self._model is not None:
            return self._model, self._tokenizer
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = Path(self.path)
        adapter = folder / "adapter_config.json"
        with load_errors(self.path):
            try:
                if adapter.is_file():
                    from peft import PeftModel

                    base = self.base_model or json.loads(adapter.read_text(encoding="utf-8"))["base_model_name_or_path"]
                    check_causal_lm(base)
                    base_path, _ = resolve_model(base)
                    backbone = AutoModelForCausalLM.from_pretrained(base_path, dtype=self.dtype)
                    model = PeftModel.from_pretrained(backbone, str(folder)).merge_and_unload()
                    tokenizer = AutoTokenizer.from_pretrained(str(folder) if has_tokenizer(folder) else base_path)
                else:
                    model = AutoModelForCausalLM.from_pretrained(self.path, dtype=self.dtype)
                    tokenizer = AutoTokenizer.from_pretrained(self.path)
            except ValueError as exc:
                if "Unrecognized configuration class" not in str(exc):
                    raise
                raise ConfigError(f"model {self.model_name!r} has no causal-LM head (AutoModelForCausalLM does not "
                                  "support its architecture); echo sparse encoding needs one") from None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        model.to(self.device).eval()
        self._model, self._tokenizer = model, tokenizer
        return model, tokenizer

    # ----------------------------------------------------------------- encoding
    def template(self, side: str) -> tuple[str, str, int]:
        """``(template, prompt, max_length)`` of ``side`` (query or doc)."""
        if side == "query":
            return self.query_template, self.query_prompt, self.query_max_length
        if side == "doc":
            return self.doc_template, self.doc_prompt, self.doc_max_length
        raise ConfigError(f"unknown side {side!r}; query or doc")

    def text_token_ids(self, texts: Sequence[str], side: str = "doc") -> list[list[int]]:
        """The token ids of each text as its pooled piece holds them (for :func:`top_terms_in_text` checks)."""
        _, tokenizer = self._load()
        return text_token_ids(tokenizer, texts, self.template(side)[2])

    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,  # type: ignore[override]
                       progress: bool = True) -> SparseVectors:
        return self._encode_side(texts, "query", self.query_top_k, batch_size, progress)

    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,  # type: ignore[override]
                    progress: bool = True) -> SparseVectors:
        return self._encode_side(texts, "doc", self.doc_top_k, batch_size, progress)

    def _encode_side(self, texts: Sequence[str], side: str, top_k: int | None, batch_size: int | None,
                     progress: bool) -> SparseVectors:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        model, tokenizer = self._load()
        vocab = self.vocab_size
        if len(texts) == 0:
            return SparseVectors.empty(vocab)
        template, prompt, max_length = self.template(side)
        rows = echo_token_rows(tokenizer, texts, template, max_length, self.include_eos, prompt)
        lengths = np.fromiter((len(ids) for ids, _ in rows), dtype=np.int64, count=len(rows))
        order = np.argsort(-lengths, kind="stable")
        pad_id = pad_id_of(tokenizer)
        blocks: list[SparseVectors] = []
        autocast = (torch.autocast(device_type="cuda", dtype=self.dtype)
                    if self.device.type == "cuda" and self.dtype != torch.float32 else contextlib.nullcontext())
        with torch.inference_mode(), autocast, tqdm(total=len(rows), desc=f"encode {side}s (echo)" if self.echo
                                                     else f"encode {side}s", unit="text",
                                                     disable=bar_disabled(progress), leave=False) as bar:
            for batch in self._batches(lengths, order, batch_size or self.batch_size):
                input_ids, attention, pooling = pad_echo_rows([rows[i] for i in batch], pad_id)
                columns = pooling.any(dim=0).nonzero()
                first = int(columns[0]) if len(columns) else input_ids.shape[1] - 1
                logits = model(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                               logits_to_keep=input_ids.shape[1] - first).logits
                weights = splade_pool(logits.float(), pooling[:, first:].to(self.device), self.pooling)
                blocks.append(SparseVectors.from_dense(weights.cpu().numpy(), top_k))
                bar.update(len(batch))
        stacked = SparseVectors.concatenate(blocks)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return stacked.take(inverse)


def is_sparse_model(name: str) -> bool:
    """True for sparse models: an alias whose defaults say so (``splade-tiny``), or a saved
    sentence-transformers sparse encoder (its ``modules.json`` names ``SpladePooling``)."""
    try:
        path, defaults = resolve_model(name)
    except ConfigError:
        return False
    if defaults.representation == "sparse":
        return True
    try:   # a folder the trainer wrote for a sparse head records its term aggregation as the pooling
        if Path(path).is_dir() and read_encoder_config(path).get("pooling") in AGGREGATIONS:
            return True
    except InputError:
        return False
    modules = Path(path) / "modules.json"
    try:
        return modules.is_file() and "SpladePooling" in modules.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


ECHO_OPTIONS = ("echo", "include_eos", "query_template", "doc_template")


def load_sparse_encoder(name: str, **overrides: Any) -> SparseMLMEncoder:
    """Build a sparse encoder from keyword overrides (``None`` values mean "not given"): an
    :class:`~harness.encoders.sparse_echo.EchoSparseEncoder` for a decoder read through its LM head
    (an echo alias or a folder with ``harness_echo.json``), else a :class:`SparseMLMEncoder`."""
    given = {k: v for k, v in overrides.items() if v is not None}
    allowed: tuple[str, ...] = ("pooling", "query_prompt", "doc_prompt", "query_max_length", "doc_max_length",
                                "query_top_k", "doc_top_k", "batch_size", "token_budget", "device", "dtype")
    echo = is_echo_model(name)
    if echo:
        allowed += ECHO_OPTIONS
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown sparse encoder option(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return EchoSparseEncoder(name, **given) if echo else SparseMLMEncoder(name, **given)
