"""The trainable embedding model: an HF backbone, optional LoRA, pooling.

Saved model folders are what :class:`harness.encoders.hf.HFEncoder` loads: the HF
weights (or a ``peft`` adapter folder whose ``adapter_config.json`` names the base
model), the tokenizer, and ``harness_encoder.json`` with pooling, normalisation,
max lengths and EOS handling, so that evaluation encodes exactly as training did.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.encoders.backbone import load_backbone, resolve_model
from harness.encoders.heads import DenseHead, Head, load_backbone_for
from harness.encoders.model_check import check_model, has_tokenizer, load_errors
from harness.encoders.settings import EncoderSettings, read_encoder_config, write_encoder_config
from harness.errors import ConfigError
from harness.train.spec import TrainSpec

log = logging.getLogger(__name__)
TRAINING_INFO = "training.json"
_FEATURE_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class EmbeddingModel(nn.Module):
    """``backbone`` + a representation head (default: ``pool`` + optional normalisation); returns raw
    representations (the loss applies cos/dot)."""

    def __init__(self, backbone: nn.Module, pooling: str, normalize: bool, head: Head | None = None):
        super().__init__()
        self.backbone = backbone
        self.pooling = pooling
        self.normalize = normalize
        self.head = head if head is not None else DenseHead(pooling, normalize)
        self._accepts_token_types = "token_type_ids" in _forward_args(backbone)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self._accepts_token_types:
            kwargs["token_type_ids"] = token_type_ids
        return self.head(self.backbone(**kwargs), attention_mask)


def _forward_args(module: nn.Module) -> set[str]:
    import inspect

    target: Any = module   # a transformers model, or a peft wrapper around one
    if hasattr(module, "get_base_model"):
        target = target.get_base_model()
    try:
        return set(inspect.signature(target.forward).parameters)
    except (TypeError, ValueError):
        return set()


def model_features(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tokenizer outputs a backbone takes (drops e.g. ``offset_mapping``)."""
    return {k: v for k, v in batch.items() if k in _FEATURE_KEYS}


def resolved_encoding(spec: TrainSpec) -> dict[str, Any]:
    """Pooling/normalisation/EOS after applying model defaults (no weights are loaded)."""
    path, defaults = resolve_model(spec.model)
    pooling = spec.pooling or defaults.pooling
    normalize = spec.normalize if spec.normalize is not None else (spec.similarity == "cos" or defaults.normalize)
    if spec.similarity == "cos" and spec.normalize is False:
        raise ConfigError("train spec: similarity 'cos' scores normalised embeddings; normalize: false contradicts it")
    append_eos = spec.append_eos if spec.append_eos is not None else (pooling == "last" or defaults.append_eos)
    return {"path": path, "pooling": pooling, "normalize": bool(normalize), "append_eos": bool(append_eos)}


def build_model(spec: TrainSpec, model_name: str | None = None, trainable: bool = True, head: Head | None = None):
    """Load the backbone for ``spec`` and return ``(EmbeddingModel, tokenizer, encoding dict)``.

    ``head`` (a method's representation head) decides the backbone class (e.g. with an
    MLM head for sparse weights); None is the dense pooling of the spec."""
    enc = resolved_encoding(spec if model_name is None else spec.replace(model=model_name))
    if head is not None and head.saved_pooling() is not None:
        # A sparse head: the saved folder records its term aggregation (unnormalised dot products).
        enc = {**enc, "pooling": head.saved_pooling(), "normalize": False}
    name = model_name or spec.model
    backbone, tokenizer, _ = load_backbone(name) if head is None else load_backbone_for(name, head)
    if getattr(backbone.config, "use_cache", None):
        backbone.config.use_cache = False   # decoders: no KV cache while training
    if trainable and spec.gradient_checkpointing:
        # transformers >= 5 renamed the switch; non-reentrant checkpointing replays dropout RNG exactly.
        enable = getattr(backbone, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if trainable and spec.lora is not None:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=spec.lora.r, lora_alpha=spec.lora.alpha, lora_dropout=spec.lora.dropout,
                         target_modules=spec.lora.target_modules, bias="none")
        backbone = get_peft_model(backbone, cfg)
    model = EmbeddingModel(backbone, enc["pooling"], enc["normalize"], head)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model, tokenizer, enc


