"""Candidate pools for hard-negative mining: top-N documents per training query, positives removed.

Sources are dense encoders (faiss exact search over the cached corpus embeddings) and BM25
(Lucene); several sources are fused:

* ``"mean"`` (the default, METHODS.md 5.1): the parameter-free ensemble, the mean over models
  of their cosines.  It equals the inner product of the concatenated L2-normalised embeddings
  divided by M, so it is searched exactly, shard by shard, in that concatenated space; scores
  stay cosines in [-1, 1], so absolute thresholds keep their meaning.  Dense cosine models only.
* any fusion of the ``ranx`` library (``ranx.fuse``): ``"rrf"``, ``"combsum"`` (``sum`` of
  min-max normalised scores), ``"combmnz"``, or ``"ranx:<method>:<norm>"`` for the others.
  Each source retrieves ``depth`` + (most positives of a query) documents first.

Memory is bounded by the query chunk: queries are encoded and searched ``chunk_size`` at a time
and every chunk is stored on its own, so mining 100k queries holds one chunk of lists (plus one
corpus shard) at a time.  Pools are cached under ``<cache root>/candidates/<key>/`` where the key
hashes the sources' identities, the fusion, the depth and the corpus, queries and positives
contents (not paths); chunks are written atomically and a killed run computes only the chunks it
lacks.  The chunk layout is fixed when an entry is created.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.beir import Corpus, Queries
from harness.data.run import Run
from harness.encoders.base import Encoder
from harness.encoders.cache import CorpusEmbeddings, cache_root, encode_corpus
from harness.errors import ConfigError
from harness.io import atomic_write, atomic_write_json
from harness.keys import content_key
from harness.retrieval.dense import exact_search

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
DEFAULT_CHUNK = 2048
FUSIONS = {"mean": None, "rrf": ("rrf", None), "combsum": ("sum", "min-max"), "combmnz": ("mnz", "min-max")}


@dataclass(frozen=True)
class DenseSource:
    """A dense encoder scored by inner product (cosine when it normalises)."""

    encoder: Encoder
    name: str = "dense"

    def identity(self) -> dict[str, Any]:
        return {"kind": "dense", "encoder": self.encoder.identity()}


@dataclass(frozen=True)
class BM25Source:
    """Lucene BM25 with the language's analyzer (:mod:`harness.retrieval.bm25`)."""

    language: str = "en"
    k1: float = 0.9
    b: float = 0.4
    name: str = "bm25"

    def identity(self) -> dict[str, Any]:
        return {"kind": "bm25", "language": self.language, "k1": self.k1, "b": self.b}


Source = DenseSource | BM25Source


class HashGramEncoder(Encoder):
    """A lexical dense encoder without a model: character n-grams (any script, spaces or not) hashed
    into ``dim`` buckets, log-scaled counts, L2-normalised, so the inner product is a cosine of
    n-gram profiles.  A fast, deterministic candidate source for synthetic worlds and tests, where a
    neural model would cost minutes; alias ``hashgram`` (``hashgram:<n>:<dim>``)."""

    similarity = "cos"

    def __init__(self, n: int = 3, dim: int = 1024):
        if n < 1 or dim < 8:
            raise ConfigError(f"hashgram needs n >= 1 and dim >= 8, got n={n}, dim={dim}")
        self.n, self.dim = n, dim

    def identity(self) -> dict[str, Any]:
        return {"encoder": "hashgram", "n": self.n, "dim": self.dim, "version": 1}

    def _one(self, text: str) -> np.ndarray:
        padded = f" {' '.join(text.lower().split())} "
        grams = [padded[i:i + self.n] for i in range(max(1, len(padded) - self.n + 1))]
        buckets = np.fromiter((int.from_bytes(hashlib.blake2b(g.encode("utf-8"), digest_size=8).digest(), "little")
                               % self.dim for g in grams), dtype=np.int64, count=len(grams))
        v = np.log1p(np.bincount(buckets, minlength=self.dim).astype(np.float32))
        norm = float(np.linalg.norm(v))
        return v / norm if norm else v

    def encode_docs(self, texts: Sequence[str], *, batch_size: int | None = None,
                    progress: bool = True) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    encode_queries = encode_docs


