"""BM25 with Lucene, through Pyserini/Anserini, with indexes cached on disk.

What gets indexed and how it is scored (the protocol; Pyserini's documents and scores):

* contents = ``title + " " + text`` (:meth:`Corpus.passages`), one Lucene field;
* the analyzer Anserini uses for the language (``en``: Porter stemming and Lucene's
  English stop words; ``zh``/``ko``: CJK bigrams; ``ja``: Kuromoji; ``sw``/``yo``/
  ``ha``/``so``: whitespace only, as in Anserini's MIRACL and CIRAL baselines ...);
* Lucene's BM25 (k1=0.9, b=0.4 by default), bag-of-words queries in which a term
  repeated in the query counts that many times (Anserini's BagOfWordsQueryGenerator).

Indexing goes through Pyserini's ``LuceneIndexer``.  Searching calls Lucene's
``IndexSearcher`` directly, from several Python threads, and moves the hits of a batch
of queries across the JVM bridge in bulk: Jackson (bundled with Anserini) turns the
batch's ``TopDocs`` into a tree inside the JVM and converts the tree's ``doc`` and
``score`` fields into one Java ``int[]`` and one ``float[]``, which pyjnius hands over
whole.  No Java object per hit ever reaches Python, and Python parses no text.

Score ties (``ties``, recorded in the protocol card as ``bm25_ties``):

* ``trec_eval`` (default): Lucene's float32 scores, kept exactly, so equal scores stay
  tied and the evaluation orders them by doc id *descending*, as trec_eval does.  When a
  tie straddles rank ``k``, the tied documents kept are those trec_eval ranks first (the
  highest doc ids), not the lowest Lucene doc numbers: Lucene numbers documents in the
  order a (multi-threaded) index build wrote them, so its choice differed between two
  builds of the same corpus.
* ``pyserini``: exactly what Pyserini's ``LuceneSearcher`` (Anserini's SimpleSearcher)
  returns and writes to its run files.  It sorts by exact score, then doc id
  *ascending* (which also decides which tied documents make the top ``k``), rounds each
  score to 4 decimals and lowers the j-th next score of a run of (nearly) equal rounded
  scores by j * 1e-6 (ScoreTiesAdjusterReranker), in float32.  Those steps materialise
  the ascending-id order in the scores themselves, so the evaluation (score desc, then
  doc id desc) ranks as Pyserini does; where float32 cannot hold a 1e-6 step (scores
  above about 16) Pyserini's own run file has the same exact ties, which trec_eval
  breaks by doc id descending, and so does the harness.  The run is therefore
  Pyserini's run, bit for bit, and every metric is what trec_eval gives on Pyserini's
  run file.  Measured nDCG@10 (MIRACL dev subsets te / ar): ``trec_eval`` 0.5465 /
  0.7928, ``pyserini`` 0.5426 / 0.7989; id, sw, yo, zh and BEIR SciFact (0.6789) agree.

Indexes are cached under ``index_dir`` (default ``$HARNESS_CACHE/bm25`` or
``~/.cache/retrieval-harness/bm25``), one folder per corpus content hash, analyzer,
indexing options and Lucene/Pyserini version.  A folder is built under a temporary
name and renamed when complete, so a cached index is always whole.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from harness.data.beir import Corpus, Queries
from harness.data.run import Run
from harness.errors import ConfigError, InputError
from harness.progress import bar_disabled
from harness.protocol import BM25_TIES, DEFAULT_BM25_TIES
from harness.retrieval.java import ensure_jvm, quiet_anserini_logging

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
CONTENTS = "title + ' ' + text"
META_FILE = "harness-bm25.json"
DOCIDS_FILE = "harness-docids.json"
INDEX_BATCH = 2000
# Hits moved across the JVM bridge at once (a batch of queries' TopDocs): large enough that the few Java calls
# per batch cost nothing, small enough that the batch's Jackson tree stays a few MB of Java heap.
SEARCH_BATCH_HITS = 1 << 16
SEARCH_BATCH_QUERIES = 64


@dataclass(frozen=True)
class Analyzer:
    """A language's Lucene analyzer, as Anserini builds it for indexing and search."""

    code: str
    name: str
    lucene_class: str
    index_args: tuple[str, ...]


