"""Dense encoders over Hugging Face ``AutoModel`` backbones.

:class:`HFEncoder` loads any transformers backbone (local folder, hub id, or an alias
such as ``minilm``), or a PEFT LoRA adapter folder (the adapter is merged into its
base model for inference), and encodes texts with ``cls``/``mean``/``last`` pooling,
optional L2 normalisation, query/document prompts and separate max lengths.

Speed on CPU comes from doing no wasted work: texts are ordered by their *token*
length so that each batch pads to almost nothing, padding is done in numpy, and the
forward runs under ``torch.inference_mode`` with oneDNN-fused linear layers on CPU
(:mod:`harness.encoders.fusion`).  Memory stays small: texts are tokenised
``tokenize_window`` at a time and their ids packed into one int32 array (4 bytes a token;
Python lists of ints held ~277 bytes a token, 3.3 GB for a 50k-document shard of 256-token
texts), so an encode holds its texts, 4 bytes per token and one batch.  The batches are
exactly those of one global length sort, so the vectors are bit-identical to tokenising
everything up front.  ``backend="int8"`` runs the linear layers as dynamic
int8 (:mod:`harness.encoders.quantized`); ``dtype`` bf16/fp16 loads the weights in that
precision (autocast on CUDA).  Batches always pad on the right, which keeps
position ids correct for every architecture (encoders and decoders alike); ``last``
pooling then reads the last real token through the attention mask.
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.encoders.backbone import ModelDefaults, model_fingerprint, resolve_model
from harness.encoders.base import Encoder
from harness.encoders.devices import check_devices, parse_devices
from harness.encoders.fusion import fuse_linear_layers
from harness.encoders.model_check import check_model, has_tokenizer, load_errors
from harness.encoders.pooling import POOLING_MODES, pool
from harness.encoders.quantized import BACKENDS, INT8_IDENTITY, check_backend, quantize_int8
from harness.encoders.refs import is_offline
from harness.encoders.settings import (
    ENCODER_CONFIG_FILE,
    EncoderSettings,
    read_encoder_config,
    resolve_settings,
)
from harness.encoders.st_head import HeadModule, apply_head, load_head, read_head
from harness.encoders.texts import detached
from harness.errors import ConfigError, InputError
from harness.progress import bar_disabled

log = logging.getLogger(__name__)

ADAPTER_CONFIG_FILE = "adapter_config.json"
_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def resolve_device(device: str | None) -> torch.device:
    """``None`` picks CUDA when available, else CPU."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"`` is bf16 on a GPU that supports it (else fp16), fp32 on CPU."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPE_NAMES:
            raise ConfigError(f"unsupported dtype {dtype}; use float32, bfloat16 or float16")
        return dtype
    key = str(dtype).lower()
    if key == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if key not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose auto, float32, bfloat16 or float16")
    return _DTYPES[key]


def _read_adapter_base(folder: Path) -> str:
    path = folder / ADAPTER_CONFIG_FILE
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON ({exc.msg})", exc.lineno) from None
    base = cfg.get("base_model_name_or_path") if isinstance(cfg, dict) else None
    if not base or not isinstance(base, str):
        raise InputError(path, "missing 'base_model_name_or_path' (the model the adapter was trained on)")
    return base


