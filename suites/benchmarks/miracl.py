"""MIRACL (Zhang et al., 2023): monolingual retrieval in 18 languages, dev split.

Protocol
    * one dataset per language; queries and judgements are the release's dev
      topics/qrels; the corpus is that language's Wikipedia passages with ids
      ``<wikiid>#<n>``;
    * nDCG@10 and Recall@100 (trec_eval definitions, relevance threshold 1), with
      ``trec_eval -c`` averaging (every judged query counts; one the run misses
      scores 0) as in Pyserini's MIRACL evaluation;
    * BM25 with the language's own analyzer (``bm25_language`` = the language code);
    * per-language numbers, averaged with :func:`suites.groupings.macro_average` over
      ``MIRACL_LANGUAGES`` (18) or ``MIRACL_WITH_TRAINING`` (16: all but de and yo).

Release layout read here (as on the hub, or flattened as in ``../shared/data/miracl``)::

    [miracl-v1.0-<lang>/]topics/topics.miracl-v1.0-<lang>-dev.tsv    qid<TAB>query
    [miracl-v1.0-<lang>/]qrels/qrels.miracl-v1.0-<lang>-dev.tsv      qid Q0 docid rel
    miracl-corpus-v1.0-<lang>/docs-<n>.jsonl[.gz]                    {"docid","title","text"}

A BEIR-layout folder (e.g. ``miracl-dev-subset/te``) loads too; its language comes
from ``--language`` or the folder name.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.benchmark import LoadedBenchmark, RemoteFile, SuiteOption, register_suite
from harness.data.beir import BeirDataset, Corpus, Queries, check_qrels_ids, iter_jsonl
from harness.data.qrels import Qrels, read_qrels
from harness.errors import ConfigError, InputError
from harness.io.readers import check_id, iter_input_lines
from suites.benchmarks._common import (
    BeirLayoutSuite,
    find_optional,
    load_beir_folder,
    make_card,
    resolve_split,
    with_options,
)
from suites.groupings import MIRACL_LANGUAGES

DOCID = re.compile(r"\d+#\d+", re.ASCII)      # used with fullmatch: no trailing newline, ASCII digits
METRICS = ("ndcg@10", "recall@100")
PROTOCOL_SPLIT = "dev"
HF_BASE_URL = "https://huggingface.co/datasets/miracl"
# Corpus shards per language on the hub (miracl/miracl-corpus); de and yo are probed.
CORPUS_SHARDS = {"ar": 5, "bn": 1, "en": 66, "es": 21, "fa": 5, "fi": 4, "fr": 30, "hi": 2, "id": 3, "ja": 14,
                 "ko": 3, "ru": 20, "sw": 1, "te": 2, "th": 2, "zh": 10}


def check_language(lang: str | None, where: str = "") -> str:
    if not lang or lang not in MIRACL_LANGUAGES:
        raise ConfigError(f"MIRACL language {lang!r}{where} is not one of {', '.join(MIRACL_LANGUAGES)}; "
                          "pass --language")
    return lang


def release_file(root: Path, lang: str, kind: str, split: str) -> Path:
    """``topics``/``qrels`` file of the release, flat or under ``miracl-v1.0-<lang>/``."""
    name = f"{kind}.miracl-v1.0-{lang}-{split}.tsv"
    for base in (root, root / f"miracl-v1.0-{lang}"):
        for candidate in (base / kind / name, base / kind / f"{name}.gz"):
            if candidate.exists():
                return candidate
    raise InputError(root / kind / name, f"MIRACL {kind} file for language {lang!r}, split {split!r} not found")


def read_topics(path: str | Path) -> Queries:
    """Read a MIRACL topics file (``qid<TAB>query`` per line)."""
    path = Path(path)
    ids: list[str] = []
    texts: list[str] = []
    first: dict[str, int] = {}
    for line_no, line in iter_input_lines(path, "topics file"):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 2:
            raise InputError(path, f"expected 2 tab-separated columns (qid, query), got {len(cols)}", line_no)
        qid, text = cols[0].strip(), cols[1].strip()
        if not qid or not text:
            raise InputError(path, "empty query id or text", line_no)
        check_id(qid, path, line_no, "query id")
        if qid in first:
            raise InputError(path, f"duplicate query id {qid!r} (first on line {first[qid]})", line_no)
        first[qid] = line_no
        ids.append(qid)
        texts.append(text)
    if not ids:
        raise InputError(path, "no topics")
    return Queries(ids, texts, source=str(path))


def read_release_qrels(path: str | Path) -> Qrels:
    """Read MIRACL TREC qrels, checking that every document id is ``<wikiid>#<n>``."""
    path = Path(path)
    for line_no, raw in iter_input_lines(path, "qrels file"):
        cols = raw.split()
        if len(cols) == 4 and not DOCID.fullmatch(cols[2]):
            raise InputError(path, f"document id {cols[2]!r} is not a MIRACL passage id '<wikiid>#<n>'", line_no)
    return read_qrels(path, fmt="trec")