def _table() -> dict[str, Analyzer]:
    lucene = "org.apache.lucene.analysis."
    # Anserini's AnalyzerMap: language code -> analyzer (indexed with "-language <code>").
    by_language = {
        "ar": ("Arabic", "ar.ArabicAnalyzer"), "bn": ("Bengali", "bn.BengaliAnalyzer"),
        "da": ("Danish", "da.DanishAnalyzer"), "de": ("German", "de.GermanAnalyzer"),
        "es": ("Spanish", "es.SpanishAnalyzer"), "fa": ("Persian", "fa.PersianAnalyzer"),
        "fi": ("Finnish", "fi.FinnishAnalyzer"), "fr": ("French", "fr.FrenchAnalyzer"),
        "hi": ("Hindi", "hi.HindiAnalyzer"), "hu": ("Hungarian", "hu.HungarianAnalyzer"),
        "id": ("Indonesian", "id.IndonesianAnalyzer"), "it": ("Italian", "it.ItalianAnalyzer"),
        "ja": ("Japanese", "ja.JapaneseAnalyzer"), "ko": ("Korean", "cjk.CJKAnalyzer"),
        "nl": ("Dutch", "nl.DutchAnalyzer"), "no": ("Norwegian", "no.NorwegianAnalyzer"),
        "pl": ("Polish", "morfologik.MorfologikAnalyzer"), "pt": ("Portuguese", "pt.PortugueseAnalyzer"),
        "ru": ("Russian", "ru.RussianAnalyzer"), "sv": ("Swedish", "sv.SwedishAnalyzer"),
        "te": ("Telugu", "te.TeluguAnalyzer"), "th": ("Thai", "th.ThaiAnalyzer"),
        "tr": ("Turkish", "tr.TurkishAnalyzer"), "uk": ("Ukrainian", "uk.UkrainianMorfologikAnalyzer"),
        "zh": ("Chinese", "cjk.CJKAnalyzer"),
    }
    table = {code: Analyzer(code, name, lucene + cls, ("-language", code)) for code, (name, cls) in by_language.items()}
    table["en"] = Analyzer("en", "English", "io.anserini.analysis.DefaultEnglishAnalyzer", ())
    # Anserini has no stemmer for these and splits on whitespace only (no lower-casing).
    for code, name in {"sw": "Swahili", "yo": "Yoruba", "ha": "Hausa", "so": "Somali"}.items():
        table[code] = Analyzer(code, name, lucene + "core.WhitespaceAnalyzer", ("-pretokenized",))
    return table


ANALYZERS: dict[str, Analyzer] = _table()
# Other spellings: names, region/script variants (MKQA's zh_cn, pt-BR ...), Bokmål/Nynorsk.
_ALIASES = {a.name.lower(): a.code for a in ANALYZERS.values()} | {"nb": "no", "nn": "no", "farsi": "fa"}


def resolve_language(language: str) -> Analyzer:
    """Map a language code (ISO 639-1 as in MIRACL, ``zh_cn``, ``pt-BR``, ``chinese`` ...) to its analyzer."""
    key = str(language).strip().lower().replace("_", "-")
    code = key.split("-")[0]
    code = _ALIASES.get(key, _ALIASES.get(code, code))
    if code not in ANALYZERS:
        raise ConfigError(f"BM25 has no analyzer for language {language!r}; supported: {', '.join(sorted(ANALYZERS))}")
    return ANALYZERS[code]


