"""DuReader-Retrieval (Qiu et al., 2022): dev queries, MRR@10, Recall@1, Recall@50.

Metrics as the official ``metric/evaluation.py`` of the DuReader-Retrieval baseline
defines them: MRR@10 is the reciprocal rank of the first positive within the top 10;
"recall@k" is the fraction of queries with **at least one** positive in the top k
(a hit rate, not trec_eval's recall), i.e. trec_eval ``success@k``.  Both are
averaged over all dev queries (a query without results scores 0: ``complete``).
The card therefore lists ``mrr@10``, ``success@1``, ``success@50``; tables may label
the last two "Recall@1" and "Recall@50" as the paper does.

Two gallery protocols (``--gallery``):

``full``
    the whole passage collection (about 8.09M passages for the official dev set).
``sub200k``
    paper 002 (PEG, Table 3): "we have randomly selected a subset of 200,000
    documents from the original gallery".  Here: every passage judged positive for a
    dev query, plus passages drawn uniformly without replacement (``numpy``
    ``default_rng(seed)``) from the rest until the gallery holds ``gallery_size``
    passages (all of them when the collection is smaller), kept in corpus order.
    Seed and size are recorded in the card's ``extra``; results of the two
    protocols (or of different seeds) are never compared.  The paper's own subset
    was not released: this gallery is re-sampled, and the card's notes say so.

Inputs: the original release (``dev/dev.json``: one JSON object per line with
``question_id``, ``question`` and ``answer_paragraphs`` [{``paragraph_id``,
``paragraph_text``}]; passages in ``corpus.jsonl`` (BEIR rows) or the baseline's
``passage-collection/part-0*`` files (tab-separated, passage text in the third
column, global line number -> id via ``passage2id.map.json``)), or any BEIR-layout
folder (e.g. WebQA recast as retrieval).  BM25 uses the Chinese analyzer.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.benchmark import LoadedBenchmark, RemoteFile, SuiteOption, register_suite
from harness.data.beir import BeirDataset, Corpus, Queries, iter_jsonl, read_corpus
from harness.data.qrels import Qrels
from harness.errors import ConfigError, InputError
from harness.io.readers import check_id, iter_input_lines, json_id, read_input_text
from suites.benchmarks._common import (
    BeirLayoutSuite,
    find_optional,
    load_beir_folder,
    make_card,
    resolve_split,
    with_options,
)

METRICS = ("mrr@10", "success@1", "success@50")
GALLERIES = ("full", "sub200k")
DEFAULT_GALLERY_SIZE = 200_000
DEFAULT_SEED = 42


def read_dev_json(path: str | Path) -> tuple[Queries, Qrels, dict[str, str]]:
    """Read ``dev.json``: queries, qrels (answer paragraphs, relevance 1) and positive passage texts."""
    path = Path(path)
    ids: list[str] = []
    texts: list[str] = []
    qs: list[str] = []
    ds: list[str] = []
    positives: dict[str, str] = {}
    seen: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for line_no, obj in iter_jsonl(path):
        qid = json_id(obj, "question_id", path, line_no, "question id")
        question, paras = obj.get("question"), obj.get("answer_paragraphs")
        if not isinstance(question, str) or not question.strip():
            raise InputError(path, "expected non-empty 'question_id' and 'question'", line_no)
        if not isinstance(paras, list):
            raise InputError(path, "'answer_paragraphs' must be a list", line_no)
        if qid in seen:
            raise InputError(path, f"duplicate question_id {qid!r}", line_no)
        seen.add(qid)
        ids.append(qid)
        texts.append(question)
        for para in paras:
            if not isinstance(para, dict) or "paragraph_id" not in para:
                raise InputError(path, "answer paragraph without 'paragraph_id'", line_no)
            pid = json_id(para, "paragraph_id", path, line_no, "paragraph id")
            if (qid, pid) not in pairs:
                pairs.add((qid, pid))
                qs.append(qid)
                ds.append(pid)
            text = para.get("paragraph_text")
            if text is not None and not isinstance(text, str):
                raise InputError(path, f"'paragraph_text' must be a string, got {type(text).__name__}", line_no)
            if text:
                positives.setdefault(pid, text)
    if not ids:
        raise InputError(path, "no dev questions")
    return Queries(ids, texts, source=str(path)), Qrels.from_arrays(qs, ds, [1] * len(qs), source=str(path)), positives


def read_passage_collection(folder: str | Path) -> Corpus:
    """Read the baseline's ``part-0*`` files with ``passage2id.map.json`` (line number -> passage id)."""
    folder = Path(folder)
    map_file = folder / "passage2id.map.json"
    if not map_file.exists():
        raise InputError(map_file, "passage id map not found")
    try:
        id_map = json.loads(read_input_text(map_file, "passage id map"))
    except json.JSONDecodeError as exc:
        raise InputError(map_file, f"malformed JSON ({exc.msg} at column {exc.colno})", exc.lineno) from None
    except (RecursionError, ValueError) as exc:
        raise InputError(map_file, f"malformed JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(id_map, dict):
        raise InputError(map_file, f"expected a JSON object (row number -> passage id), got {type(id_map).__name__}")
    ids: list[str] = []
    texts: list[str] = []
    row = 0
    parts = sorted(p for p in folder.iterdir() if p.name.startswith("part-"))
    if not parts:
        raise InputError(folder, "no passage-collection part-* files")
    for part in parts:
        for line_no, line in iter_input_lines(part, "passage collection file"):
            cols = line.split("\t")
            if len(cols) < 3:
                raise InputError(part, f"expected at least 3 tab-separated columns, got {len(cols)}", line_no)
            pid = id_map.get(str(row))
            if pid is None:
                raise InputError(map_file, f"no passage id for collection row {row} ({part.name}:{line_no})")
            if isinstance(pid, bool) or not isinstance(pid, (str, int)):
                raise InputError(map_file, f"passage id of row {row} must be a string or an integer, got {pid!r}")
            ids.append(check_id(str(pid), map_file, None, f"passage id of row {row}"))
            texts.append(cols[2])
            row += 1
    return Corpus(ids, [""] * len(ids), texts, source=str(folder))


def sub_gallery(corpus: Corpus, qrels: Qrels, size: int, seed: int) -> Corpus:
    """All judged positives plus uniformly drawn other passages, ``size`` in total, in corpus order."""
    if size <= 0:
        raise ConfigError(f"gallery size must be positive, got {size}")
    positive = set(qrels.doc_ids[qrels.relevance >= 1].tolist())
    is_pos = np.fromiter((d in positive for d in corpus.ids), dtype=bool, count=len(corpus))
    if is_pos.sum() > size:
        raise ConfigError(f"gallery size {size} is smaller than the {int(is_pos.sum())} judged positives")
    others = np.flatnonzero(~is_pos)
    n_draw = min(size - int(is_pos.sum()), len(others))
    drawn = np.random.default_rng(seed).choice(others, size=n_draw, replace=False) if n_draw else np.zeros(0, int)
    keep = np.sort(np.concatenate([np.flatnonzero(is_pos), drawn]))
    return Corpus([corpus.ids[i] for i in keep], [corpus.titles[i] for i in keep], [corpus.texts[i] for i in keep],
                  corpus.source)


@register_suite("dureader")
class DuReaderSuite(BeirLayoutSuite):
    """DuReader-Retrieval dev (full gallery or paper 002's 200k sub-gallery), and BEIR-layout folders."""

    description = "DuReader-Retrieval: dev, MRR@10, Recall@1/@50 (hit rate); full or 200k sub-gallery"
    options = (SuiteOption("gallery", str, "full", "full gallery or paper 002's sampled sub-gallery",
                           choices=GALLERIES),
               SuiteOption("gallery_size", int, DEFAULT_GALLERY_SIZE, "passages in the sub-gallery"),
               SuiteOption("seed", int, DEFAULT_SEED, "seed of the sub-gallery sample"),
               SuiteOption("language", str, "zh", "language of the BM25 analyzer"))
    answer_lang = "zh"

    def datasets(self) -> list[str]:
        return ["dureader-retrieval"]

    def remote_files(self, dataset: str | None, *, base_url: str | None = None,
                     with_corpus: bool = False) -> tuple[str, list[RemoteFile]]:
        """The DuReader-Retrieval baseline dataset archive (Baidu CDN)."""
        base = (base_url or "https://dataset-bj.cdn.bcebos.com/qianyan").rstrip("/")
        return "dureader-retrieval", [RemoteFile(f"{base}/dureader-retrieval-baseline-dataset.tar.gz", ".",
                                                 unpack="tar", strip_top=True)]

    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        root = Path(dataset_dir)
        if not root.is_dir():
            raise InputError(root, "dataset directory does not exist")
        gallery = options.pop("gallery", None) or "full"
        if gallery not in GALLERIES:
            raise ConfigError(f"unknown gallery {gallery!r}; choose {', '.join(GALLERIES)}")
        size = int(options.pop("gallery_size", None) or DEFAULT_GALLERY_SIZE)
        seed = options.pop("seed", None)
        seed = DEFAULT_SEED if seed is None else int(seed)
        language = options.pop("language", None) or "zh"
        dev_file = find_optional(root / "dev", "dev.json")
        if dev_file is not None:
            queries, qrels, _ = read_dev_json(dev_file)
            corpus_file = find_optional(root, "corpus.jsonl")
            if corpus_file is not None:
                corpus = read_corpus(corpus_file)
            elif (root / "passage-collection").is_dir():
                corpus = read_passage_collection(root / "passage-collection")
            else:
                raise InputError(root, "no passages: expected corpus.jsonl or passage-collection/")
            split, meta = "dev", {"format": "dureader-release", "queries_in_file": len(queries)}
            ds = BeirDataset(corpus, queries.subset(set(qrels.query_list())), qrels, root, split)
            name = dataset or "dureader-retrieval"
        else:
            split = resolve_split(root, split, "dev")
            ds, meta = load_beir_folder(root, split)
            name = dataset or root.name
        meta["full_gallery_size"] = len(ds.corpus)
        extra: dict[str, Any] = {"gallery": gallery}
        if gallery == "sub200k":
            ds = BeirDataset(sub_gallery(ds.corpus, ds.qrels, size, seed), ds.queries, ds.qrels, ds.path, ds.split)
            extra.update({"gallery_seed": seed, "gallery_size": size})
        meta["gallery_size"] = len(ds.corpus)
        meta["answer_lang"] = language
        notes = "DuReader-Retrieval protocol; success@k is the official recall@k"
        if gallery == "sub200k":
            notes += (f"; re-sampled {size:,}-passage gallery (every judged passage plus uniform draws, seed {seed}): "
                      "paper 002's own random subset is not public, so this is not the gallery of its Table 3")
        card = make_card("dureader", name, split, ds, metrics=METRICS, complete=True, bm25_language=language,
                         extra=extra, notes=notes)
        return LoadedBenchmark(ds, with_options(card, options), None, meta)
