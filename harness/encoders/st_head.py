"""The layers a sentence-transformers model applies after pooling: ``Dense`` and ``LayerNorm`` modules.

A sentence-transformers model is a pipeline listed in its ``modules.json``: the transformer, the pooling,
then optionally more modules on the pooled vector.  :class:`harness.encoders.hf.HFEncoder` runs the
transformer and pooling itself (and ``Normalize`` as its ``normalize`` setting); this module loads the rest,
so such a model is not silently encoded without its last layers.  BEIR's ANCE checkpoint
(``sentence-transformers/msmarco-roberta-base-ance-firstp``: [CLS], then a 768 x 768 ``Dense`` and a
``LayerNorm``) is one; LaBSE's ``Dense`` with tanh is another.

The modules are sentence-transformers' own classes (``Dense.load`` / ``LayerNorm.load`` read a local folder
or the hub, honouring its cache and ``HF_HUB_OFFLINE``), applied in the order ``modules.json`` lists them.
``Dropout`` is the identity at inference and is skipped.  Any other module after pooling, or ``Normalize``
before a ``Dense``/``LayerNorm`` (the harness normalises last), is refused with the module named.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, InputError

MODULES_FILE = "modules.json"
BODY = ("Transformer", "Pooling")            # run by the encoder itself
HEAD = ("Dense", "LayerNorm")                # loaded here
SKIPPED = ("Dropout",)                       # the identity at inference
NORMALIZE = "Normalize"                      # the encoder's ``normalize`` setting, applied last


@dataclass(frozen=True)
class HeadModule:
    """One module of the head: its sentence-transformers class name and its subfolder (``2_Dense``)."""

    kind: str
    subfolder: str


def _modules_file(model: str) -> Path | None:
    folder = Path(model)
    if folder.is_dir():
        path = folder / MODULES_FILE
        return path if path.is_file() else None
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError  # lazy: start-up speed

    from harness.encoders.refs import hub_cache_dir, is_offline
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers.util import load_file_path
    try:
        found = load_file_path(model, MODULES_FILE, local_files_only=is_offline(), cache_folder=str(hub_cache_dir()))
    except (EntryNotFoundError, LocalEntryNotFoundError, OSError):
        return None         # not a sentence-transformers repository, or not reachable (the weights' load says so)
    return Path(found) if found else None


def read_head(model: str) -> tuple[HeadModule, ...]:
    """The ``Dense``/``LayerNorm`` modules ``model`` (a folder or hub id) applies after pooling, in order; empty
    for a model without ``modules.json`` or without such modules."""
    path = _modules_file(model)
    if path is None:
        return ()
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not JSON ({exc.msg})", exc.lineno) from None
    if not isinstance(entries, list):
        raise InputError(path, "a sentence-transformers modules.json is a list of {idx, name, path, type}")
    head: list[HeadModule] = []
    normalized = False
    for entry in entries:
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else ""
        if kind in BODY or kind in SKIPPED:
            continue
        if kind == NORMALIZE:
            normalized = True
            continue
        if kind not in HEAD:
            raise InputError(path, f"module {entry!r} after pooling is not one the harness applies "
                                   f"({', '.join(HEAD + SKIPPED + (NORMALIZE,))}); encoding without it would "
                                   "give other vectors than sentence-transformers")
        if normalized:
            raise InputError(path, f"{kind} comes after Normalize; the harness normalises last")
        head.append(HeadModule(kind, str(entry.get("path", ""))))
    return tuple(head)


def load_head(model: str, head: tuple[HeadModule, ...], local_files_only: bool = False) -> Any:
    """The head as one ``torch.nn.Sequential`` of sentence-transformers modules (each takes and returns the
    ``{"sentence_embedding": tensor}`` features); ``None`` for no head, without importing sentence-transformers
    (seconds of start-up every model load would otherwise pay)."""
    if not head:
        return None
    import torch  # lazy: start-up speed

    from harness.encoders.refs import hub_cache_dir

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers.sentence_transformer import modules
    classes: dict[str, Any] = {"Dense": modules.Dense, "LayerNorm": modules.LayerNorm}
    loaded = []
    for module in head:
        try:
            loaded.append(classes[module.kind].load(model, subfolder=module.subfolder,
                                                    local_files_only=local_files_only,
                                                    cache_folder=str(hub_cache_dir())))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{model}: cannot load its {module.kind} module {module.subfolder!r}: {exc}") from exc
    return torch.nn.Sequential(*loaded)


def apply_head(head: Any, embeddings: Any) -> Any:
    """The pooled embeddings through the head (an empty head returns them unchanged)."""
    if head is None or len(head) == 0:
        return embeddings
    return head({"sentence_embedding": embeddings})["sentence_embedding"]
