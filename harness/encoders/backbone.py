"""Loading Hugging Face backbones, fingerprinting them, and tokenizing with prompts.

Names (aliases such as ``minilm``, folders, run workdirs, hub ids) are resolved by
:mod:`harness.encoders.refs`; ``ModelDefaults``, ``ALIASES`` and ``resolve_model`` are
re-exported here because the trainer and the encoders import them from this module.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from harness.encoders.cache import cache_root
from harness.encoders.model_check import check_model, load_errors
from harness.encoders.refs import ALIASES, ModelDefaults, hub_revision, hub_snapshot, looks_like_hub_id, resolve_model
from harness.errors import ConfigError
from harness.io import atomic_write_json

__all__ = ["ALIASES", "ModelDefaults", "file_digest", "load_backbone", "model_fingerprint", "resolve_model",
           "tokenize"]

log = logging.getLogger(__name__)

# Files that make up a model's identity (weights, configs, tokenizer vocabularies).
FINGERPRINT_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model", ".pt", ".pth")

# The one documented list of what a model's identity leaves out: fields of its JSON files that record
# which library version saved the folder, or where it was loaded from, and change no number.  With them
# in, upgrading transformers (which writes its version into config.json) moved every cache and cell key
# although the weights and every score were unchanged.  Keys of a file not listed here, and every other
# file, count byte for byte.  ``torch_dtype`` is renamed ``dtype`` (transformers 5 writes the new name).
INCIDENTAL_JSON_FIELDS: dict[str, frozenset[str]] = {
    "config.json": frozenset({"transformers_version", "_name_or_path", "_commit_hash",
                              "_attn_implementation_autoset"}),
    "generation_config.json": frozenset({"transformers_version", "_from_model_config"}),
    "tokenizer_config.json": frozenset({"name_or_path", "_commit_hash"}),
    "preprocessor_config.json": frozenset({"transformers_version"}),
    # sentence-transformers records {"sentence_transformers", "transformers", "pytorch"} versions here.
    "config_sentence_transformers.json": frozenset({"__version__"}),
}
_RENAMED_JSON_FIELDS = {"torch_dtype": "dtype"}
FINGERPRINT_DIR = "fingerprints"
SIDECAR_MIN_BYTES = 1 << 20
RACY_SECONDS = 2
_HASH_BLOCK = 8 << 20


def model_fingerprint(path_or_id: str) -> str:
    """A stable identity for caches: a hash of every model file's full content, or ``hub:<id>@<commit>``.

    Every byte counts: two models of the same size that differ only inside a weight
    file (a LoRA merged into inner layers, a frozen-embedding fine-tune) get different
    fingerprints.  The one exception is :data:`INCIDENTAL_JSON_FIELDS`: the library version
    that saved a config (and similar bookkeeping) is not part of what the model computes, so a
    library upgrade keeps every key.  Large files are hashed once and their digest is remembered in a
    sidecar (see :func:`file_digest`), so re-fingerprinting an unchanged model is cheap.
    """
    path = Path(path_or_id)
    if not path.exists():
        return _hub_fingerprint(path_or_id)
    if path.is_file():
        return f"local:{file_digest(path)[:24]}"
    digest = hashlib.blake2b(digest_size=16)
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.suffix in FINGERPRINT_SUFFIXES:
            canonical = _canonical_json(f) if f.name in INCIDENTAL_JSON_FIELDS else None
            if canonical is None:
                entry = f"{f.relative_to(path).as_posix()}:{f.stat().st_size}:{file_digest(f)}"
            else:
                entry = f"{f.relative_to(path).as_posix()}:canonical:{hashlib.blake2b(canonical).hexdigest()}"
            digest.update(f"{entry}\n".encode())
    return f"local:{digest.hexdigest()[:24]}"


def _canonical_json(file: Path) -> bytes | None:
    """``file``'s JSON object without its incidental fields (:data:`INCIDENTAL_JSON_FIELDS`), as sorted
    compact JSON; None when it is not a JSON object (then its bytes count as they are)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    dropped = INCIDENTAL_JSON_FIELDS[file.name]
    kept = {_RENAMED_JSON_FIELDS.get(k, k): v for k, v in data.items() if k not in dropped}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _hub_fingerprint(repo_id: str) -> str:
    """``hub:<id>@<commit>`` when the local hub cache holds the revision, else ``hub:<id>@<revision>``."""
    revision = hub_revision()
    snapshot = hub_snapshot(repo_id, revision) if looks_like_hub_id(repo_id) else None
    return f"hub:{repo_id}@{snapshot.name if snapshot is not None else revision}"


def _hash_file(file: Path) -> str:
    """blake2b of the whole file, read in 8 MiB blocks (memory stays flat for multi-GB shards)."""
    digest = hashlib.blake2b(digest_size=32)
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _stat_key(stat: os.stat_result) -> dict[str, int]:
    # ctime too: it changes on any write or utime, so restoring an old mtime cannot hide an edit.
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns,
            "inode": stat.st_ino, "device": stat.st_dev}


def _sidecar(file: Path) -> Path:
    name = hashlib.blake2b(str(file).encode(), digest_size=16).hexdigest()
    return cache_root() / FINGERPRINT_DIR / f"{name}.json"


def file_digest(file: str | Path) -> str:
    """Full-content blake2b digest of ``file``, remembered for files of at least 1 MiB.

    The sidecar lives in the harness cache (``<cache>/fingerprints/``, not in the model
    folder, which may be read-only) and is keyed by (absolute path, size, mtime_ns,
    ctime_ns, inode, device); any change of these re-hashes the file.  A file modified
    within the last few seconds is hashed but not remembered: a second write in the same
    timestamp tick would keep its mtime, so its digest cannot be trusted yet.
    """
    file = Path(file).absolute()
    stat = file.stat()
    if stat.st_size < SIDECAR_MIN_BYTES:
        return _hash_file(file)
    key = {"path": str(file), **_stat_key(stat)}
    sidecar = _sidecar(file)
    try:
        stored = json.loads(sidecar.read_text(encoding="utf-8"))
        if isinstance(stored, dict) and all(stored.get(k) == v for k, v in key.items()) \
                and isinstance(stored.get("blake2b"), str):
            return stored["blake2b"]
    except (OSError, ValueError):
        pass
    value = _hash_file(file)
    settled = time.time_ns() - stat.st_mtime_ns > RACY_SECONDS * 1_000_000_000
    if settled and {"path": str(file), **_stat_key(file.stat())} == key:
        try:
            sidecar.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(sidecar, {**key, "blake2b": value})
        except OSError as exc:  # a read-only cache only costs a re-hash next time
            log.debug("cannot write fingerprint sidecar %s: %s", sidecar, exc)
    return value


def load_backbone(name: str, dtype=None, device: str | None = None):
    """Load ``(model, tokenizer, defaults)`` with ``transformers.AutoModel``.

    The model is checked first (:func:`~harness.encoders.model_check.check_model`) and
    load failures become one clear :class:`~harness.errors.InputError`; remote code is
    never run (``trust_remote_code=False``).
    """
    from transformers import AutoModel, AutoTokenizer

    check_model(name)
    path, defaults = resolve_model(name)
    kwargs = {"trust_remote_code": False}
    if dtype is not None:
        kwargs["dtype"] = dtype
    with load_errors(path):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
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
