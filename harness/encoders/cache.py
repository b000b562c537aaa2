"""The corpus embedding cache: encode once, reuse for every later evaluation.

An entry holds one corpus encoded by one encoder.  Its key is a hash of the
encoder's ``identity()`` (model fingerprint, pooling, normalisation, prompts, max
lengths, dtype), the corpus content hash and the passage format, so any change to
what determines the vectors gives a new entry.  Layout::

    <cache root>/embeddings/<key>/meta.json          identity, n docs, dim, shard layout, complete flag
    <cache root>/embeddings/<key>/shard-00000.npy    float32 (count, dim), memory-mapped on read
    ...

Encoding streams shard by shard (only one shard of vectors is ever in memory, so a
corpus larger than RAM can be encoded), and every shard is written atomically (temp
file + rename).  An interrupted encoding keeps its finished shards; the next call
encodes only the missing ones.  The shard layout is fixed when an entry is created,
so resuming with a different ``shard_size`` reuses the stored layout.  With several devices the
shards are encoded by one worker process per device (:mod:`harness.encoders.devices`) into the same
entry: the device list changes neither the key nor the vectors.

Processes that encode the same entry at the same time (two ``harness eval`` of one model and
dataset, concurrent suites) claim its shards one by one (:class:`harness.encoders.shards.ShardClaims`,
``shard-NNNNN.claim`` files in the entry): each shard is encoded by one of them, the others wait for
its file and read it, and a shard whose holder died is taken over.  The entry's creation and its
``meta.json`` updates are serialised by the entry's own claim (``meta.claim``).  ``HARNESS_CLAIMS=off``
turns the claims off (every process then encodes every missing shard, as before).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.beir import Corpus
from harness.encoders.base import Encoder
from harness.encoders.devices import encode_shards
from harness.encoders.shards import ShardClaims, check_shard_vectors, write_shard
from harness.errors import ConfigError
from harness.io import atomic_write_json
from harness.io.claims import CLAIM_SUFFIX, claim

log = logging.getLogger(__name__)

CACHE_ENV = "HARNESS_CACHE"
DEFAULT_SHARD_SIZE = 50_000
FORMAT_VERSION = 1
# The text the encoder sees for a document; part of the key so that a change here invalidates entries.
PASSAGE_FORMAT = "title + ' ' + text (stripped; text alone when no title)"
META_FILE = "meta.json"
META_CLAIM = "meta"          # the entry's own claim (meta.claim): creation and metadata updates
META_POLL_SECONDS = 0.02     # it is held for a file read and write at most: look again soon


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$HARNESS_CACHE``, else ``~/.cache/retrieval-harness``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "retrieval-harness"


def embedding_key(identity: dict[str, Any], corpus_hash: str) -> str:
    """The entry key: a hash of (encoder identity, corpus content hash, passage format, format version)."""
    blob = json.dumps({"format": FORMAT_VERSION, "encoder": identity, "corpus": corpus_hash,
                       "passage": PASSAGE_FORMAT}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _shard_file(index: int) -> str:
    return f"shard-{index:05d}.npy"


@dataclass
class CorpusEmbeddings:
    """Cached embeddings of one corpus: shard memmaps plus the corpus doc ids.

    ``encoded_shards`` counts the shards this call had to encode: 0 means the
    encoder was not called at all (``skipped``).
    """

    path: Path
    key: str
    doc_ids: list[str]
    dim: int
    layout: list[tuple[int, int]]          # (start row, count) per shard
    identity: dict[str, Any]
    encoded_shards: int = 0
    encode_seconds: float = 0.0
    _array: np.ndarray | None = field(default=None, repr=False)

    @property
    def num_docs(self) -> int:
        return len(self.doc_ids)

    @property
    def skipped(self) -> bool:
        """True when every shard came from the cache (the encoder was not called)."""
        return self.encoded_shards == 0

    def __len__(self) -> int:
        return self.num_docs

    def shards(self) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start row, read-only float32 memmap of shape (count, dim))`` per shard."""
        for i, (start, _count) in enumerate(self.layout):
            yield start, np.load(self.path / _shard_file(i), mmap_mode="r")

    def as_array(self) -> np.ndarray:
        """All vectors as one (num_docs, dim) array.

        A single shard is returned as its memmap (no copy); several shards are
        concatenated into memory, so prefer :meth:`shards` for corpora larger than RAM.
        """
        if self._array is None:
            parts = [m for _, m in self.shards()]
            self._array = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        return self._array