class HFEncoder(Encoder):
    """A dense encoder over a transformers backbone; see the module docstring.

    ``pooling``, ``normalize``, prompts, max lengths and ``append_eos`` default to the
    model folder's ``harness_encoder.json`` if it has one, else to the alias or
    sentence-transformers defaults; an explicit argument (not ``None``) wins.  The
    weights are loaded on first use, so asking for ``identity()`` (the cache key) is cheap.
    ``cpu_fusion`` runs fp32 CPU linear layers through oneDNN with bias/GELU fused
    (:mod:`harness.encoders.fusion`; the same math up to summation order).  ``backend`` is
    ``torch`` (default) or ``int8`` (dynamic int8 linear layers on CPU; part of the identity).
    ``shard_size`` is the embedding-cache shard size this encoder asks for
    (:func:`harness.encoders.cache.encode_corpus`); ``tokenize_window`` bounds how many texts
    are tokenised at once while measuring lengths.  ``devices`` (``cpu``, ``cuda:N``, ``auto``; a list
    or comma-separated) encodes a cached corpus in one worker process per device
    (:mod:`harness.encoders.devices`); it changes neither the vectors nor the identity.
    """

    kind = "dense"

    def __init__(self, model: str, *, pooling: str | None = None, normalize: bool | None = None,
                 query_prompt: str | None = None, doc_prompt: str | None = None,
                 query_max_length: int | None = None, doc_max_length: int | None = None,
                 append_eos: bool | None = None, batch_size: int = 64, device: str | None = None,
                 dtype: str | torch.dtype = "auto", cpu_fusion: bool = True, backend: str = "torch",
                 shard_size: int | None = None, tokenize_window: int = 1024,
                 devices: str | Sequence[str] | None = None):
        self.model_name = model
        check_model(model)  # a clear error now, not an obscure one (or a silent [UNK] tokenizer) at load
        path, defaults = resolve_model(model)
        self.path = path
        folder = Path(path) if Path(path).is_dir() else None
        self.base_path: str | None = None
        if folder is not None and (folder / ADAPTER_CONFIG_FILE).is_file():
            # A LoRA adapter: weights = base + adapter; defaults from the base unless saved here.
            self.base_path, base_defaults = resolve_model(_read_adapter_base(folder))
            if defaults == ModelDefaults():
                defaults = base_defaults
        saved = read_encoder_config(folder) if folder is not None else {}
        self.settings: EncoderSettings = resolve_settings(defaults, saved, {
            "pooling": pooling, "normalize": normalize, "query_prompt": query_prompt, "doc_prompt": doc_prompt,
            "query_max_length": query_max_length, "doc_max_length": doc_max_length, "append_eos": append_eos,
        })
        if self.settings.pooling not in POOLING_MODES:
            # max/sum (settings.SPARSE_POOLING_MODES) mark term-weight models: harness.encoders.sparse encodes them.
            problem = (f"unknown pooling {self.settings.pooling!r} for a dense encoder (choose one of "
                       f"{', '.join(POOLING_MODES)}); max and sum are term aggregations of sparse (SPLADE) models, "
                       "which the sparse encoder loads")
            if pooling is None and folder is not None:
                raise InputError(folder / ENCODER_CONFIG_FILE, problem)
            raise ConfigError(problem)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        # Several devices: the corpus is encoded by one worker process per device (harness.encoders.devices);
        # queries and a single device run here, on ``device`` (default: the first listed).  Not in the identity.
        self.devices: tuple[str, ...] | None = None
        if devices is not None:
            self.devices = check_devices(parse_devices(devices))
            device = device or self.devices[0]
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.backend = check_backend(backend, self.device, self.dtype)
        for other in self.devices or ():
            check_backend(backend, torch.device(other), self.dtype)
        for name, value in (("shard_size", shard_size), ("tokenize_window", tokenize_window)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        self.shard_size = shard_size
        self.tokenize_window = tokenize_window
        self.similarity = "cos" if self.settings.normalize else "dot"
        self.cpu_fusion = bool(cpu_fusion)
        self.fused: dict[str, int] = {}
        self._model: torch.nn.Module | None = None   # loaded on first use
        self._tokenizer: Any = None
        self._fingerprint: str | None = None
        # A sentence-transformers model's Dense/LayerNorm modules after pooling (harness.encoders.st_head): read
        # now from a folder, on first need from the hub; loaded with the weights.
        self._head_modules: tuple[HeadModule, ...] | None = read_head(path) if folder is not None else None
        self._head: torch.nn.Module | None = None
        self._out_dim: int | None = None

    # ----------------------------------------------------------------- identity
    def identity(self) -> dict[str, Any]:
        if self._fingerprint is None:
            fp = model_fingerprint(self.path)
            if self.base_path is not None:
                fp = f"{fp}+base={model_fingerprint(self.base_path)}"
            self._fingerprint = fp
        identity = {"encoder": "hf", "model": self._fingerprint, **self.settings.to_dict(),
                    "dtype": _DTYPE_NAMES[self.dtype]}
        if self.head_modules:             # absent without a head: the keys of every other model stay
            identity["head"] = [m.kind for m in self.head_modules]
        if self.backend != "torch":       # absent for torch: fp32/bf16 cache keys stay what they were
            identity["backend"] = INT8_IDENTITY
        return identity

    def for_device(self, device: str) -> HFEncoder:
        """This encoder (same settings, dtype and backend, so the same identity) loading its model on
        ``device``, not loaded yet: what a worker process of harness.encoders.devices unpickles."""
        clone = copy.copy(self)
        clone.device, clone.devices = torch.device(device), None
        clone._model, clone._tokenizer, clone.fused = None, None, {}
        clone._head, clone._out_dim = None, None
        return clone

    @property
    def head_modules(self) -> tuple[HeadModule, ...]:
        """The sentence-transformers modules applied after pooling (empty for most models)."""
        if self._head_modules is None:
            self._head_modules = read_head(self.path)
        return self._head_modules

    # ------------------------------------------------------------------ loading
    def _load(self):
        if self._model is not None:
            return self._model, self._tokenizer
        from transformers import AutoModel, AutoTokenizer

        tokenizer_source = self.path
        if self.base_path is not None and not has_tokenizer(Path(self.path)):
            tokenizer_source = self.base_path
        with load_errors(self.path):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=False)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        if self.settings.append_eos and tokenizer.eos_token_id is None:
            raise ConfigError(f"tokenizer of {self.model_name!r} has no EOS token; cannot use append_eos")
        if tokenizer.pad_token_id is None:
            raise ConfigError(f"tokenizer of {self.model_name!r} has no pad, EOS or UNK token to pad with")
        limit = getattr(tokenizer, "model_max_length", None)
        longest = max(self.settings.query_max_length, self.settings.doc_max_length)
        if isinstance(limit, int) and limit < 1_000_000 and longest > limit:
            log.warning("max length %d exceeds the tokenizer's model_max_length %d for %s", longest, limit,
                        self.model_name)

        with load_errors(self.path):
            if self.base_path is not None:
                from peft import PeftModel

                base = AutoModel.from_pretrained(self.base_path, dtype=self.dtype, trust_remote_code=False)
                model = PeftModel.from_pretrained(base, self.path).merge_and_unload()
            else:
                model = AutoModel.from_pretrained(self.path, dtype=self.dtype, trust_remote_code=False)
        if getattr(model.config, "is_encoder_decoder", False):
            model = model.get_encoder()
        model.to(self.device).eval()
        if self.backend == "int8":
            model, count = quantize_int8(model)
            self.fused = {"int8_linear": count}
        elif self.cpu_fusion and self.device.type == "cpu" and self.dtype == torch.float32:
            self.fused = fuse_linear_layers(model)
        head = load_head(self.path, self.head_modules, local_files_only=is_offline())
        if head is not None:
            head = head.to(self.device).eval()
        dense = [m for m in head or () if hasattr(m, "out_features")]
        self._head = head
        self._out_dim = int(dense[-1].out_features) if dense else _hidden_size(model)
        self._model, self._tokenizer = model, tokenizer
        return model, tokenizer

    @property
    def dim(self) -> int:
        """Embedding dimension (loads the model): the hidden size, or the last Dense module's output size."""
        self._load()
        assert self._out_dim is not None
        return self._out_dim

    # ----------------------------------------------------------------- encoding
    def encode_queries(self, texts: Sequence[str], *, batch_size: int | None = None,
                       progress: bool = True) -> np.ndarray:
        s = self.settings
        return self._encode(texts, s.query_max_length, s.query_prompt, batch_size, progress, "encode queries")

    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,
                    progress: bool = True) -> np.ndarray:
        s = self.settings
        return self._encode(texts, s.doc_max_length, s.doc_prompt, batch_size, progress, "encode docs")

    def tokenize(self, texts: Sequence[str], max_length: int, prompt: str = "") -> list[list[int]]:
        """Token ids of ``prompt + text``, truncated to ``max_length`` (EOS forced last with ``append_eos``)."""
        _, tokenizer = self._load()
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        # Fresh strings (prompt + text, or harness.encoders.texts.detached): the tokenizer's UTF-8 view of a
        # non-ASCII text then dies with this window instead of staying on the corpus's own string.
        texts = [prompt + t for t in texts] if prompt else detached(texts)
        if not self.settings.append_eos:
            return tokenizer(texts, max_length=max_length, truncation=True, return_attention_mask=False,
                             return_token_type_ids=False)["input_ids"]
        # Decoder tokenizers (Qwen, Llama-3) often do not add EOS; last-token pooling needs it.
        eos = tokenizer.eos_token_id
        ids = tokenizer(texts, max_length=max_length - 1, truncation=True, return_attention_mask=False,
                        return_token_type_ids=False)["input_ids"]
        return [x if (x and x[-1] == eos) else x + [eos] for x in ids]

    def tokenize_flat(self, texts: Sequence[str], max_length: int, prompt: str = "") -> tuple[np.ndarray, np.ndarray]:
        """Token ids of every text (as :meth:`tokenize` gives them) packed into one int32 array, with
        ``offsets`` (text i is ``flat[offsets[i]:offsets[i + 1]]``): 4 bytes a token instead of a Python
        int in a list (~277 bytes with the list), tokenised ``tokenize_window`` texts at a time."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        n = len(texts)
        lengths = np.zeros(n + 1, dtype=np.int64)
        pieces: list[np.ndarray] = []
        for start in range(0, n, self.tokenize_window):
            window = self.tokenize(list(texts[start:start + self.tokenize_window]), max_length, prompt)
            counts = np.fromiter(map(len, window), dtype=np.int64, count=len(window))
            lengths[start + 1:start + 1 + len(window)] = counts
            pieces.append(np.fromiter(itertools.chain.from_iterable(window), dtype=np.int32, count=int(counts.sum())))
            del window
        flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        return flat, np.cumsum(lengths)

    def _encode(self, texts: Sequence[str], max_length: int, prompt: str, batch_size: int | None,
                progress: bool, desc: str) -> np.ndarray:
        model, tokenizer = self._load()
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        if len(texts) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        flat, offsets = self.tokenize_flat(texts, max_length, prompt)
        lengths = np.diff(offsets)
        n = len(lengths)
        out = np.empty((n, self.dim), dtype=np.float32)
        # Longest first: the largest batch runs first (an OOM shows at once), and ties keep input order.
        order = np.argsort(-lengths, kind="stable")
        step = batch_size or self.batch_size
        pad_id = int(tokenizer.pad_token_id)
        autocast = (torch.autocast(device_type="cuda", dtype=self.dtype)
                    if self.device.type == "cuda" and self.dtype != torch.float32 else contextlib.nullcontext())
        with torch.inference_mode(), autocast, tqdm(total=n, desc=desc, unit="text", disable=bar_disabled(progress),
                                                     leave=False) as bar:
            for start in range(0, n, step):
                rows = order[start:start + step]
                ids = [flat[offsets[i]:offsets[i + 1]] for i in rows.tolist()]
                input_ids, mask = _pad_right(ids, lengths[rows], pad_id)
                input_ids = input_ids.to(self.device, non_blocking=True)
                mask = mask.to(self.device, non_blocking=True)
                hidden = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
                emb = apply_head(self._head, pool(hidden.float(), mask, self.settings.pooling))
                if self.settings.normalize:
                    emb = torch.nn.functional.normalize(emb, p=2, dim=-1)
                out[rows] = emb.cpu().numpy()
                bar.update(len(rows))
        return out


def _hidden_size(model) -> int:
    config = getattr(model, "config", None)
    return int(config.hidden_size)  # type: ignore[union-attr]


def _pad_right(rows: Sequence[Sequence[int] | np.ndarray], lengths: np.ndarray,
               pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token-id lists on the right into (input_ids, attention_mask) int64 tensors."""
    width = int(lengths.max())
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for r, (row, length) in enumerate(zip(rows, lengths)):
        input_ids[r, :length] = row
        mask[r, :length] = 1
    return torch.from_numpy(input_ids), torch.from_numpy(mask)


