"""C-MTEB retrieval (8 tasks, nDCG@10) and reranking (4 tasks, MAP) with mteb's task definitions.

The protocol of each task comes from ``mteb`` itself (``mteb.get_task(name)``): its
evaluation split, main score, whether query == document ids are ignored
(``ignore_identical_ids``: True for T2, MMarco, Ecom, Medical and Video retrieval),
its instruction prompt (kept in the metadata; the card's prompts stay empty unless
set, so each model uses its own) and its hub dataset and revision (for downloads).

Data is read from local files, because the hub is often unreachable:

* the mteb hub layout (parquet): ``corpus/<split>-*.parquet`` (id, title, text),
  ``queries/<split>-*.parquet`` (id, text), qrels in ``data/`` or ``default/``
  (query-id, corpus-id, score) and, for reranking, ``top_ranked/<split>-*.parquet``
  (query-id, corpus-ids);
* or a BEIR-layout folder, with ``top_ranked.jsonl`` rows ``{"query-id", "corpus-ids"}``
  for reranking.  A folder that is not one of the 12 tasks (e.g. CMRC 2018 recast as
  retrieval) is evaluated under the generic C-MTEB retrieval protocol (nDCG@10,
  Chinese BM25 analyzer, no query == doc exclusion).

Reranking: each query's candidates (``top_ranked``) are scored and ranked, and MAP is
trec_eval ``map_cut.1000`` over that candidate ranking averaged over queries with
judgements, which is exactly mteb's ``map_at_1000`` (mteb scores the candidates with
the model and evaluates them with pytrec_eval ``map_cut.1000``).  :func:`evaluate`
restricts any run to the candidates; a candidate missing from the run counts as not
retrieved, so use :func:`score_candidates` (all candidates scored) for exact numbers.
:func:`local_mteb_task` returns the mteb task object itself, loaded from local files,
for running mteb's own evaluation offline.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.benchmark import LoadedBenchmark, RemoteFile, SuiteOption, register_suite
from harness.data.beir import BeirDataset, Corpus, Queries, check_qrels_ids, iter_jsonl
from harness.data.qrels import Qrels
from harness.data.run import Run
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.io.readers import INT64_MAX, INT64_MIN, check_id, json_id
from harness.retrieval.candidates import score_candidates  # noqa: F401 - part of this suite's API
from suites.benchmarks._common import (
    BeirLayoutSuite,
    evaluate_loaded,
    find_optional,
    load_beir_folder,
    make_card,
    resolve_split,
    with_options,
)
from suites.groupings import CMTEB_RERANKING, CMTEB_RETRIEVAL

RETRIEVAL_METRICS = ("ndcg@10", "recall@100")
RERANKING_METRICS = ("map@1000", "mrr@10")
TASK_ALIASES = {"CMedQAv1": "CMedQAv1-reranking", "CMedQAv2": "CMedQAv2-reranking"}


def task_name(name: str) -> str | None:
    """Canonical C-MTEB task name, or None when ``name`` is not one of the 12 tasks."""
    lookup = {t.lower(): t for t in CMTEB_RETRIEVAL + CMTEB_RERANKING}
    lookup.update({k.lower(): v for k, v in TASK_ALIASES.items()})
    return lookup.get(name.strip().lower())


@cache
def _mteb() -> Any:
    """The ``mteb`` package, which defines the C-MTEB tasks: an optional extra (with polars it adds about
    265 MB that no other benchmark family needs)."""
    try:
        import mteb
    except ImportError as exc:
        if exc.name != "mteb":
            raise                       # installed but broken: its own error
        raise ConfigError("C-MTEB tasks are defined by the package mteb, an optional extra: "
                          "pip install 'retrieval-harness[cmteb]' (or bash scripts/setup.sh --dev)") from None
    return mteb


def task_definition(name: str) -> dict[str, Any]:
    """The protocol facts of a C-MTEB task, read from mteb's task metadata."""
    canonical = task_name(name)
    if canonical is None:
        raise ConfigError(f"{name!r} is not a C-MTEB retrieval/reranking task: "
                          f"{', '.join(CMTEB_RETRIEVAL + CMTEB_RERANKING)}")
    mteb = _mteb()

    task = mteb.get_task(canonical)
    meta = task.metadata
    prompt = meta.prompt.get("query", "") if isinstance(meta.prompt, dict) else (meta.prompt or "")
    return {"name": canonical, "kind": "reranking" if canonical in CMTEB_RERANKING else "retrieval",
            "split": meta.eval_splits[0], "main_score": meta.main_score,
            "exclude_self": bool(getattr(type(task), "ignore_identical_ids", False)), "prompt": prompt,
            "hf_path": meta.dataset["path"], "revision": meta.dataset["revision"]}


