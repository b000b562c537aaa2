"""Cheap pre-flight checks of a model reference, before any weights are loaded.

:func:`check_model` is called by the encoder and training loaders and by suite plan
validation.  It turns the failures that transformers reports obscurely (or not at
all) into one :class:`~harness.errors.InputError` / :class:`~harness.errors.ConfigError`
each, naming the path and the likely fix:

* a local path that does not exist (transformers would say "Repo id must be in the form ...");
* a name that is no alias, known checkpoint, local folder or cached hub model: refused with a did-you-mean
  after at most one quick hub request (none in offline mode), not after a minute of download retries;
* an empty folder, a folder without ``config.json`` or without weight files;
* a truncated or corrupt ``*.safetensors`` file (header length and tensor offsets vs file size);
* an invalid ``config.json`` (JSON error with its line);
* a folder without tokenizer files: transformers would silently build a tokenizer of
  special tokens only, every word would become ``[UNK]`` and a meaningless score would
  be stored.

Only ``config.json``, JSON indexes and the safetensors headers are read, so a check
costs milliseconds even for a multi-GB model.  :func:`load_errors` wraps the actual
load, converting what still escapes (safetensors, OS, JSON and tokenizer errors)
into the same kind of message.
"""
from __future__ import annotations

import contextlib
import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path

from harness.encoders.known import find_known_model
from harness.encoders.refs import (
    ALIASES,
    HUB_PROBE_TIMEOUT,
    LIST_MODELS_HINT,
    RUN_MODEL_DIR,
    did_you_mean,
    hub_cache_dir,
    hub_name,
    hub_probe,
    hub_snapshot,
    is_offline,
    is_run_dir,
    looks_like_hub_id,
    resolve_model,
)
from harness.errors import ConfigError, HarnessError, InputError
from harness.io.readers import read_json_object
from harness.synthetic import WorldSpec
from harness.synthetic.refs import TINY_MODEL_KINDS

SYNTHETIC_PREFIX = "synthetic:"
LEXICAL_MODELS = ("bm25",)
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
log = logging.getLogger(__name__)
# Any of these is a vocabulary a tokenizer can be built from (fast JSON, WordPiece, BPE, sentencepiece).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model", "sentencepiece.model")


def check_model(name_or_path: str) -> None:
    """Raise a clear error if ``name_or_path`` cannot be loaded as a model; return quietly otherwise.

    Accepted: ``bm25``, the registered aliases (``minilm``), ``synthetic:<preset>/tiny-bert``
    (or ``tiny-decoder``), a model folder (full model or LoRA adapter), a training run's
    workdir (its ``final/`` model), a hub id in the local cache, or, online, a hub id the hub answers to
    (asked once, :func:`check_hub_model`).  A name none of these is refused with the registered names close to
    it (``did you mean 'minilm'?``).
    """
    name = str(name_or_path).strip()
    if not name:
        raise ConfigError("empty model name; give 'bm25', an alias (minilm), a model folder or a hub id")
    if name.lower() in LEXICAL_MODELS:
        return
    if name.lower() in ALIASES:
        check_folder(Path(resolve_model(name)[0]))
        return
    if name.startswith(SYNTHETIC_PREFIX):
        _check_synthetic(name)
        return
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InputError(path, "is a file, not a model folder; pass the folder that holds config.json "
                                   "and the weights")
        check_folder(path)
        return
    if not looks_like_hub_id(name):
        hint = did_you_mean(name)
        raise InputError(path, "model folder does not exist; check the path" + (f" ({hint})" if hint else "") +
                               " or use an alias such as 'minilm', or a hub id such as 'org/name'")
    check_hub_model(name)