def _hashgram(name: str) -> HashGramEncoder:
    parts = name.split(":")
    try:
        values = [int(p) for p in parts[1:]]
    except ValueError:
        raise ConfigError(f"hashgram spec must be hashgram[:<n>[:<dim>]], got {name!r}") from None
    if len(values) > 2:
        raise ConfigError(f"hashgram spec must be hashgram[:<n>[:<dim>]], got {name!r}")
    return HashGramEncoder(*values)


def named_sources(names: Sequence[str], language: str = "en") -> list[Source]:
    """Sources from model names: ``bm25`` (with the language's analyzer), ``hashgram[:<n>[:<dim>]]`` (a
    lexical n-gram encoder, :class:`HashGramEncoder`) or a dense model (alias, folder, hub id); a name
    given twice gets a distinct label (``name#i``)."""
    from harness.encoders.hf import load_encoder  # lazy (start-up speed): imports torch, tqdm

    sources: list[Source] = []
    for i, name in enumerate(names):
        label = name if list(names).index(name) == i else f"{name}#{i}"
        if name.lower() == "bm25":
            sources.append(BM25Source(language=language, name=label))
        elif name.split(":")[0] == "hashgram":
            sources.append(DenseSource(_hashgram(name), name=label))
        else:
            sources.append(DenseSource(load_encoder(name), name=label))
    return sources


