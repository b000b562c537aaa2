"""The sparse corpus cache: term weights of one corpus under one sparse encoder, encoded once.

Keyed exactly like the dense cache (:func:`harness.encoders.cache.embedding_key`: the
encoder's ``identity()`` — model fingerprint, pooling, prompts, max lengths, top-k pruning,
dtype — the corpus content hash and the passage format).  Layout::

    <cache root>/sparse/<key>/meta.json                     identity, n docs, vocabulary size, shards, complete flag
    <cache root>/sparse/<key>/shard-00000.{indptr,indices,data}.npy    one CSR block per shard (memory-mapped on read)

Encoding streams shard by shard and writes every file atomically, ``indptr`` last; a shard
counts as done only when its three arrays agree, so an interrupted encoding resumes with
the missing shards and the stored layout.  Concurrent encodings of one entry claim its shards as the
dense cache does (:class:`harness.encoders.shards.ShardClaims`): each shard is encoded once.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.beir import Corpus
from harness.encoders.base import Encoder
from harness.encoders.cache import DEFAULT_SHARD_SIZE, open_entry, read_meta, update_meta
from harness.encoders.shards import ShardClaims
from harness.encoders.sparse_vectors import SparseVectors
from harness.errors import ConfigError
from harness.io import atomic_write

log = logging.getLogger(__name__)

PARTS = ("indices", "data", "indptr")      # written in this order: indptr last marks the shard


def _shard_file(index: int, part: str) -> str:
    return f"shard-{index:05d}.{part}.npy"


@dataclass
class CorpusSparse:
    """Cached term weights of one corpus: CSR shards plus the corpus doc ids."""

    path: Path
    key: str
    doc_ids: list[str]
    vocab_size: int
    layout: list[tuple[int, int]]
    identity: dict[str, Any]
    encoded_shards: int = 0
    encode_seconds: float = 0.0

    @property
    def num_docs(self) -> int:
        return len(self.doc_ids)

    @property
    def skipped(self) -> bool:
        return self.encoded_shards == 0

    def shards(self) -> Iterator[tuple[int, SparseVectors]]:
        """``(start row, memory-mapped SparseVectors)`` per shard."""
        for i, (start, _count) in enumerate(self.layout):
            arrays = {p: np.load(self.path / _shard_file(i, p), mmap_mode="r") for p in PARTS}
            yield start, SparseVectors(arrays["indptr"], arrays["indices"], arrays["data"], self.vocab_size)

    def vectors(self) -> SparseVectors:
        """All documents as one block (concatenated in memory when there are several shards)."""
        parts = [v for _, v in self.shards()]
        return parts[0] if len(parts) == 1 else SparseVectors.concatenate(parts)

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.glob("shard-*.npy"))


def _shard_is_valid(entry: Path, index: int, count: int, vocab_size: int | None) -> bool:
    try:
        arrays = {p: np.load(entry / _shard_file(index, p), mmap_mode="r") for p in PARTS}
    except (OSError, ValueError):
        return False
    indptr, indices, data = arrays["indptr"], arrays["indices"], arrays["data"]
    return (indptr.dtype == np.int64 and indices.dtype == np.int32 and data.dtype == np.float32
            and indptr.shape == (count + 1,) and indices.shape == data.shape and int(indptr[-1]) == len(indices)
            and vocab_size is not None)


def _write_shard(entry: Path, index: int, vectors: SparseVectors) -> None:
    arrays: dict[str, np.ndarray] = {"indptr": np.ascontiguousarray(vectors.indptr, dtype=np.int64),
              "indices": np.ascontiguousarray(vectors.indices, dtype=np.int32),
              "data": np.ascontiguousarray(vectors.data, dtype=np.float32)}
    for part in PARTS:
        with atomic_write(entry / _shard_file(index, part), "wb") as handle:
            np.save(handle, arrays[part], allow_pickle=False)


def encode_corpus_sparse(encoder: Encoder, corpus: Corpus, cache_dir: str | Path | None = None, *,
                         shard_size: int = DEFAULT_SHARD_SIZE, batch_size: int | None = None,
                         progress: bool = True) -> CorpusSparse:
    """Return the term weights of ``corpus`` under the sparse ``encoder``, encoding only what the cache lacks."""
    entry, meta = open_entry(encoder, corpus, cache_dir, kind="sparse", folder="sparse", shard_size=shard_size,
                             fields={"vocab_size": None})
    layout = [(int(s["start"]), int(s["count"])) for s in meta["shards"]]
    vocab_size: int | None = meta.get("vocab_size")
    # Without a recorded vocab_size (a kill between a shard and its meta) every shard is encoded again.
    missing = [i for i, (_, c) in enumerate(layout)
               if vocab_size is None or not _shard_is_valid(entry, i, c, vocab_size)]
    if missing:
        log.info("encoding %d of %d sparse shard(s) of %s into %s", len(missing), len(layout),
                 corpus.source or "corpus", entry)
    elapsed = 0.0

    def shard_done(i: int) -> bool:
        """Shard ``i`` is on disk (asked again under its claim: another process may have written it)."""
        nonlocal vocab_size
        if vocab_size is None:       # another process may have recorded it meanwhile
            vocab_size = (read_meta(entry) or {}).get("vocab_size")
        return vocab_size is not None and _shard_is_valid(entry, i, layout[i][1], vocab_size)

    with ShardClaims(entry, missing, shard_done, what=f"encoding {corpus.source or 'a corpus'}") as claims:
        while (i := claims.next()) is not None:
            started = time.perf_counter()
            start, count = layout[i]
            texts = Corpus(corpus.ids[start:start + count], corpus.titles[start:start + count],
                           corpus.texts[start:start + count]).passages()
            vectors = encoder.encode_docs(texts, batch_size=batch_size, progress=progress)
            if not isinstance(vectors, SparseVectors) or len(vectors) != count:
                raise ConfigError(f"sparse encoder returned {type(vectors).__name__} of {len(vectors)} rows for "
                                  f"{count} documents")
            if vocab_size is not None and vectors.vocab_size != vocab_size:
                raise ConfigError(f"sparse encoder vocabulary {vectors.vocab_size}, cache entry has {vocab_size}")
            if not np.all(np.isfinite(vectors.data)):
                raise ConfigError(f"sparse encoder returned non-finite weights in shard {i}")
            _write_shard(entry, i, vectors)
            seconds = time.perf_counter() - started
            elapsed += seconds
            vocab_size = width = int(vectors.vocab_size)

            def change(current: dict[str, Any], width: int = width, seconds: float = seconds) -> None:
                current["vocab_size"] = width
                current["encode_seconds"] = round(float(current.get("encode_seconds") or 0.0) + seconds, 3)

            update_meta(entry, meta, change)
            claims.release(i)
    if not meta.get("complete"):
        update_meta(entry, meta, lambda current: current.update(complete=True, vocab_size=vocab_size))
    assert vocab_size is not None   # recorded, or set by the encoding loop above
    return CorpusSparse(path=entry, key=meta["key"], doc_ids=list(corpus.ids), vocab_size=int(vocab_size),
                        layout=layout, identity=meta["identity"], encoded_shards=claims.encoded,
                        encode_seconds=elapsed)