def default_cache_root() -> Path:
    """``$HARNESS_CACHE/bm25``, else ``~/.cache/retrieval-harness/bm25``."""
    base = os.environ.get("HARNESS_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "retrieval-harness") / "bm25"


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=1)
def _java() -> Any:
    """Start the JVM (once) and return the Java classes this module uses."""
    ensure_jvm()
    from types import SimpleNamespace

    from pyserini.pyclass import autoclass

    quiet_anserini_logging()
    java = SimpleNamespace(
        autoclass=autoclass,
        Paths=autoclass("java.nio.file.Paths"),
        FSDirectory=autoclass("org.apache.lucene.store.FSDirectory"),
        DirectoryReader=autoclass("org.apache.lucene.index.DirectoryReader"),
        IndexSearcher=autoclass("org.apache.lucene.search.IndexSearcher"),
        BM25Similarity=autoclass("org.apache.lucene.search.similarities.BM25Similarity"),
        LuceneVersion=autoclass("org.apache.lucene.util.Version"),
        AnalyzerMap=autoclass("io.anserini.analysis.AnalyzerMap"),
        AnalyzerUtils=autoclass("io.anserini.analysis.AnalyzerUtils"),
        EnglishAnalyzer=autoclass("io.anserini.analysis.DefaultEnglishAnalyzer"),
        WhitespaceAnalyzer=autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer"),
        BagOfWords=autoclass("io.anserini.search.query.BagOfWordsQueryGenerator"),
        IndexReaderUtils=autoclass("io.anserini.index.IndexReaderUtils"),
        ObjectMapper=autoclass("com.fasterxml.jackson.databind.ObjectMapper"),
        ScoreDoc=autoclass("org.apache.lucene.search.ScoreDoc"),
    )
    java.hits_mapper = _hits_mapper(java)
    java.end_of_query = java.ScoreDoc(-1, 0.0)  # see _hit_arrays
    # Lucene refuses Boolean queries with more than 1024 clauses; a long query (a whole
    # argument, as in ArguAna) can have more distinct terms.  Raise the limit instead of failing.
    java.IndexSearcher.setMaxClauseCount(max(java.IndexSearcher.getMaxClauseCount(), 1 << 16))
    return java


def _hits_mapper(java: Any) -> Any:
    """A Jackson ``ObjectMapper`` that leaves out the fields of ``TopDocs`` the search never reads.

    Configured here, once, before any use: a configured mapper is then safe to share between threads.
    """
    autoclass = java.autoclass
    ignore = autoclass("com.fasterxml.jackson.annotation.JsonIgnoreProperties$Value")
    mapper = java.ObjectMapper()
    for cls, field in (("org.apache.lucene.search.ScoreDoc", "shardIndex"),
                       ("org.apache.lucene.search.TopDocs", "totalHits")):
        names = autoclass("java.util.HashSet")()
        names.add(field)
        mapper.configOverride(autoclass(cls)).setIgnorals(ignore.forIgnoredProperties(names))
    java_class = autoclass("java.lang.Class")
    java.IntArray, java.FloatArray = java_class.forName("[I"), java_class.forName("[F")
    return mapper


def lucene_analyzer(analyzer: Analyzer) -> Any:
    """Build the Java analyzer, checking that it is the class Anserini indexes with."""
    java = _java()
    if analyzer.code == "en":
        obj = java.EnglishAnalyzer.newDefaultInstance()
    elif "-pretokenized" in analyzer.index_args:
        obj = java.WhitespaceAnalyzer()
    else:
        obj = java.AnalyzerMap.getLanguageSpecificAnalyzer(analyzer.code)
    actual = obj.getClass().getName() if obj is not None else None
    if actual != analyzer.lucene_class:
        raise ConfigError(f"Anserini's analyzer for {analyzer.code!r} is {actual}, expected {analyzer.lucene_class}; "
                          "the installed Pyserini differs from the one the harness was written for")
    if analyzer.code == "th":
        _check_thai_support(java, obj)
    return obj


def _check_thai_support(java: Any, obj: Any) -> None:
    from jnius import JavaException

    try:
        java.AnalyzerUtils.analyze(obj, "ภาษาไทย")
    except JavaException as exc:
        raise ConfigError("Thai BM25 needs a Java runtime with Thai word segmentation, which this one lacks "
                          f"({exc}); set JAVA_HOME to a full JDK 21+") from None


def analyze(text: str, language: str = "en") -> list[str]:
    """The tokens Lucene indexes for ``text`` under the language's analyzer."""
    java = _java()
    return [str(t) for t in java.AnalyzerUtils.analyze(lucene_analyzer(resolve_language(language)), text)]


def index_key(corpus: Corpus, analyzer: Analyzer) -> dict[str, Any]:
    """Everything that changes the index's contents or scores; its hash names the cache folder."""
    java = _java()
    return {
        "format": INDEX_FORMAT, "corpus_hash": corpus.content_hash(), "num_docs": len(corpus),
        "contents": CONTENTS, "language": analyzer.code, "analyzer": analyzer.lucene_class,
        "index_args": list(analyzer.index_args), "lucene": str(java.LuceneVersion.LATEST.toString()),
        "pyserini": metadata.version("pyserini"),
    }