# --------------------------------------------------------------------------- mteb hub layout (parquet)
def _parquet_files(root: Path, configs: tuple[str, ...], split: str) -> list[Path]:
    for config in configs:
        folder = root / config
        if folder.is_dir():
            files = sorted(folder.glob("*.parquet"))
            chosen = [f for f in files if f.name.startswith(f"{split}-") or f.name.startswith(f"{split}.")]
            return chosen or files
    return []


def _read_parquet(files: list[Path]) -> dict[str, list]:
    import pyarrow.parquet as pq

    columns: dict[str, list] = {}
    for f in files:
        try:
            table = pq.read_table(f).to_pydict()
        except (OSError, ValueError) as exc:       # pyarrow's ArrowInvalid is a ValueError
            raise InputError(f, f"not a readable parquet file ({type(exc).__name__}: {exc})") from None
        for key, values in table.items():
            columns.setdefault(key, []).extend(values)
    return columns


def _column(table: Mapping[str, list], names: tuple[str, ...], path: Path, required: bool = True) -> list:
    for n in names:
        if n in table:
            return table[n]
    if required:
        raise InputError(path, f"parquet file lacks column {' or '.join(names)} (has {', '.join(table)})")
    return []


def _ids(values: list, path: Path, what: str) -> list[str]:
    """Parquet id cells as strings: str kept, int converted exactly; anything else refused."""
    out = []
    for row, value in enumerate(values, start=1):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InputError(path, f"{what} in row {row} must be a string or an integer, got {value!r}")
        out.append(check_id(str(value), path, None, f"{what} in row {row}"))
    return out


def _labels(values: list, path: Path) -> list[int]:
    """Relevance cells: integers (or integral floats); NaN, None, 2.5 and strings are refused."""
    out = []
    for row, value in enumerate(values, start=1):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not INT64_MIN <= value <= INT64_MAX:
            raise InputError(path, f"score in row {row} must be an integer label, got {value!r}")
        out.append(value)
    return out


def is_hub_layout(root: Path) -> bool:
    return (root / "corpus").is_dir() and any((root / "corpus").glob("*.parquet"))