@dataclass
class CandidateChunk:
    """The pools of one chunk of queries, flat: query i owns rows ``offsets[i]:offsets[i+1]``."""

    query_ids: np.ndarray          # (n,) str
    offsets: np.ndarray            # (n + 1,) int64
    doc_ids: np.ndarray            # (rows,) str, best first within a query
    scores: np.ndarray             # (rows,) float64, the fused score
    source_scores: np.ndarray      # (rows, sources) float64, NaN where a source did not retrieve it
    positives_removed: np.ndarray  # (n,) int64: positives found among the retrieved documents

    def pool(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.doc_ids[a:b], self.scores[a:b], self.source_scores[a:b]

    def save(self, path: Path) -> None:
        with atomic_write(path, "wb") as fh:
            np.savez(fh, query_ids=self.query_ids, offsets=self.offsets, doc_ids=self.doc_ids, scores=self.scores,
                     source_scores=self.source_scores, positives_removed=self.positives_removed)

    @classmethod
    def load(cls, path: Path) -> CandidateChunk:
        with np.load(path, allow_pickle=False) as z:
            return cls(**{k: z[k] for k in z.files})


def _fusion(name: str, sources: Sequence[Source]) -> tuple[str, str | None] | None:
    if name.startswith("ranx:"):
        parts = name.split(":")
        if len(parts) not in (2, 3) or not parts[1]:
            raise ConfigError(f"fusion {name!r}: expected ranx:<method> or ranx:<method>:<norm>")
        return parts[1], (parts[2] or None) if len(parts) == 3 else "min-max"
    if name not in FUSIONS:
        raise ConfigError(f"unknown fusion {name!r}; choose one of {', '.join(FUSIONS)} or ranx:<method>:<norm>")
    if name == "mean":
        bad = [s.name for s in sources if not isinstance(s, DenseSource) or s.encoder.similarity != "cos"]
        if bad:
            raise ConfigError(f"fusion 'mean' averages cosines; source(s) {', '.join(bad)} do not score by cosine "
                              "(use rrf or combsum)")
    return FUSIONS[name]


def _positives_digest(query_ids: Sequence[str], positives: Mapping[str, Sequence[str]]) -> str:
    h = hashlib.sha256()
    for q in query_ids:
        h.update(json.dumps([q, sorted(positives.get(q, ()))], ensure_ascii=False).encode())
    return h.hexdigest()


def _gather(emb: CorpusEmbeddings, rows: np.ndarray) -> np.ndarray:
    """The vectors of corpus rows ``rows`` (any order), read shard by shard."""
    out = np.zeros((len(rows), emb.dim), dtype=np.float32)
    for start, shard in emb.shards():
        hit = (rows >= start) & (rows < start + len(shard))
        if hit.any():
            out[hit] = shard[rows[hit] - start]
    return out


class _Concatenated:
    """Several models' corpus embeddings as one matrix of concatenated rows scaled by 1/M, read in
    blocks (what :func:`exact_search` iterates), so the mean cosine is one inner product."""

    def __init__(self, parts: Sequence[CorpusEmbeddings], block: int):
        self.parts, self.block = list(parts), block
        self.num_docs = parts[0].num_docs
        self.dim = sum(p.dim for p in parts)

    @staticmethod
    def _rows(emb: CorpusEmbeddings, a: int, b: int) -> np.ndarray:
        out = []
        for start, shard in emb.shards():
            lo, hi = max(a, start), min(b, start + len(shard))
            if lo < hi:
                out.append(np.asarray(shard[lo - start:hi - start], dtype=np.float32))
        return np.concatenate(out) if len(out) > 1 else out[0]

    def shards(self) -> Iterator[tuple[int, np.ndarray]]:
        scale = np.float32(1.0 / len(self.parts))
        for a in range(0, self.num_docs, self.block):
            b = min(a + self.block, self.num_docs)
            yield a, np.ascontiguousarray(np.hstack([self._rows(p, a, b) for p in self.parts]) * scale)


class CandidatePool:
    """Top-``depth`` candidates per query from ``sources`` (fused), positives removed, cached in chunks."""

    def __init__(self, sources: Sequence[Source], corpus: Corpus, *, depth: int = 40, fusion: str = "mean",
                 cache_dir: str | Path | None = None, chunk_size: int = DEFAULT_CHUNK, batch_size: int | None = None,
                 progress: bool = False):
        if not sources:
            raise ConfigError("a candidate pool needs at least one source")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ConfigError(f"candidate sources need distinct names, got {names}")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ConfigError(f"depth must be a positive integer, got {depth!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.sources, self.corpus, self.depth = list(sources), corpus, depth
        # One source needs no fusion (the name is still checked); several are fused by mean cosine
        # (``self.fusion`` None) or by a ranx (method, norm).
        checked = _fusion(fusion, self.sources if len(sources) > 1 else [])
        self.fusion_name = fusion if len(sources) > 1 else None
        self.fusion = checked if len(sources) > 1 else None
        self.root = cache_root(cache_dir)
        self.chunk_size, self.batch_size, self.progress = chunk_size, batch_size, progress
        self._embeddings: list[CorpusEmbeddings] | None = None
        self._bm25: dict[str, Any] = {}
        self._rows_by_text: dict[str, int] | None = None
        self._queries: tuple[str, list[np.ndarray]] | None = None     # the last chunk's query vectors

    # ------------------------------------------------------------------ identity and cache
    def config(self) -> dict[str, Any]:
        """What the pool depends on besides the queries and positives (recorded in provenance)."""
        return {"sources": {s.name: s.identity() for s in self.sources}, "fusion": self.fusion_name,
                "depth": self.depth}

    def key(self, queries: Queries, positives: Mapping[str, Sequence[str]]) -> str:
        return content_key({"format": FORMAT_VERSION, **self.config(), "corpus": self.corpus.content_hash(),
                            "queries": queries.content_hash(), "positives": _positives_digest(queries.ids, positives)})

    def chunks(self, queries: Queries, positives: Mapping[str, Sequence[str]]) -> Iterator[CandidateChunk]:
        """Yield the pools chunk by chunk, from the cache where present (computing and storing the rest)."""
        entry = self.root / "candidates" / self.key(queries, positives)
        meta_path = entry / "meta.json"
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else None
        if meta is None or meta.get("num_queries") != len(queries):
            n = len(queries)
            meta = {"format": FORMAT_VERSION, **self.config(), "num_queries": n, "chunk_size": self.chunk_size,
                    "chunks": [[a, min(a + self.chunk_size, n)] for a in range(0, n, self.chunk_size)]}
            atomic_write_json(meta_path, meta)
        for i, (a, b) in enumerate(meta["chunks"]):
            path = entry / f"chunk-{i:05d}.npz"
            if path.is_file():
                yield CandidateChunk.load(path)
                continue
            chunk = self.compute(Queries(queries.ids[a:b], queries.texts[a:b]), positives)
            chunk.save(path)
            yield chunk

    @property
    def scores_are_cosines(self) -> bool:
        """True when pool scores are (mean) cosines, which positive-relative and absolute thresholds need."""
        return self.fusion is None and all(isinstance(s, DenseSource) and s.encoder.similarity == "cos"
                                           for s in self.sources)

    def pair_scores(self, queries: Queries, passages: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """The pool's score of each query with each of its own passages (its positives): the mean over
        the dense sources of their cosines, so they compare with the candidates' scores."""
        if not self.scores_are_cosines:
            raise ConfigError("scoring positives needs cosine scores: dense sources with fusion 'mean' "
                              f"(got sources {[s.name for s in self.sources]}, fusion {self.fusion_name!r})")
        flat = [p for ps in passages for p in ps]
        owner = np.repeat(np.arange(len(passages)), [len(ps) for ps in passages])
        total = np.zeros(len(flat), dtype=np.float64)
        # Passages of the corpus (the usual case: a positive is a corpus document) are read from the
        # cached corpus embeddings; only the others are encoded.
        if self._rows_by_text is None:
            self._rows_by_text = {}
            for row, text in enumerate(self.corpus.passages()):
                self._rows_by_text.setdefault(text.strip(), row)
        rows = np.array([self._rows_by_text.get(p.strip(), -1) for p in flat], dtype=np.int64)
        known = rows >= 0
        for source, emb in zip(self.sources, self._dense_embeddings()):
            assert isinstance(source, DenseSource)
            q = self._query_vectors(source, queries)
            d = np.zeros((len(flat), emb.dim), dtype=np.float32)
            if known.any():
                d[known] = _gather(emb, rows[known])
            if (~known).any():
                d[~known] = np.asarray(source.encoder.encode_docs([p for p, k in zip(flat, known) if not k],
                                                                  batch_size=self.batch_size, progress=self.progress),
                                       dtype=np.float32)
            total += np.einsum("nd,nd->n", q[owner], d).astype(np.float64)
        total /= len(self.sources)
        bounds = np.cumsum([0] + [len(ps) for ps in passages])
        return [total[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    # ------------------------------------------------------------------ retrieval
    def compute(self, queries: Queries, positives: Mapping[str, Sequence[str]]) -> CandidateChunk:
        """The pools of ``queries`` (no cache)."""
        extra = max((len(positives.get(q, ())) for q in queries.ids), default=0)
        k = min(self.depth + extra, len(self.corpus))
        if len(self.sources) == 1:
            fused = self._search(self.sources[0], queries, k)
            runs = [fused]
        elif self.fusion is None:                     # dense sources, mean of cosines
            fused, runs = self._mean_cosine(queries, k)
        else:
            runs = [self._search(s, queries, k) for s in self.sources]
            found = [r for r in runs if len(r)]      # a source that matched nothing adds nothing
            if not found:
                log.warning("no source retrieved any document for %d queries", len(queries))
            fused = self._ranx_fuse(found) if len(found) > 1 else found[0] if found else runs[0]
        return self._assemble(queries, fused, runs, positives)

    def _dense_embeddings(self) -> list[CorpusEmbeddings]:
        if self._embeddings is None:
            self._embeddings = [encode_corpus(s.encoder, self.corpus, self.root, batch_size=self.batch_size,
                                              progress=self.progress)
                                for s in self.sources if isinstance(s, DenseSource)]
        return self._embeddings

    def _query_vectors(self, source: DenseSource, queries: Queries) -> np.ndarray:
        """The source's query vectors (the last chunk's are kept: pair_scores follows compute)."""
        index = self.sources.index(source)
        digest = hashlib.sha256(json.dumps(list(queries.texts), ensure_ascii=False).encode()).hexdigest()
        if self._queries is None or self._queries[0] != digest:
            self._queries = (digest, [np.zeros(0)] * len(self.sources))
        vectors = self._queries[1]
        if vectors[index].size == 0 and len(queries.texts):
            vectors[index] = np.asarray(source.encoder.encode_queries(queries.texts, batch_size=self.batch_size,
                                                                      progress=self.progress), dtype=np.float32)
        return vectors[index] if len(queries.texts) else np.zeros((0, 0), dtype=np.float32)

    def _mean_cosine(self, queries: Queries, k: int) -> tuple[Run, list[Run]]:
        """The exact top-k by mean cosine, and each model's own cosine of those pairs (provenance)."""
        parts = self._dense_embeddings()
        space = _Concatenated(parts, block=parts[0].layout[0][1])
        qv = [self._query_vectors(s, queries) for s in self.sources if isinstance(s, DenseSource)]
        scores, rows = exact_search(space, np.hstack(qv), k)  # type: ignore[arg-type]  # duck-typed embeddings
        fused = self._to_run(queries, scores, rows, parts[0].doc_ids, "mean")
        found = np.where(rows >= 0, rows, 0)
        own = []
        for source, emb, q in zip(self.sources, parts, qv):
            docs = _gather(emb, found.reshape(-1)).reshape(*found.shape, -1)
            cos = np.einsum("qkd,qd->qk", docs, q).astype(np.float64)
            own.append(self._to_run(queries, cos, rows, emb.doc_ids, source.name))
        return fused, own

    def _search(self, source: Source, queries: Queries, k: int) -> Run:
        if isinstance(source, DenseSource):
            emb = encode_corpus(source.encoder, self.corpus, self.root, batch_size=self.batch_size,
                                progress=self.progress)
            scores, rows = exact_search(emb, self._query_vectors(source, queries), k)
            return self._to_run(queries, scores, rows, emb.doc_ids, source.name)
        from harness.retrieval.bm25 import BM25Index  # starts the JVM: only when BM25 is asked for

        index = self._bm25.get(source.name)
        if index is None:
            index = self._bm25[source.name] = BM25Index.build(self.corpus, language=source.language,
                                                              index_dir=self.root / "bm25")
        run = index.search(queries, k=k, k1=source.k1, b=source.b)
        return Run(run.query_ids, run.doc_ids, run.scores, source.name)

    @staticmethod
    def _to_run(queries: Queries, scores: np.ndarray, rows: np.ndarray, doc_ids: Sequence[str], name: str) -> Run:
        found = rows >= 0
        qids = np.repeat(np.asarray(queries.ids, dtype=str), found.sum(axis=1))
        dids = np.asarray(doc_ids, dtype=str)[rows[found]]
        return Run.from_arrays(qids, dids, scores[found].astype(np.float64), name=name, check_duplicates=False)

    def _ranx_fuse(self, runs: list[Run]) -> Run:
        import ranx  # numba-compiled; imported only for rank/score fusions

        assert self.fusion is not None
        method, norm = self.fusion
        # ranx fuses runs over the same queries only: a query some source matched nothing for (BM25
        # on a query of stop words) is fused over the sources that found it, and a query one source
        # alone found keeps that source's list (ranx needs two runs).
        dicts = [r.to_dict() for r in runs]
        groups: dict[tuple[int, ...], list[str]] = {}
        for q in dict.fromkeys(q for d in dicts for q in d):
            groups.setdefault(tuple(i for i, d in enumerate(dicts) if d.get(q)), []).append(q)
        out: dict[str, dict[str, float]] = {}
        for members, qids in groups.items():
            if len(members) == 1:
                out.update({q: dicts[members[0]][q] for q in qids})
                continue
            ranx_runs = [ranx.Run({q: dicts[i][q] for q in qids}, name=runs[i].name) for i in members]
            try:
                fused = ranx.fuse(ranx_runs, norm=norm, method=method)
            except (ValueError, KeyError, NotImplementedError) as exc:
                raise ConfigError(f"ranx fusion {method!r} (norm {norm!r}) failed: {exc}") from None
            out.update(fused.to_dict())
        return Run.from_dict(out, name=self.fusion_name or "fusion")

    def _assemble(self, queries: Queries, fused: Run, runs: list[Run],
                  positives: Mapping[str, Sequence[str]]) -> CandidateChunk:
        per_source = [r.to_dict() for r in runs]
        fused_lists = {q: (d, s) for q, d, s in fused.groups()}
        offsets, dids, scores, src, removed = [0], [], [], [], []
        for q in queries.ids:
            d, s = fused_lists.get(q, (np.zeros(0, dtype=str), np.zeros(0)))
            pos = set(positives.get(q, ()))
            keep = np.fromiter((x not in pos for x in d), dtype=bool, count=len(d))
            removed.append(int((~keep).sum()))
            d, s = d[keep][:self.depth], s[keep][:self.depth]
            dids.append(d)
            scores.append(s)
            src.append(np.array([[r.get(q, {}).get(x, np.nan) for r in per_source] for x in d],
                                dtype=np.float64).reshape(len(d), len(runs)))
            offsets.append(offsets[-1] + len(d))
        m = len(self.sources)
        return CandidateChunk(np.asarray(queries.ids, dtype=str), np.asarray(offsets, dtype=np.int64),
                              np.concatenate(dids).astype(str) if dids else np.zeros(0, dtype=str),
                              np.concatenate(scores).astype(np.float64) if scores else np.zeros(0),
                              np.concatenate(src) if src else np.zeros((0, m)), np.asarray(removed, dtype=np.int64))