ENCODING_OPTIONS = ("dtype", "backend", "shard_size", "devices")


def encoding_options(options: dict[str, Any]) -> dict[str, Any]:
    """Validate the encoding options of a suite file or CLI (``dtype``: fp32/bf16/fp16 or the torch names,
    ``backend``: torch/int8, ``shard_size``: positive int, ``devices``: cpu/cuda:N names, a list or a
    comma-separated string) into :class:`HFEncoder` keyword arguments.

    Unknown keys and bad values raise ConfigError naming them; absent or None values are left out."""
    unknown = sorted(set(options) - set(ENCODING_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown encoding option(s) {', '.join(unknown)}; allowed: {', '.join(ENCODING_OPTIONS)}")
    out: dict[str, Any] = {}
    if options.get("dtype") is not None:
        key = str(options["dtype"]).lower()
        if key not in _DTYPES:
            raise ConfigError(f"dtype must be one of fp32, bf16, fp16, got {options['dtype']!r}")
        out["dtype"] = _DTYPE_NAMES[_DTYPES[key]]
    if options.get("backend") is not None:
        if options["backend"] not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {options['backend']!r}")
        out["backend"] = options["backend"]
    if options.get("shard_size") is not None:
        size = options["shard_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"shard_size must be a positive integer, got {size!r}")
        out["shard_size"] = size
    if options.get("devices") is not None:        # spelling only: the devices may be on another machine

        out["devices"] = parse_devices(options["devices"])
    return out


def encoding_card_fields(options: dict[str, Any]) -> dict[str, Any]:
    """Protocol-card ``extra`` fields for validated encoding options that change the numbers (a dtype other
    than float32, the int8 backend); defaults add nothing, so default cards keep their fingerprints.
    The shard size and the devices change no number and are not recorded."""
    extra: dict[str, Any] = {}
    if options.get("dtype", "float32") != "float32":
        extra["encoder_dtype"] = options["dtype"]
    if options.get("backend", "torch") != "torch":
        extra["encoder_backend"] = INT8_IDENTITY
    return extra


def load_encoder(name: str, **overrides: Any) -> Encoder:
    """Build the encoder named ``name`` (alias, local path or hub id) for the CLI and pipeline.

    Keyword overrides are :class:`HFEncoder` arguments; ``None`` values mean "not given".
    """
    if name.lower() == "bm25":
        raise ConfigError("'bm25' is a lexical model, not a dense encoder; use harness.retrieval.bm25")
    given = {k: v for k, v in overrides.items() if v is not None}
    allowed = ("pooling", "normalize", "query_prompt", "doc_prompt", "query_max_length", "doc_max_length",
               "append_eos", "batch_size", "device", "dtype", "cpu_fusion", "backend", "shard_size",
               "tokenize_window", "devices")
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown encoder option(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return HFEncoder(name, **given)