class BM25Index:
    """A Lucene index of one corpus under one analyzer; use :meth:`build` to get one (cached)."""

    def __init__(self, path: str | Path, built_now: bool = False):
        self.path = Path(path)
        meta_path = self.path / META_FILE
        if not meta_path.is_file():
            raise InputError(self.path, f"not a harness BM25 index (no {META_FILE})")
        self.meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
        self.analyzer = resolve_language(self.meta["key"]["language"])
        self.built_now = built_now
        self._docids: np.ndarray | None = None
        self._docid_ranks: np.ndarray | None = None
        self._reader: Any = None

    @property
    def num_docs(self) -> int:
        return int(self.meta["indexed_docs"])

    @classmethod
    def build(cls, corpus: Corpus, language: str = "en", index_dir: str | Path | None = None,
              threads: int | None = None) -> BM25Index:
        """Return the cached index of ``corpus`` under ``language``, building it first if absent."""
        analyzer = resolve_language(language)
        lucene_analyzer(analyzer)  # fail early: unsupported analyzer or runtime
        key = index_key(corpus, analyzer)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        root = Path(index_dir) if index_dir is not None else default_cache_root()
        target = root / f"{analyzer.code}-{digest[:24]}"
        if (target / META_FILE).is_file():
            log.info("BM25: reusing index %s", target)
            return cls(target)
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=root))
        try:
            _write_index(corpus, analyzer, key, tmp, threads or default_threads())
            try:
                os.rename(tmp, target)
            except OSError:
                if not (target / META_FILE).is_file():
                    raise
                log.info("BM25: another process built %s first; using it", target)  # ours is discarded
                shutil.rmtree(tmp, ignore_errors=True)
                return cls(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(target, built_now=True)

    def docids(self) -> np.ndarray:
        """External document id of every Lucene doc number (recorded when the index was built)."""
        if self._docids is None:
            ids = json.loads((self.path / DOCIDS_FILE).read_text(encoding="utf-8"))
            self._docids = np.asarray(ids, dtype=str)
        return self._docids

    def docid_ranks(self) -> np.ndarray:
        """Each Lucene doc number's rank in the sorted external ids: sorting by it is sorting by doc id
        (ids are unique), with integer instead of string comparisons."""
        if self._docid_ranks is None:
            docids = self.docids()
            ranks = np.empty(len(docids), dtype=np.int64)
            ranks[np.argsort(docids, kind="stable")] = np.arange(len(docids))
            self._docid_ranks = ranks
        return self._docid_ranks

    def search(self, queries: Queries, k: int = 1000, k1: float = 0.9, b: float = 0.4,
               threads: int | None = None, ties: str = DEFAULT_BM25_TIES) -> Run:
        """Top-``k`` BM25 documents per query, as a :class:`Run` (queries with no hit have no rows).

        ``ties``: ``trec_eval`` (Lucene's exact scores) or ``pyserini`` (Pyserini's
        searcher, bit for bit); see the module docstring.
        """
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"k must be a positive integer, got {k!r}")
        if not (np.isfinite(k1) and k1 >= 0):
            raise ConfigError(f"BM25 k1 must be >= 0, got {k1!r}")
        if not (np.isfinite(b) and 0 <= b <= 1):
            raise ConfigError(f"BM25 b must be in [0, 1], got {b!r}")
        if ties not in BM25_TIES:
            raise ConfigError(f"BM25 ties must be one of {', '.join(BM25_TIES)}, got {ties!r}")
        java = _java()
        searcher = java.IndexSearcher(self._open_reader())
        searcher.setSimilarity(java.BM25Similarity(float(k1), float(b)))
        # Every document tied with the k-th is fetched, and the cut is made by doc id (not by Lucene's
        # index-build order, which is not reproducible across builds).
        hits = _parallel_search(searcher, lucene_analyzer(self.analyzer), queries.texts, int(k),
                                threads or default_threads(), cutoff_ties=True)
        docids, ranks = self.docids(), self.docid_ranks()
        cut = _pyserini_order if ties == "pyserini" else _trec_eval_cut
        hits = [cut(ranks, docs, scores, int(k)) for docs, scores in hits]
        counts = np.fromiter((len(d) for d, _ in hits), dtype=np.int64, count=len(hits))
        qids = np.repeat(np.asarray(queries.ids, dtype=str), counts)
        lucene_docs = np.concatenate([d for d, _ in hits]) if hits else np.zeros(0, np.int64)
        scores = np.concatenate([s for _, s in hits]) if hits else np.zeros(0, np.float64)
        if (empty := int((counts == 0).sum())):
            log.info("BM25: %d of %d queries matched no document", empty, len(counts))
        return Run.from_arrays(qids, docids[lucene_docs], scores, name="bm25")

    def _open_reader(self) -> Any:
        if self._reader is None:
            from jnius import cast

            java = _java()
            reader = java.DirectoryReader.open(java.FSDirectory.open(java.Paths.get(str(self.path))))
            # IndexSearcher has overloads for IndexReader and IndexReaderContext; pin the first.
            self._reader = cast("org.apache.lucene.index.IndexReader", reader)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _write_index(corpus: Corpus, analyzer: Analyzer, key: dict[str, Any], path: Path, threads: int) -> None:
    """Index the corpus into ``path`` (an empty folder) and record its metadata and doc-id map."""
    if len(set(corpus.ids)) != len(corpus.ids):
        raise InputError(corpus.source, "corpus has duplicate document ids")
    from pyserini.index.lucene import LuceneIndexer

    java = _java()
    start = time.perf_counter()
    log.info("BM25: indexing %d documents (%s analyzer, %d threads) into %s",
             len(corpus), analyzer.name, threads, path)
    indexer = LuceneIndexer(args=["-index", str(path), *analyzer.index_args], threads=threads)
    passages = corpus.passages()
    try:
        with tqdm(total=len(corpus), desc="BM25 index", unit="doc", disable=bar_disabled(), leave=False) as bar:
            for begin in range(0, len(corpus), INDEX_BATCH):
                end = min(begin + INDEX_BATCH, len(corpus))
                indexer.add_batch_raw([json.dumps({"id": corpus.ids[i], "contents": passages[i]}, ensure_ascii=False)
                                       for i in range(begin, end)])
                bar.update(end - begin)
    finally:
        indexer.close()
    reader = java.DirectoryReader.open(java.FSDirectory.open(java.Paths.get(str(path))))
    try:
        # Lucene numbers documents in its own order (threads, merges): record the map once.
        docids = [str(java.IndexReaderUtils.convertLuceneDocidToDocid(reader, i)) for i in range(reader.maxDoc())]
    finally:
        reader.close()
    if len(docids) < len(corpus):
        log.warning("BM25: %d documents had no indexable text and were skipped", len(corpus) - len(docids))
    seconds = time.perf_counter() - start
    (path / DOCIDS_FILE).write_text(json.dumps(docids, ensure_ascii=False), encoding="utf-8")
    meta = {"key": key, "indexed_docs": len(docids), "index_seconds": round(seconds, 3),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (path / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("BM25: indexed %d documents in %.1f s", len(docids), seconds)


def pyserini_scores(scores: np.ndarray) -> np.ndarray:
    """Anserini's ScoreTiesAdjusterReranker on one query's float32 scores, in Pyserini's order.

    Each score becomes ``(float) (Math.round(score * 10000.0) / 10000.0)``; when the previous
    (already adjusted) score exceeds it by no more than 1e-4, it is lowered by
    ``1e-6f * j`` for the j-th such score in a row.  All arithmetic as Java does it
    (double for the rounding, float32 for the rest); returns float32.
    """
    x = np.asarray(scores, dtype=np.float32).astype(np.float64) * 10000.0
    whole = np.floor(x)
    rounded = ((whole + (x - whole >= 0.5)) / 10000.0).astype(np.float32)  # Math.round: halves go up
    out = rounded.tolist()  # Python floats holding float32 values; re-rounded after each operation
    f32, step, gap = np.float32, np.float32(1e-6), np.float32(1e-4)
    run = 0
    for i in range(1, len(out)):
        if f32(out[i - 1]) - f32(out[i]) > gap:
            run = 0
        else:
            run += 1
            out[i] = float(f32(out[i]) - step * f32(run))
    return np.asarray(out, dtype=np.float32)


def _trec_eval_cut(ranks: np.ndarray, docs: np.ndarray, scores: np.ndarray,
                   k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query's top ``k`` with exact scores; of the documents tied at rank ``k``, those trec_eval ranks
    first (doc id descending).  ``docs`` holds every document tied with the k-th (Lucene order);
    ``ranks`` orders Lucene doc numbers as their doc ids sort (:meth:`BM25Index.docid_ranks`)."""
    if len(docs) <= k:
        return docs, scores
    if scores[k] != scores[k - 1]:  # no tie at rank k: Lucene's first k (Run.from_arrays sorts them)
        return docs[:k], scores[:k]
    order = np.lexsort((ranks[docs], -scores))[::-1]        # score ascending, doc id descending ...
    order = order[np.argsort(-scores[order], kind="stable")][:k]  # ... then score descending, stably
    return docs[order], scores[order]


def _pyserini_order(ranks: np.ndarray, docs: np.ndarray, scores: np.ndarray,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query's hits as Pyserini returns them: exact score desc, doc id asc, top ``k``, adjusted."""
    order = np.lexsort((ranks[docs], -scores))[:k]
    return docs[order], pyserini_scores(scores[order]).astype(np.float64)


# pyjnius binds a Java method to its object on the method's Python object, which all objects of the class share
# (pyjnius issues #287, #563): two threads calling one method on two objects of a class can each run it on the
# other's object.  The search threads call methods only on objects they share (the searcher, the query
# generator, the mapper), and hold this lock for every call on an object of their own.
_OWN_OBJECT_CALLS = threading.Lock()


def _hit_arrays(java: Any, tops: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hits of ``tops`` (Lucene ``TopDocs``) as numpy arrays, in bulk: ``(hits per query, Lucene doc
    numbers, float32 scores)``, the queries' hits one after another.

    Why in bulk: each Java object that crosses pyjnius costs a JNI call and a Python wrapper, and a
    field read costs another; the JSON string a query that replaced them took Python more time to
    parse than Lucene took to search (SciFact, top 1000).  Jackson builds the batch's tree inside the
    JVM and converts the ``doc`` and ``score`` fields (found in document order, so query by query and
    rank by rank) into one ``int[]`` and one ``float[]``; pyjnius returns a primitive array as one
    list, built in C.  float32 -> double ->
    float32 is exact, so the scores are Lucene's, bit for bit.  A hit with doc number -1 (no document
    has one) follows each query's hits and marks where they end.
    """
    mapper = java.hits_mapper
    tree = mapper.valueToTree([x for top in tops for x in (top, java.end_of_query)])
    with _OWN_OBJECT_CALLS:
        doc_nodes, score_nodes = tree.findValues("doc"), tree.findValues("score")
    docs = np.asarray(mapper.convertValue(doc_nodes, java.IntArray), dtype=np.int64)
    scores = np.asarray(mapper.convertValue(score_nodes, java.FloatArray), dtype=np.float32)
    ends = np.flatnonzero(docs < 0)
    if len(ends) != len(tops) or len(scores) != len(docs):
        raise RuntimeError(f"BM25: {len(ends)} end marks, {len(docs)} doc numbers and {len(scores)} scores came "
                           f"back for {len(tops)} queries")
    counts = np.diff(ends, prepend=-1) - 1
    hits = np.ones(len(docs), dtype=bool)
    hits[ends] = False
    return counts, docs[hits], scores[hits]


def _split(counts: np.ndarray, *arrays: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Per query, its slice of each of ``arrays`` (``counts`` rows each, one query after another)."""
    ends = np.cumsum(counts)
    return list(zip(*(np.split(a, ends[:-1]) for a in arrays))) if len(counts) else []


def _parallel_search(searcher: Any, analyzer: Any, texts: list[str], k: int,
                     threads: int, cutoff_ties: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Search every text with ``threads`` Python threads (the Java calls run concurrently).

    Each thread takes a batch of queries, searches them one by one (one Java call each) and moves the
    batch's hits across the bridge in bulk (:func:`_hit_arrays`).  With ``cutoff_ties``, a query's hits
    also include every document whose score equals the ``k``-th (Lucene keeps the lowest Lucene doc
    numbers among them; Pyserini the lowest doc ids): while a query's last hit is still tied with its
    k-th, the next page (as many hits again) is fetched after it (``searchAfter``: Lucene's order is
    score descending, then doc number ascending, so the pages join into its longer top list).
    """
    java = _java()
    generator = java.BagOfWords()
    # Past rank k, a few more hits than the tie at rank k usually runs on (on SciFact at k = 1000 it ran past
    # k in half the queries, never by more than 42 documents): one search per query instead of two.
    n = k + 1 + k // 16 + 16 if cutoff_ties else k
    # Four batches a thread at least, so that the threads finish together.
    batch_size = max(1, min(SEARCH_BATCH_QUERIES, SEARCH_BATCH_HITS // n, -(-len(texts) // (4 * max(1, threads)))))
    results: list[Any] = [None] * len(texts)
    next_batch = itertools.count(0, batch_size)
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    bar = tqdm(total=len(texts), desc="BM25 search", unit="q", disable=bar_disabled(), leave=False)

    def stopped() -> bool:
        return bool(errors) or stop.is_set()

    def still_tied(pages: list[tuple[np.ndarray, ...]], page_size: int) -> bool:
        """The last page is full and its last hit ties with the k-th: the tie may go on past it."""
        return cutoff_ties and len(pages[-1][0]) == page_size and pages[-1][1][-1] == pages[0][1][k - 1]

    def search_batch(begin: int, end: int) -> bool:
        queries, tops = [], []
        for text in texts[begin:end]:
            if stopped():
                return False
            queries.append(generator.buildQuery("contents", analyzer, text))
            tops.append(searcher.search(queries[-1], n))
        pages = [[page] for page in _split(*_hit_arrays(java, tops))]
        page_size = n
        while pending := [j for j, parts in enumerate(pages) if still_tied(parts, page_size)]:
            if stopped():
                return False
            page_size = sum(len(d) for d, _ in pages[pending[0]])  # as many again: the fetched hits double
            with _OWN_OBJECT_CALLS:  # a constructor, to be safe
                afters = [java.ScoreDoc(int(pages[j][-1][0][-1]), float(pages[j][-1][1][-1])) for j in pending]
            tops = [searcher.searchAfter(after, queries[j], page_size) for j, after in zip(pending, afters)]
            for j, page in zip(pending, _split(*_hit_arrays(java, tops))):
                pages[j].append(page)
        for j, parts in enumerate(pages):
            docs, scores = (np.concatenate(part) for part in zip(*parts)) if len(parts) > 1 else parts[0]
            results[begin + j] = (docs, scores.astype(np.float64))
        return True

    def work() -> None:
        import jnius

        try:
            while not stopped() and (begin := next(next_batch)) < len(texts):
                end = min(begin + batch_size, len(texts))
                if not search_batch(begin, end):
                    return
                with lock:
                    bar.update(end - begin)
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)
        finally:
            jnius.detach()  # a thread attached to the JVM must detach before it ends

    start = time.perf_counter()
    workers = [threading.Thread(target=work, name=f"bm25-search-{t}", daemon=True)
               for t in range(max(1, min(threads, -(-len(texts) // batch_size))))]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        # Interrupted (Ctrl-C lands in join): the others stop after their current query and are waited for,
        # so that no thread attached to the JVM is inside a Java call while the interpreter finalizes.
        stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.join()
        bar.close()
    if errors:
        raise errors[0]
    log.info("BM25: searched %d queries in %.2f s (%d threads)", len(texts), time.perf_counter() - start, len(workers))
    return results


def bm25_search(corpus: Corpus, queries: Queries, k: int = 1000, k1: float = 0.9, b: float = 0.4,
                language: str = "en", index_dir: str | Path | None = None, threads: int | None = None,
                ties: str = DEFAULT_BM25_TIES) -> Run:
    """Index ``corpus`` (cached under ``index_dir``) and return the top-``k`` BM25 run for ``queries``.

    ``index_dir`` is the cache root: one sub-folder per corpus hash, analyzer and
    indexing options (default :func:`default_cache_root`).  ``threads`` defaults to the
    CPUs available to this process.  ``ties``: ``trec_eval`` or ``pyserini`` (module docstring).
    """
    if ties not in BM25_TIES:  # before any indexing
        raise ConfigError(f"BM25 ties must be one of {', '.join(BM25_TIES)}, got {ties!r}")
    index = BM25Index.build(corpus, language=language, index_dir=index_dir, threads=threads)
    try:
        return index.search(queries, k=k, k1=k1, b=b, threads=threads, ties=ties)
    finally:
        index.close()


__all__ = ["ANALYZERS", "BM25_TIES", "Analyzer", "BM25Index", "analyze", "bm25_search", "default_cache_root",
           "index_key", "lucene_analyzer", "pyserini_scores", "resolve_language"]