def load_hub_layout(root: Path, split: str) -> tuple[BeirDataset, dict[str, list[str]] | None, int]:
    """Read the mteb parquet layout; returns (dataset, candidates or None, queries in file)."""
    paths = {kind: _parquet_files(root, configs, split) for kind, configs in
             (("corpus", ("corpus",)), ("queries", ("queries", "query")), ("qrels", ("data", "default", "qrels")),
              ("top_ranked", ("top_ranked",)))}
    for kind in ("corpus", "queries", "qrels"):
        if not paths[kind]:
            raise InputError(root / kind, f"no {kind} parquet files for split {split!r}")
    c = _read_parquet(paths["corpus"])
    ids = _ids(_column(c, ("id", "_id"), paths["corpus"][0]), paths["corpus"][0], "document id")
    texts = _column(c, ("text",), paths["corpus"][0])
    titles = _column(c, ("title",), paths["corpus"][0], required=False) or [""] * len(ids)
    corpus = Corpus(ids, [t or "" for t in titles], [t or "" for t in texts], source=str(root / "corpus"))
    q = _read_parquet(paths["queries"])
    queries = Queries(_ids(_column(q, ("id", "_id"), paths["queries"][0]), paths["queries"][0], "query id"),
                      _column(q, ("text",), paths["queries"][0]), source=str(root / "queries"))
    r = _read_parquet(paths["qrels"])
    qrels_file = paths["qrels"][0]
    qrels = Qrels.from_arrays(_ids(_column(r, ("query-id",), qrels_file), qrels_file, "query-id"),
                              _ids(_column(r, ("corpus-id",), qrels_file), qrels_file, "corpus-id"),
                              _labels(_column(r, ("score",), qrels_file), qrels_file), source=str(qrels_file))
    check_qrels_ids(qrels, queries.ids, corpus.ids, paths["qrels"][0])
    candidates = None
    if paths["top_ranked"]:
        t = _read_parquet(paths["top_ranked"])
        top_file = paths["top_ranked"][0]
        qids = _ids(_column(t, ("query-id",), top_file), top_file, "query-id")
        lists = _column(t, ("corpus-ids",), top_file)
        candidates = {qid: _ids(list(docs or []), top_file, f"corpus-ids of query {qid!r}")
                      for qid, docs in zip(qids, lists)}
    judged = set(qrels.query_list())
    return BeirDataset(corpus, queries.subset(judged), qrels, root, split), candidates, len(queries)


def read_top_ranked(path: Path) -> dict[str, list[str]]:
    """Read ``top_ranked.jsonl`` rows ``{"query-id": ..., "corpus-ids": [...]}``."""
    out: dict[str, list[str]] = {}
    for line_no, obj in iter_jsonl(path):
        docs = obj.get("corpus-ids")
        if "query-id" not in obj or not isinstance(docs, list) or not docs:
            raise InputError(path, "expected {'query-id': ..., 'corpus-ids': [non-empty list]}", line_no)
        qid = json_id(obj, "query-id", path, line_no, "query id")
        if qid in out:
            raise InputError(path, f"duplicate candidates for query {qid!r}", line_no)
        out[qid] = [json_id({"corpus-ids": d}, "corpus-ids", path, line_no, "document id") for d in docs]
    return out


# --------------------------------------------------------------------------- reranking
def restrict_to_candidates(run: Run, candidates: Mapping[str, list[str]]) -> Run:
    """Keep only (query, document) rows where the document is one of the query's candidates."""
    allowed = {(q, d) for q, docs in candidates.items() for d in docs}
    keep = np.fromiter(((q, d) in allowed for q, d in zip(run.query_ids.tolist(), run.doc_ids.tolist())),
                       dtype=bool, count=len(run))
    return Run(run.query_ids[keep], run.doc_ids[keep], run.scores[keep], run.name, run.source)


# --------------------------------------------------------------------------- mteb adapter
def local_mteb_task(name: str, dataset_dir: str | Path, split: str | None = None):
    """The mteb task object for ``name`` whose ``load_data`` reads local files (no hub access)."""
    mteb = _mteb()
    from datasets import Dataset

    definition = task_definition(name)
    loaded = CmtebSuite().load(dataset_dir, dataset=definition["name"], split=split)
    base = type(mteb.get_task(definition["name"]))
    ds = loaded.dataset
    candidates = loaded.meta.get("candidates")
    split_name = ds.split

    class LocalTask(base):  # type: ignore[misc, valid-type]
        def load_data(self, num_proc=None, **kwargs):  # noqa: ARG002 - mteb's signature
            self.dataset = {"default": {split_name: {
                "corpus": Dataset.from_dict({"id": ds.corpus.ids, "title": ds.corpus.titles, "text": ds.corpus.texts}),
                "queries": Dataset.from_dict({"id": ds.queries.ids, "text": ds.queries.texts}),
                "relevant_docs": ds.qrels.to_dict(),
                "top_ranked": {q: list(docs) for q, docs in candidates.items()} if candidates else None,
            }}}
            self.data_loaded = True

    LocalTask.__name__ = f"Local{base.__name__}"
    return LocalTask()