def check_hub_model(name: str) -> None:
    """A name that is neither an alias nor a local path, taken as a hub id: offline first.

    A known checkpoint's alias stands for its hub id; a hub id in the local Hugging Face cache is used
    from there.  Anything else is asked of the hub once (:func:`~harness.encoders.refs.hub_probe`, no
    retries, none at all in offline mode); a name the hub does not answer to is refused in one line that
    names it, the registered names close to it and ``harness list models``.
    """
    known = find_known_model(name) is not None
    name = hub_name(name)   # a known checkpoint's alias (harness.encoders.known) is checked as its hub id
    snapshot = hub_snapshot(name)
    if snapshot is not None:
        # Online, transformers downloads whatever the snapshot lacks; offline it must be complete.
        if is_offline():
            check_folder(snapshot)
        return
    cache = f"the local Hugging Face cache ({hub_cache_dir()})"
    what = (f"not a local folder, and this known checkpoint is not in {cache}" if known
            else f"not a local folder, an alias or a known checkpoint, and not in {cache}")
    # A name close to a registered one is most likely a typo of it; a known checkpoint needs no hint.
    hint = "" if known else " ".join(filter(None, (did_you_mean(name), f"({LIST_MODELS_HINT})")))
    download = (f"to use the hub model, download it on a connected machine ('hf download {name}') or point "
                "HF_HUB_CACHE at a cache holding it")
    if is_offline():
        raise ConfigError(f"model {name!r}: {what}, and offline mode is set (HF_HUB_OFFLINE), so the hub is not "
                          f"asked; " + "; ".join(filter(None, (hint, download))))
    log.info("model %r: not an alias, known checkpoint, local folder or cached hub model; asking the hub once "
             "(%.0f s timeout)", name, HUB_PROBE_TIMEOUT)
    answer, detail = hub_probe(name)
    if answer == "found":
        return          # transformers downloads it into the hub cache on load
    if answer == "gated":
        raise ConfigError(f"model {name!r}: {detail}")
    if answer == "missing":
        raise ConfigError(f"model {name!r}: {what}, and the hub has no such model; "
                          + (hint or "a hub id is 'org/name', a local model folder its path"))
    raise ConfigError(f"model {name!r}: {what}, and the hub cannot be reached ({detail}); "
                      + "; ".join(filter(None, (hint, download))))


def _check_synthetic(name: str) -> None:
    """``synthetic:<preset>/<kind>``: validated without generating the model (that happens on load)."""
    preset, _, kind = name[len(SYNTHETIC_PREFIX):].partition("/")
    if kind not in TINY_MODEL_KINDS:
        raise ConfigError(f"synthetic model {name!r}: expected synthetic:<preset>/"
                          f"{' or .../'.join(TINY_MODEL_KINDS)}")
    if not callable(getattr(WorldSpec, preset, None)):
        raise ConfigError(f"synthetic model {name!r}: unknown world preset {preset!r} (WorldSpec has no "
                          f"{preset}() preset)")


def check_folder(folder: Path) -> None:
    """Check a local model folder (full model, LoRA adapter, or a run workdir with ``final/``)."""
    folder = Path(folder)
    try:
        empty = not any(folder.iterdir())
    except OSError as exc:
        raise InputError(folder, f"cannot read the model folder ({exc.strerror}); check its permissions") from None
    if empty:
        raise InputError(folder, "the model folder is empty; point --model at a saved model (config.json, "
                                 "weights, tokenizer), e.g. a training run's final/ folder")
    if is_run_dir(folder):
        check_folder(folder / RUN_MODEL_DIR)
        return
    if (folder / ADAPTER_CONFIG).is_file():
        _check_adapter(folder)
        return
    config = folder / "config.json"
    if not config.is_file():
        raise InputError(folder, "no config.json: not a transformers model folder; save the model with "
                                 "save_pretrained() or pass the folder that holds config.json")
    read_json_object(config, "model config", "fix or re-save the model")
    check_weights(folder)
    if not has_tokenizer(folder):
        raise InputError(folder, "no tokenizer files (tokenizer.json, vocab.txt, vocab.json or a sentencepiece "
                                 "model); transformers would build a tokenizer that maps every word to [UNK]. "
                                 "Save the tokenizer next to the weights (tokenizer.save_pretrained)")
    from harness.encoders.settings import read_encoder_config  # lazy (start-up speed): imports torch

    read_encoder_config(folder)  # validates harness_encoder.json, if any