def read_release_corpus(paths: list[Path]) -> Corpus:
    """Read MIRACL corpus shards (jsonl rows ``{"docid", "title", "text"}``)."""
    ids: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    seen: set[str] = set()
    for path in paths:
        for line_no, obj in iter_jsonl(path):
            docid = obj.get("docid")
            if not isinstance(docid, str) or not DOCID.fullmatch(docid):
                raise InputError(path, f"missing or malformed 'docid' {docid!r} (expected '<wikiid>#<n>')", line_no)
            text = obj.get("text")
            if not isinstance(text, str):
                raise InputError(path, "missing field 'text'", line_no)
            title = obj.get("title") or ""
            if not isinstance(title, str):
                raise InputError(path, f"field 'title' must be a string, got {type(title).__name__}", line_no)
            if docid in seen:
                raise InputError(path, f"duplicate document id {docid!r}", line_no)
            seen.add(docid)
            ids.append(docid)
            titles.append(title)
            texts.append(text)
    if not ids:
        raise InputError(paths[0] if paths else "<corpus>", "MIRACL corpus contains no passages")
    return Corpus(ids, titles, texts, source=",".join(str(p) for p in paths))


def corpus_shards(root: Path, lang: str) -> list[Path]:
    folder = root / f"miracl-corpus-v1.0-{lang}"
    if not folder.is_dir():
        return []
    shards = [p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz"))]
    return sorted(shards, key=lambda p: _shard_number(p.name))


def _shard_number(name: str) -> tuple[int, str]:
    match = re.search(r"(\d+)\.jsonl", name)
    return (int(match.group(1)) if match else -1, name)


def load_release_topics(root: str | Path, lang: str, split: str = PROTOCOL_SPLIT) -> tuple[Queries, Qrels]:
    """Topics and qrels of one language from the release files (no corpus needed)."""
    root = Path(root)
    check_language(lang)
    queries = read_topics(release_file(root, lang, "topics", split))
    qrels = read_release_qrels(release_file(root, lang, "qrels", split))
    unknown = sorted(set(qrels.query_list()) - set(queries.ids))
    if unknown:
        raise InputError(qrels.source, f"qrels name {len(unknown)} query id(s) missing from the topics, "
                                       f"e.g. {unknown[0]!r}")
    return queries, qrels


def is_release_dir(root: Path) -> bool:
    return (root / "topics").is_dir() or any(root.glob("miracl-v1.0-*"))


@register_suite("miracl")
class MiraclSuite(BeirLayoutSuite):
    """MIRACL per language, from the release files or a BEIR-layout folder."""

    description = "MIRACL: 18 languages, dev split, nDCG@10 and Recall@100 (trec_eval -c), BM25 per language"
    options = (SuiteOption("language", str, None, "language code (default: from the dataset or folder name)"),
               SuiteOption("require_corpus", bool, True, "refuse release topics without the passage corpus"))
    stats_options = {"require_corpus": False}   # counting queries and judgements needs no corpus

    def datasets(self) -> list[str]:
        return list(MIRACL_LANGUAGES)

    def remote_files(self, dataset: str | None, *, base_url: str | None = None,
                     with_corpus: bool = False) -> tuple[str, list[RemoteFile]]:
        """``<base>/miracl/resolve/main/miracl-v1.0-<lang>/{topics,qrels}/...`` and with ``with_corpus``
        ``<base>/miracl-corpus/resolve/main/miracl-corpus-v1.0-<lang>/docs-<n>.jsonl.gz``."""
        if not dataset:
            raise ConfigError("pick a MIRACL language with --dataset (e.g. te)")
        lang = dataset
        check_language(lang)
        base = (base_url or HF_BASE_URL).rstrip("/")
        files = [RemoteFile(f"{base}/miracl/resolve/main/miracl-v1.0-{lang}/{kind}/{kind}.miracl-v1.0-{lang}-dev.tsv",
                            f"{kind}/{kind}.miracl-v1.0-{lang}-dev.tsv") for kind in ("topics", "qrels")]
        if with_corpus:
            known = CORPUS_SHARDS.get(lang)
            count = known if known is not None else 1000
            for i in range(count):
                files.append(RemoteFile(
                    f"{base}/miracl-corpus/resolve/main/miracl-corpus-v1.0-{lang}/docs-{i}.jsonl.gz",
                    f"miracl-corpus-v1.0-{lang}/docs-{i}.jsonl.gz", probe=known is None and i > 0))
        return dataset, files

    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        root = Path(dataset_dir)
        if not root.is_dir():
            raise InputError(root, "dataset directory does not exist")
        lang = options.pop("language", None) or _language_from_name(dataset)
        require_corpus = options.pop("require_corpus", True)
        if find_optional(root, "corpus.jsonl"):
            lang = check_language(lang or _language_from_name(root.name), f" (folder {root.name!r})")
            split = resolve_split(root, split, PROTOCOL_SPLIT)
            ds, meta = load_beir_folder(root, split)
            source = "beir-folder"
        elif is_release_dir(root):
            lang = check_language(lang)
            split = split or PROTOCOL_SPLIT
            queries, qrels = load_release_topics(root, lang, split)
            shards = corpus_shards(root, lang)
            meta = {"queries_in_file": len(queries), "format": "miracl-release"}
            if shards:
                corpus = read_release_corpus(shards)
                assert qrels.source is not None   # read from the release's qrels file
                check_qrels_ids(qrels, queries.ids, corpus.ids, qrels.source)
            elif require_corpus:
                raise InputError(root / f"miracl-corpus-v1.0-{lang}",
                                 "MIRACL corpus not found (download it with: harness data download --suite miracl "
                                 f"--dataset {lang} --with-corpus)")
            else:  # topics and qrels only (statistics of the release files)
                corpus = Corpus([], [], [], source=None)
                meta["corpus_missing"] = True
            judged = set(qrels.query_list())
            ds = BeirDataset(corpus, queries.subset(judged), qrels, root, split)
            source = "release"
        else:
            raise InputError(root, "neither a BEIR-layout folder (corpus.jsonl) nor a MIRACL release folder (topics/)")
        meta["language"] = lang
        card = make_card("miracl", f"miracl-{lang}", split, ds, metrics=METRICS, complete=True, bm25_language=lang,
                         extra={"language": lang, "source": source},
                         notes="MIRACL protocol; full-corpus numbers need the release corpus")
        return LoadedBenchmark(ds, with_options(card, options), None, meta)


def _language_from_name(name: str | None) -> str | None:
    if not name:
        return None
    name = name.lower().removeprefix("miracl-").removeprefix("miracl/")
    return name if name in MIRACL_LANGUAGES else None