@register_suite("cmteb")
class CmtebSuite(BeirLayoutSuite):
    """C-MTEB retrieval and reranking tasks (and Chinese BEIR-layout folders)."""

    description = "C-MTEB: 8 retrieval tasks (nDCG@10) and 4 reranking tasks (MAP), mteb task definitions"
    options = (SuiteOption("language", str, "zh", "language of the BM25 analyzer"),)
    answer_lang = "zh"

    def datasets(self) -> list[str]:
        return list(CMTEB_RETRIEVAL + CMTEB_RERANKING)

    def remote_files(self, dataset: str | None, *, base_url: str | None = None,
                     with_corpus: bool = False) -> tuple[str, list[RemoteFile]]:
        """The task's mteb hub dataset at mteb's pinned revision (parquet files)."""
        if not dataset:
            raise ConfigError("pick a C-MTEB task with --dataset (e.g. T2Retrieval)")
        d = task_definition(task_definition(dataset)["name"])
        base = (base_url or "https://huggingface.co/datasets").rstrip("/")
        root = f"{base}/{d['hf_path']}/resolve/{d['revision']}"
        configs = ["corpus", "queries", "data"] + (["top_ranked"] if d["kind"] == "reranking" else [])
        return d["name"], [RemoteFile(f"{root}/{c}/{d['split']}-00000-of-00001.parquet",
                                      f"{c}/{d['split']}-00000-of-00001.parquet") for c in configs]

    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        root = Path(dataset_dir)
        if not root.is_dir():
            raise InputError(root, "dataset directory does not exist")
        language = options.pop("language", None) or "zh"
        name = task_name(dataset or root.name)
        definition = task_definition(name) if name else None
        protocol_split = definition["split"] if definition else "dev"
        candidates = None
        if is_hub_layout(root):
            split = split or protocol_split
            ds, candidates, in_file = load_hub_layout(root, split)
            meta: dict[str, Any] = {"format": "mteb-parquet", "queries_in_file": in_file}
        else:
            split = resolve_split(root, split, protocol_split)
            ds, meta = load_beir_folder(root, split)
            top_file = find_optional(root, "top_ranked.jsonl")
            candidates = read_top_ranked(top_file) if top_file else None
        kind = definition["kind"] if definition else ("reranking" if candidates else "retrieval")
        if kind == "reranking" and not candidates:
            raise InputError(root, f"{name} is a reranking task and needs candidate lists (top_ranked)")
        extra: dict[str, Any] = {"task_type": kind}
        if definition:
            extra.update({"mteb_task": definition["name"], "mteb_revision": definition["revision"]})
            meta["task_prompt"] = definition["prompt"]
        if candidates:
            unknown = sorted({d for docs in candidates.values() for d in docs} - set(ds.corpus.ids))
            if unknown:
                raise InputError(root, f"candidate lists name {len(unknown)} unknown document(s), e.g. {unknown[0]!r}")
            meta["candidates"] = candidates
            extra["candidates"] = sum(len(v) for v in candidates.values())
        meta["answer_lang"] = language
        card = make_card("cmteb", definition["name"] if definition else (dataset or root.name), split, ds,
                         metrics=RERANKING_METRICS if kind == "reranking" else RETRIEVAL_METRICS,
                         exclude_self=bool(definition and definition["exclude_self"]), bm25_language=language,
                         extra=extra, notes="C-MTEB protocol (mteb task definition)" if definition
                         else "generic C-MTEB retrieval protocol on a BEIR-layout folder")
        return LoadedBenchmark(ds, with_options(card, options), None, meta)

    def evaluate(self, loaded: LoadedBenchmark, run: Run) -> EvaluationResult:
        candidates = loaded.meta.get("candidates")
        if candidates:
            run = restrict_to_candidates(run, candidates)
        result = evaluate_loaded(loaded, run, answer_lang=loaded.meta.get("answer_lang", "zh"))
        if candidates:
            total = sum(len(v) for v in candidates.values())
            result.options["candidates_scored_fraction"] = round(len(run) / total, 6) if total else 0.0
        return result
