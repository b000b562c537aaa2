"""MKQA (Longpre et al., 2021) cross-lingual retrieval: Acc@10 and Acc@100 by answer containment.

Protocol (BGE-M3 / FlagEmbedding style)
    * queries in the 25 non-English MKQA languages (``MKQA_QUERY_LANGUAGES``: ar da de
      es fi fr he hu it ja km ko ms nl no pl pt ru sv th tr vi zh_cn zh_hk zh_tw) are
      searched in an English Wikipedia passage corpus;
    * a query is a hit at ``k`` when any of its top-``k`` passages contains any of its
      **English** answer strings or aliases (the corpus is English, so the English
      answers are the ones that can occur in it), after normalisation by
      :mod:`suites.answers` (``NORMALIZER_ID`` is recorded in the card);
    * queries whose English answer has no text (MKQA types ``unanswerable`` and
      ``long_answer``) cannot be scored by containment and are left out (counted in
      the metadata); every other query counts, a query missing from the run scores 0;
    * per-query values are stored as ``acc@10`` and ``acc@100``; nDCG@10 is reported
      alongside when the folder has relevance judgements;
    * BM25 uses the English analyzer (the corpus language).

Inputs
    * the release file ``mkqa.jsonl.gz`` (one example per line: ``example_id``,
      ``query``, ``queries`` {lang: text}, ``answers`` {lang: [{type, text, aliases}]})
      next to an English ``corpus.jsonl`` (BEIR layout; or BEIR's NQ corpus in ``nq/``,
      the corpus of BGE-M3's MKQA evaluation).  Query ids are
      ``<lang>-<example_id>``;
    * any BEIR-layout folder with ``answers.jsonl`` rows ``{"_id", "answers",
      "answers_en"?}``: the English answers ``answers_en`` are used when the file has
      them (English-corpus protocol), otherwise ``answers``; the field used is recorded
      in the card (``extra.answers_field``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.benchmark import LoadedBenchmark, RemoteFile, SuiteOption, register_suite
from harness.data.beir import BeirDataset, Queries, iter_jsonl, read_corpus, read_queries
from harness.errors import ConfigError, InputError
from harness.io.readers import json_id
from suites.answers import NORMALIZER_ID
from suites.benchmarks._common import (
    ANSWERS_FILE,
    BeirLayoutSuite,
    empty_qrels,
    find_optional,
    load_beir_folder,
    make_card,
    qrels_splits,
    read_answers,
    resolve_split,
    select_answers,
    with_options,
)
from suites.benchmarks.beir import BASE_URL as BEIR_BASE_URL
from suites.benchmarks.beir import ZIP_MD5 as BEIR_ZIP_MD5
from suites.groupings import MKQA_LANGUAGES, MKQA_QUERY_LANGUAGES

ACC_METRICS = ("acc@10", "acc@100")
RELEASE_URL = "https://github.com/apple/ml-mkqa/raw/main/dataset/mkqa.jsonl.gz"
RELEASE_NAMES = ("mkqa.jsonl.gz", "mkqa.jsonl", "test_mkqa.jsonl.gz")


@dataclass
class MkqaExample:
    """One MKQA row: queries per language and answer strings (text + aliases) per language."""

    example_id: str
    queries: dict[str, str]
    answers: dict[str, list[str]]
    answer_types: dict[str, list[str]]


def read_mkqa(path: str | Path) -> list[MkqaExample]:
    """Parse the MKQA release (``mkqa.jsonl.gz``), validating every row."""
    path = Path(path)
    rows: list[MkqaExample] = []
    seen: dict[str, int] = {}
    for line_no, obj in iter_jsonl(path):
        for key in ("example_id", "queries", "answers"):
            if key not in obj:
                raise InputError(path, f"missing field {key!r}", line_no)
        example_id = json_id(obj, "example_id", path, line_no, "example id")   # an integer in the release
        if example_id in seen:
            raise InputError(path, f"duplicate example_id {example_id} (first on line {seen[example_id]})", line_no)
        seen[example_id] = line_no
        queries, answers_obj = obj["queries"], obj["answers"]
        if not isinstance(queries, dict) or not isinstance(answers_obj, dict):
            raise InputError(path, "'queries' and 'answers' must be objects keyed by language", line_no)
        answers: dict[str, list[str]] = {}
        types: dict[str, list[str]] = {}
        for lang, items in answers_obj.items():
            if not isinstance(items, list):
                raise InputError(path, f"answers[{lang!r}] must be a list", line_no)
            strings: list[str] = []
            for item in items:
                if not isinstance(item, dict) or "type" not in item:
                    raise InputError(path, f"answers[{lang!r}] entries must be objects with a 'type'", line_no)
                types.setdefault(lang, []).append(str(item["type"]))
                if item.get("text"):
                    strings.append(str(item["text"]))
                strings.extend(str(a) for a in (item.get("aliases") or []) if a)
            answers[lang] = list(dict.fromkeys(strings))
        rows.append(MkqaExample(example_id, {k: str(v) for k, v in queries.items() if v is not None}, answers, types))
    if not rows:
        raise InputError(path, "no MKQA examples")
    return rows


def parse_languages(value: str | None, default: tuple[str, ...] = MKQA_QUERY_LANGUAGES) -> tuple[str, ...]:
    """``None``/``all`` -> the 25 query languages; ``"ja,th"`` -> those (validated)."""
    if not value or value == "all":
        return default
    langs = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [lang for lang in langs if lang not in MKQA_LANGUAGES]
    if bad:
        raise ConfigError(f"unknown MKQA language(s) {', '.join(bad)}; known: {', '.join(MKQA_LANGUAGES)}")
    return langs


def find_release(root: Path) -> Path | None:
    for name in RELEASE_NAMES:
        if (root / name).exists():
            return root / name
    return None


@register_suite("mkqa")
class MkqaSuite(BeirLayoutSuite):
    """MKQA-style cross-lingual retrieval scored by answer containment."""

    description = "MKQA: 25 query languages -> English passages; Acc@10/Acc@100 by answer containment"
    options = (SuiteOption("language", str, None, "query language (default: from the dataset or folder name)"),)

    def datasets(self) -> list[str]:
        return list(MKQA_QUERY_LANGUAGES)

    def remote_files(self, dataset: str | None, *, base_url: str | None = None,
                     with_corpus: bool = False) -> tuple[str, list[RemoteFile]]:
        """The release ``mkqa.jsonl.gz`` (apple/ml-mkqa); ``with_corpus`` adds BEIR's NQ corpus (the English
        Wikipedia passages, as BGE-M3's MKQA evaluation)."""
        url = f"{base_url.rstrip('/')}/mkqa.jsonl.gz" if base_url else RELEASE_URL
        files = [RemoteFile(url, "mkqa.jsonl.gz")]
        if with_corpus:
            base = (base_url or BEIR_BASE_URL).rstrip("/")
            files.append(RemoteFile(f"{base}/nq.zip", "nq", md5=BEIR_ZIP_MD5["nq"], unpack="zip", strip_top=True))
        return "mkqa", files

    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        root = Path(dataset_dir)
        if not root.is_dir():
            raise InputError(root, "dataset directory does not exist")
        language = options.pop("language", None)
        release = find_release(root)
        if release is not None:
            return self._load_release(root, release, language or dataset, options)
        return self._load_beir(root, dataset, split, language, options)

    def _load_release(self, root: Path, release: Path, language: str | None, options: dict) -> LoadedBenchmark:
        langs = parse_languages(language)
        corpus_file = find_optional(root, "corpus.jsonl") or find_optional(root / "nq", "corpus.jsonl")
        if corpus_file is None:
            raise InputError(root / "corpus.jsonl", "MKQA needs an English passage corpus (BEIR corpus.jsonl) "
                                                    "next to the release file, or BEIR's NQ in nq/ "
                                                    "(harness data download --suite mkqa --with-corpus)")
        corpus = read_corpus(corpus_file)
        examples = read_mkqa(release)
        ids, texts, answers = [], [], {}
        unanswerable = 0
        for ex in examples:
            english = ex.answers.get("en", [])
            for lang in langs:
                text = ex.queries.get(lang, "").strip()
                if not text:
                    raise InputError(release, f"example {ex.example_id} has no {lang!r} query")
                if not english:
                    unanswerable += 1
                    continue
                qid = f"{lang}-{ex.example_id}"
                ids.append(qid)
                texts.append(text)
                answers[qid] = english
        if not ids:
            raise InputError(release, "no MKQA example has an English short answer to score")
        ds = BeirDataset(corpus, Queries(ids, texts, source=str(release)), empty_qrels(), root, "test")
        meta = {"format": "mkqa-release", "queries_in_file": len(examples) * len(langs), "languages": list(langs),
                "unanswerable_dropped": unanswerable, "answer_lang": "en"}
        name = "mkqa" if langs == MKQA_QUERY_LANGUAGES else "mkqa-" + "+".join(langs)
        card = make_card("mkqa", name, "test", ds, metrics=ACC_METRICS, answers=answers, complete=True,
                         bm25_language="en", answer_normalizer=NORMALIZER_ID,
                         extra={"answers_field": "en", "languages": ",".join(langs), "corpus": "english"},
                         notes="MKQA cross-lingual protocol: English answers in an English corpus")
        return LoadedBenchmark(ds, with_options(card, options), answers, meta)

    def _load_beir(self, root: Path, dataset: str | None, split: str | None, language: str | None,
                   options: dict) -> LoadedBenchmark:
        answers_file = find_optional(root, ANSWERS_FILE)
        if answers_file is None:
            raise InputError(root / ANSWERS_FILE, "the MKQA protocol scores answer containment and needs "
                                                  "answers.jsonl (or the release mkqa.jsonl.gz)")
        rows = read_answers(answers_file)
        field = "answers_en" if any("answers_en" in r for r in rows.values()) else "answers"
        answers = select_answers(rows, field)
        answer_lang = "en" if field == "answers_en" else (language or "und")
        if qrels_splits(root):
            split = resolve_split(root, split, "test")
            ds, meta = load_beir_folder(root, split)
            metrics: tuple[str, ...] = ACC_METRICS + ("ndcg@10",)
        else:  # answers only: every query with answers is evaluated

            queries = read_queries(find_optional(root, "queries.jsonl") or root / "queries.jsonl")
            ds = BeirDataset(read_corpus(find_optional(root, "corpus.jsonl") or root / "corpus.jsonl"),
                             queries.subset(answers), empty_qrels(), root, split or "test")
            meta = {"format": "beir", "queries_in_file": len(queries)}
            metrics = ACC_METRICS
        known = set(ds.queries.ids)
        answers = {q: a for q, a in answers.items() if q in known}
        meta.update({"answers_field": field, "answer_lang": answer_lang,
                     "unanswerable_dropped": len(ds.queries) - len(answers)})
        langs = sorted({lang for q, r in rows.items() if q in answers and (lang := r.get("lang"))})
        if langs:
            meta["languages"] = langs
        name = dataset or root.name
        card = make_card("mkqa", name, ds.split, ds, metrics=metrics, answers=answers, complete=True,
                         bm25_language=language or "en", answer_normalizer=NORMALIZER_ID,
                         extra={"answers_field": field, "answer_lang": answer_lang},
                         notes="MKQA protocol on a BEIR-layout folder (answer containment)")
        return LoadedBenchmark(ds, with_options(card, options), answers, meta)