def read_meta(entry: Path) -> dict[str, Any] | None:
    """The entry's ``meta.json``; None when it is missing or unreadable."""
    try:
        meta = json.loads((entry / META_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


def update_meta(entry: Path, meta: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Apply ``change`` to the entry's metadata as stored now (another process encoding the same entry may
    have recorded its shards since ``meta`` was read) and write it back, under the entry's claim; returns
    the metadata written (``meta`` is updated in place too)."""
    with claim(entry / META_CLAIM, "updating the cache entry's metadata", poll=META_POLL_SECONDS):
        current = read_meta(entry)
        if current is None or current.get("key") != meta.get("key"):
            current = meta
        change(current)
        atomic_write_json(entry / META_FILE, current)
    if current is not meta:
        meta.clear()
        meta.update(current)
    return meta


def _clear_entry(entry: Path) -> None:
    """Remove an entry's files but its claim files (a lock file is never deleted: see harness.io.claims)."""
    for path in entry.iterdir():
        if path.name.endswith(CLAIM_SUFFIX):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _shard_is_valid(path: Path, count: int, dim: int | None) -> bool:
    """A shard counts as done only if its header says float32 (count, dim)."""
    if not path.is_file():
        return False
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return arr.dtype == np.float32 and arr.ndim == 2 and arr.shape[0] == count and (dim is None or arr.shape[1] == dim)


def open_entry(encoder: Encoder, corpus: Corpus, cache_dir: str | Path | None, *, kind: str, folder: str,
               shard_size: int, fields: dict[str, Any],
               shard_fields: Callable[[int], dict[str, Any]] = lambda i: {}) -> tuple[Path, dict[str, Any]]:
    """The cache entry of ``corpus`` under ``encoder`` in ``<root>/<folder>/<key>`` and its metadata: read
    back when it matches its key (else rebuilt), or created with the shard layout, ``fields`` (what the
    representation records, e.g. ``dim``) and per-shard ``shard_fields``.  Shared by the dense and the
    sparse caches so both key and validate entries the same way."""
    if getattr(encoder, "kind", "dense") != kind:
        holds = "dense vectors" if kind == "dense" else "term weights"
        raise ConfigError(f"the {folder} cache holds {holds}; encoder kind is {getattr(encoder, 'kind', None)!r}")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ConfigError(f"shard_size must be a positive integer, got {shard_size!r}")
    n = len(corpus)
    if n == 0:
        raise ConfigError("cannot encode an empty corpus")
    identity = encoder.identity()
    corpus_hash = corpus.content_hash()
    key = embedding_key(identity, corpus_hash)
    entry = cache_root(cache_dir) / folder / key
    meta = read_meta(entry)
    if meta is not None and meta.get("complete") and _meta_matches(meta, corpus_hash, n):
        return entry, meta          # the common hit: no claim needed
    load_model_first(encoder)
    # Under the entry's claim: a process encoding the same entry concurrently must find the layout written
    # here (or write the one found here), never a second one of its own.
    with claim(entry / META_CLAIM, f"creating the {folder} cache entry {key}", poll=META_POLL_SECONDS):
        meta = read_meta(entry)
        if meta is not None and not _meta_matches(meta, corpus_hash, n):
            log.warning("%s cache entry %s does not match its key; rebuilding it", kind, entry)
            _clear_entry(entry)
            meta = None
        if meta is None:
            layout = [(start, min(shard_size, n - start)) for start in range(0, n, shard_size)]
            meta = {"format": FORMAT_VERSION, "key": key, "identity": identity, "corpus_hash": corpus_hash,
                    "passage_format": PASSAGE_FORMAT, "num_docs": n, **fields, "shard_size": shard_size,
                    "shards": [{**shard_fields(i), "start": s, "count": c} for i, (s, c) in enumerate(layout)],
                    "complete": False, "encode_seconds": 0.0}
            entry.mkdir(parents=True, exist_ok=True)
            atomic_write_json(entry / META_FILE, meta)
    return entry, meta


def load_model_first(encoder: Encoder) -> None:
    """Load ``encoder``'s model before its cache entry is created or written: a model that cannot be loaded
    fails here, leaving no empty entry folder behind, and the "encoding" log line follows a loaded model.

    The harness's encoders load their weights lazily, on first use, through ``_load()``; an encoder without
    one (a test double, a user's own) is left alone.  With several devices the worker processes load their
    own copies (:mod:`harness.encoders.devices`): loading one here as well would hold a second copy in memory.
    """
    load = getattr(encoder, "_load", None)
    if callable(load) and len(tuple(getattr(encoder, "devices", None) or ())) <= 1:
        load()


def _meta_matches(meta: dict[str, Any], corpus_hash: str, n: int) -> bool:
    return (meta.get("format") == FORMAT_VERSION and meta.get("corpus_hash") == corpus_hash
            and meta.get("num_docs") == n and bool(meta.get("shards")))


def encode_corpus(encoder: Encoder, corpus: Corpus, cache_dir: str | Path | None = None, *,
                  shard_size: int = DEFAULT_SHARD_SIZE, batch_size: int | None = None,
                  progress: bool = True) -> CorpusEmbeddings:
    """Return the embeddings of ``corpus`` under ``encoder``, encoding only what the cache lacks.

    ``cache_dir`` is the cache root (see :func:`cache_root`); entries live under
    ``<root>/embeddings/``.  Texts are ``corpus.passages()`` (title + " " + text).  An encoder
    that carries its own ``shard_size`` (``harness eval --shard-size``) sets the layout of a new
    entry unless the caller asks for a size other than the default.  Peak memory is one shard
    of texts and vectors plus one batch of tokens (the encoder tokenises per batch).  An encoder with
    more than one ``devices`` (``harness eval --devices``) encodes the missing shards in one worker
    process per device (:mod:`harness.encoders.devices`): same vectors, same entry.
    """
    requested = getattr(encoder, "shard_size", None)
    if requested is not None and shard_size == DEFAULT_SHARD_SIZE:
        shard_size = requested
    entry, meta = open_entry(encoder, corpus, cache_dir, kind="dense", folder="embeddings", shard_size=shard_size,
                             fields={"dim": None, "dtype": "float32"}, shard_fields=lambda i: {"file": _shard_file(i)})
    n = len(corpus)
    layout = [(int(s["start"]), int(s["count"])) for s in meta["shards"]]
    dim: int | None = meta.get("dim")

    missing = [i for i, (_, count) in enumerate(layout) if not _shard_is_valid(entry / _shard_file(i), count, dim)]
    if missing:
        log.info("encoding %d of %d shard(s) of %s into %s", len(missing), len(layout), corpus.source or "corpus",
                 entry)
    else:
        log.info("embedding cache hit: %s (%d docs), encoder not called", entry, n)
    elapsed = 0.0

    def shard_texts(start: int, count: int) -> list[str]:
        return Corpus(corpus.ids[start:start + count], corpus.titles[start:start + count],
                      corpus.texts[start:start + count]).passages()

    def record(seconds: float, width: int) -> None:
        nonlocal elapsed, dim
        elapsed += seconds
        dim = width

        def change(current: dict[str, Any]) -> None:
            current["dim"] = width
            current["encode_seconds"] = round(float(current.get("encode_seconds") or 0.0) + seconds, 3)

        update_meta(entry, meta, change)

    def shard_done(i: int) -> bool:
        """Shard ``i`` is on disk (asked again under its claim: another process may have written it)."""
        nonlocal dim
        if dim is None:              # another process may have recorded the width meanwhile
            dim = (read_meta(entry) or {}).get("dim")
        return _shard_is_valid(entry / _shard_file(i), layout[i][1], dim)

    devices = tuple(getattr(encoder, "devices", None) or ())
    with ShardClaims(entry, missing, shard_done, what=f"encoding {corpus.source or 'a corpus'}") as claims:
        if missing and len(devices) > 1:        # one worker process per device (harness.encoders.devices)

            encode_shards(encoder, devices, [(i, *layout[i]) for i in missing], shard_texts,
                          lambda i: entry / _shard_file(i), dim=dim, batch_size=batch_size, progress=progress,
                          on_done=lambda done: record(done.seconds, done.dim), claims=claims)
        else:
            while (i := claims.next()) is not None:
                shard_started = time.perf_counter()
                start, count = layout[i]
                vectors = np.asarray(encoder.encode_docs(shard_texts(start, count), batch_size=batch_size,
                                                         progress=progress))
                write_shard(entry / _shard_file(i), check_shard_vectors(vectors, i, start, count, dim))
                record(time.perf_counter() - shard_started, int(vectors.shape[1]))
                claims.release(i)
    if dim is None:   # every shard was valid but the meta lost their width (a kill between the two writes)
        dim = int(np.load(entry / _shard_file(0), mmap_mode="r").shape[1])
    if not meta.get("complete"):
        update_meta(entry, meta, lambda current: current.update(complete=True, dim=dim))
    return CorpusEmbeddings(path=entry, key=meta["key"], doc_ids=list(corpus.ids), dim=dim, layout=layout,
                            identity=meta["identity"], encoded_shards=claims.encoded, encode_seconds=elapsed)