def _check_adapter(folder: Path) -> None:
    cfg = read_json_object(folder / ADAPTER_CONFIG, "adapter config", "fix or re-save the adapter")
    base = cfg.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise InputError(folder / ADAPTER_CONFIG, "missing 'base_model_name_or_path' (the model the adapter "
                                                  "was trained on)")
    weights = [folder / w for w in ADAPTER_WEIGHTS if (folder / w).is_file()]
    if not weights:
        raise InputError(folder, "LoRA adapter folder without adapter weights (adapter_model.safetensors); "
                                 "re-save the adapter")
    for file in weights:
        if file.suffix == ".safetensors":
            check_safetensors(file)
    try:
        check_model(base)
    except HarnessError as exc:
        raise InputError(folder / ADAPTER_CONFIG, f"base model {base!r} of this adapter: {exc}") from None


def check_weights(folder: Path) -> None:
    """At least one weight file; every shard named by an index exists; safetensors headers are intact."""
    files = sorted({f for pattern in WEIGHT_PATTERNS for f in folder.glob(pattern) if f.is_file()})
    files = [f for f in files if f.name not in ADAPTER_WEIGHTS]
    for index_name in WEIGHT_INDEXES:
        index = folder / index_name
        if index.is_file():
            weight_map = read_json_object(index, "weight index", "re-save the model").get("weight_map")
            if not isinstance(weight_map, dict):
                raise InputError(index, "no 'weight_map' object; re-save the model")
            for shard in sorted(set(map(str, weight_map.values()))):
                if not (folder / shard).is_file():
                    raise InputError(folder / shard, f"weight shard listed in {index_name} is missing; "
                                                     "re-download or re-save the model")
    if not files:
        raise InputError(folder, "no weight files (model.safetensors or pytorch_model.bin); the download or "
                                 "save did not finish, or this is not a model folder")
    for file in files:
        if file.suffix == ".safetensors":
            check_safetensors(file)
        elif file.stat().st_size == 0:
            raise InputError(file, "weight file is empty; re-download or re-save the model")


def check_safetensors(file: Path) -> None:
    """The header parses and the tensor data it describes fills the file exactly (no truncation)."""
    size = file.stat().st_size
    fix = "the file is truncated or corrupt; re-download or re-save the model"
    with open(file, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise InputError(file, f"{size} bytes, too short for a safetensors header: {fix}")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > size - 8:
            raise InputError(file, f"header length {header_len} exceeds the file size {size}: {fix}")
        raw = handle.read(header_len)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(file, f"the safetensors header is not valid JSON: {fix}") from None
    if not isinstance(header, dict):
        raise InputError(file, f"the safetensors header is not a JSON object: {fix}")
    ends = [int(v["data_offsets"][1]) for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
    expected = 8 + header_len + (max(ends) if ends else 0)
    if expected != size:
        raise InputError(file, f"the header describes {expected} bytes but the file has {size}: {fix}")
    # The library's own validation of the header (dtypes, shapes vs offsets); cheap, no tensor is read.
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="numpy"):
            pass
    except (SafetensorError, OSError) as exc:
        raise InputError(file, f"{exc}: {fix}") from None


def has_tokenizer(folder: Path) -> bool:
    return any((folder / f).is_file() for f in TOKENIZER_FILES) or any(folder.glob("*.model"))


@contextlib.contextmanager
def load_errors(name: str) -> Iterator[None]:
    """Turn what transformers/safetensors/tokenizers raise while loading ``name`` into one InputError."""
    try:
        yield
    except HarnessError:
        raise
    except Exception as exc:  # narrowed below; anything else is a bug and propagates unchanged
        from safetensors import SafetensorError

        # OSError: missing/unreadable files, hub errors; ValueError: JSON, tokenizers, unknown architectures.
        if not isinstance(exc, (SafetensorError, OSError, ValueError)):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(name, f"could not load the model ({type(exc).__name__}: {first}); check that the folder "
                               "holds a complete saved model (config.json, weights, tokenizer), or re-save "
                               "it") from None