def encoder_settings(spec: TrainSpec, enc: dict[str, Any]):
    """The ``harness_encoder.json`` settings for a model trained under ``spec``.

    No prompt is baked in: instructions depend on the evaluation task, so the
    benchmark's protocol supplies them (the training template is in ``training.json``).
    """
    return EncoderSettings(pooling=enc["pooling"], normalize=enc["normalize"], query_prompt="", doc_prompt="",
                           query_max_length=spec.query_max_length, doc_max_length=spec.doc_max_length,
                           append_eos=enc["append_eos"])


def is_lora(model: EmbeddingModel) -> bool:
    return hasattr(model.backbone, "peft_config")


def save_model(model: EmbeddingModel, tokenizer, directory: str | Path, settings, training_info: dict[str, Any],
               merge_lora: bool = False) -> None:
    """Write an HF model folder (or LoRA adapter folder), the tokenizer, ``harness_encoder.json``
    (``settings``) and ``training.json`` (``training_info``: how the model was trained)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    backbone: Any = model.backbone   # a transformers PreTrainedModel, or a peft PeftModel under LoRA
    if is_lora(model) and merge_lora:
        backbone = backbone.merge_and_unload()   # in place: only for the final export
    backbone.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))
    write_encoder_config(directory, settings)
    (directory / TRAINING_INFO).write_text(json.dumps(training_info, indent=2, ensure_ascii=False) + "\n",
                                           encoding="utf-8")


def load_weights(model: EmbeddingModel, directory: str | Path) -> None:
    """Load weights saved by :func:`save_model` (not merged) into a model built from the same spec."""
    directory = Path(directory)
    if is_lora(model):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        state = load_file(str(directory / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(model.backbone, state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ConfigError(f"{directory}: adapter has unexpected keys {unexpected[:5]}")
        return
    backbone: Any = model.backbone   # a transformers PreTrainedModel (not LoRA here)
    loaded = type(backbone).from_pretrained(str(directory))
    missing, unexpected = model.backbone.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        raise ConfigError(f"{directory}: checkpoint does not match the model (missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]})")


def load_frozen_model(name: str, spec: TrainSpec):
    """A frozen (eval, no-grad) encoder, e.g. the tDRO reference model.

    ``name`` is an alias, a hub id, a model folder written by :func:`save_model`
    (its ``harness_encoder.json`` gives pooling and EOS handling) or a LoRA adapter
    folder (merged into its base).  Returns ``(EmbeddingModel, tokenizer, encoding dict)``.
    """
    from transformers import AutoModel, AutoTokenizer

    check_model(name)  # adapter config, weights, tokenizer and base model, before anything is loaded
    path, _ = resolve_model(name)
    folder = Path(path)
    saved = read_encoder_config(folder) if folder.is_dir() else {}
    adapter = folder / "adapter_config.json"
    if adapter.is_file():
        from peft import PeftModel

        base = json.loads(adapter.read_text(encoding="utf-8"))["base_model_name_or_path"]
        base_path, _ = resolve_model(base)
        with load_errors(path):
            backbone = PeftModel.from_pretrained(AutoModel.from_pretrained(base_path, trust_remote_code=False),
                                                 path).merge_and_unload()
            tokenizer = AutoTokenizer.from_pretrained(path if has_tokenizer(folder) else base_path,
                                                      trust_remote_code=False)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    else:
        backbone, tokenizer, _ = load_backbone(name)
    enc = resolved_encoding(spec.replace(model=name, pooling=saved.get("pooling", spec.pooling),
                                         append_eos=saved.get("append_eos", spec.append_eos)))
    model = EmbeddingModel(backbone, enc["pooling"], enc["normalize"])
    model.eval()
    model.requires_grad_(False)
    return model, tokenizer, enc
