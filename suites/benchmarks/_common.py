"""Shared pieces of the benchmark suites: BEIR-layout loading, answers files, data hashes,
dataset statistics, and scoring a run under a protocol card.

Every suite can read any local BEIR-layout folder (``corpus.jsonl``, ``queries.jsonl``,
``qrels/<split>.tsv``, optional ``answers.jsonl``); the split is found automatically
when the folder has exactly one qrels file, otherwise the protocol's split is used.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.benchmark import CARD_OPTIONS, BenchmarkSuite, LoadedBenchmark, data_hash
from harness.data.beir import BeirDataset, iter_jsonl, load_beir
from harness.data.qrels import Qrels
from harness.data.run import Run
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.io.readers import json_id
from harness.metrics import METRICS, parse_metric
from harness.metrics import evaluate as trec_evaluate
from harness.protocol import ProtocolCard
from suites.answers import NORMALIZER_ID, AnswerMatcher, accuracy_at_k

ANSWERS_FILE = "answers.jsonl"
log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- splits and files
def qrels_splits(directory: str | Path) -> list[str]:
    """Split names of the qrels files in ``directory/qrels`` (``test.tsv`` -> ``test``)."""
    qdir = Path(directory) / "qrels"
    if not qdir.is_dir():
        return []
    names = []
    for path in sorted(qdir.iterdir()):
        name = path.name
        if name.endswith(".gz"):
            name = name[:-3]
        if name.endswith(".tsv"):
            names.append(name[:-4])
    return names


def resolve_split(directory: str | Path, requested: str | None, protocol_split: str) -> str:
    """The split to load: the requested one, else the only qrels file, else the protocol's split."""
    available = qrels_splits(directory)
    if requested:
        split = requested
    elif len(available) == 1:
        split = available[0]
        if split != protocol_split:     # said, not silent: the card's split records it too
            log.warning("%s: no qrels for the protocol's split %r; evaluating split %r, the only qrels file "
                        "(pass --split to choose)", Path(directory) / "qrels", protocol_split, split)
    else:
        split = protocol_split
    if available and split not in available:
        raise InputError(Path(directory) / "qrels", f"no qrels for split {split!r}; available: {', '.join(available)}")
    return split


def count_jsonl_rows(path: str | Path) -> int:
    return sum(1 for _ in iter_jsonl(path))


def find_optional(directory: Path, stem: str) -> Path | None:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    return None


def load_beir_folder(directory: str | Path, split: str) -> tuple[BeirDataset, dict[str, Any]]:
    """Load a BEIR-layout folder and count the queries of ``queries.jsonl`` (judged or not)."""
    directory = Path(directory)
    dataset = load_beir(directory, split=split)
    queries_file = find_optional(directory, "queries.jsonl")
    meta = {"queries_in_file": count_jsonl_rows(queries_file) if queries_file else len(dataset.queries),
            "format": "beir"}
    return dataset, meta


# --------------------------------------------------------------------------- answers
def read_answers(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read ``answers.jsonl`` rows ``{"_id", "answers": [...], "answers_en"?: [...], "lang"?}``.

    Returns ``{query id: row}`` with the answer lists validated (lists of strings).
    """
    path = Path(path)
    rows: dict[str, dict[str, Any]] = {}
    for line_no, obj in iter_jsonl(path):
        qid = json_id(obj, "_id", path, line_no, "query id")
        if qid in rows:
            raise InputError(path, f"duplicate answers for query {qid!r}", line_no)
        if "answers" not in obj:
            raise InputError(path, "missing field 'answers'", line_no)
        for key in ("answers", "answers_en"):
            if key in obj and obj[key] is not None:
                value = obj[key]
                if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                    raise InputError(path, f"field {key!r} must be a list of strings", line_no)
        rows[qid] = obj
    if not rows:
        raise InputError(path, "answers file is empty")
    return rows


def select_answers(rows: Mapping[str, Mapping[str, Any]], field: str) -> dict[str, list[str]]:
    """``{query id: answers}`` from one field; queries without a non-empty list are left out."""
    out = {}
    for qid, row in rows.items():
        values = row.get(field) or []
        values = [a for a in values if a.strip()]
        if values:
            out[qid] = values
    return out


# --------------------------------------------------------------------------- hashes and cards
def make_card(suite: str, dataset_name: str, split: str, dataset: BeirDataset, *, metrics: Sequence[str],
              answers: Mapping[str, Sequence[str]] | None = None, extra: Mapping[str, Any] | None = None,
              **fields: Any) -> ProtocolCard:
    """A card whose ``data_hash`` covers the loaded data (and the extras that select it)."""
    extra = dict(extra or {})
    if answers and not fields.get("answer_normalizer"):
        fields["answer_normalizer"] = NORMALIZER_ID
    extra_items = [f"{k}={extra[k]}" for k in sorted(extra)]
    card = ProtocolCard(suite=suite, dataset=dataset_name, split=split, metrics=tuple(metrics),
                        data_hash=data_hash(dataset, answers, extra_items),
                        extra=tuple(sorted(extra.items())), **fields)
    return card


def with_options(card: ProtocolCard, options: Mapping[str, Any]) -> ProtocolCard:
    """Apply user overrides of card fields (prompts, max lengths, top_k, metrics) from load options."""
    allowed = CARD_OPTIONS
    changes = {k: options[k] for k in allowed if options.get(k) is not None}
    if "metrics" in changes:
        changes["metrics"] = tuple(changes["metrics"])
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown option(s) for suite {card.suite!r}: {', '.join(unknown)}")
    return card.with_(**changes) if changes else card


# --------------------------------------------------------------------------- evaluation
def split_metrics(metrics: Sequence[str]) -> tuple[list[int], list[str]]:
    """Separate the metrics scored on answers (the registered ``acc@k``) from trec_eval metrics."""
    acc_ks, trec = [], []
    for m in metrics:
        try:
            metric = parse_metric(m)
        except ConfigError:      # an unknown name: the trec_eval metrics engine refuses it, naming it
            trec.append(m)
            continue
        if METRICS.get(metric.name).scored_on == "answers":
            assert metric.cutoff is not None     # the registered acc metric requires one
            acc_ks.append(metric.cutoff)
        else:
            trec.append(m)
    return acc_ks, trec


def evaluate_loaded(loaded: LoadedBenchmark, run: Run, *, answer_lang: str | None = "en") -> EvaluationResult:
    """Score ``run`` under ``loaded.card``: trec_eval metrics on the qrels, ``acc@k`` on the answers.

    The run is first restricted to the depth ``card.top_k`` and, if the card says so,
    stripped of query == document hits.  When both kinds of metric are requested the
    evaluated queries are those scored by the trec_eval metrics that also have answers.
    """
    card = loaded.card
    acc_ks, trec_metrics = split_metrics(card.metrics)
    run = cut_depth(run, scoring_depth(acc_ks, trec_metrics, card.top_k), card.exclude_self)
    options: dict[str, Any] = {"relevance_threshold": card.relevance_threshold, "exclude_self": card.exclude_self,
                               "complete": card.complete, "top_k": card.top_k}
    query_ids: list[str] | None = None
    per_query: dict[str, np.ndarray] = {}
    if trec_metrics:
        if not len(loaded.dataset.qrels):
            raise ConfigError(f"metrics {', '.join(trec_metrics)} need relevance judgements, and "
                              f"{loaded.name} has none; use acc@k")
        result = trec_evaluate(loaded.dataset.qrels, run, trec_metrics, relevance_threshold=card.relevance_threshold,
                               exclude_self=card.exclude_self, complete=card.complete)
        options.update({k: v for k, v in result.options.items() if k not in options})
        query_ids = list(result.query_ids)
        per_query.update(result.per_query)
    if acc_ks:
        if not loaded.answers:
            raise ConfigError(f"acc@k needs answer strings, and {loaded.name} has no answers file")
        if query_ids is None:
            query_ids = list(loaded.answers)
        keep = [i for i, q in enumerate(query_ids) if q in loaded.answers]
        if len(keep) < len(query_ids):
            options["queries_without_answers_dropped"] = len(query_ids) - len(keep)
            query_ids = [query_ids[i] for i in keep]
            per_query = {m: v[keep] for m, v in per_query.items()}
        corpus = loaded.dataset.corpus
        cache_key = f"_answer_matcher:{answer_lang}"     # normalised passages, reused across evaluations
        matcher = loaded.meta.get(cache_key)
        if matcher is None:
            matcher = loaded.meta[cache_key] = AnswerMatcher(corpus.ids, corpus.passages(), answer_lang)
        answer_run = run.without_self_hits() if card.exclude_self else run
        _, acc = accuracy_at_k(answer_run, matcher, loaded.answers, sorted(set(acc_ks)), answer_lang, query_ids)
        for k in acc_ks:
            per_query[f"acc@{k}"] = acc[f"acc@{k}"]
        options["answer_normalizer"] = card.answer_normalizer or NORMALIZER_ID
    ordered = {m: per_query[_canonical(m, per_query)] for m in card.metrics}
    return EvaluationResult(query_ids or [], ordered, options=options)


def scoring_depth(acc_ks: Sequence[int], trec_metrics: Sequence[str], top_k: int) -> int:
    """How deep the run must be read: the largest cutoff when every metric has one (values are
    unchanged by dropping deeper rows, and a 1000-deep run is scored ten times faster), else top_k."""
    cutoffs = list(acc_ks)
    for m in trec_metrics:
        cutoff = parse_metric(m).cutoff
        if cutoff is None:
            return top_k
        cutoffs.append(cutoff)
    return min(top_k, max(cutoffs)) if cutoffs else top_k


def cut_depth(run: Run, depth: int, exclude_self: bool) -> Run:
    """Keep the top ``depth`` documents of each query, not counting query == document hits
    when ``exclude_self`` (those rows are kept so the metrics engine drops them itself and
    a query whose only hit was itself still counts as answered)."""
    if not exclude_self:
        return run.top_k(depth)
    is_self = run.query_ids == run.doc_ids
    others = Run(run.query_ids[~is_self], run.doc_ids[~is_self], run.scores[~is_self], run.name, run.source)
    kept = others.top_k(depth)
    if not is_self.any():
        return kept
    return Run.from_arrays(np.concatenate([kept.query_ids, run.query_ids[is_self]]),
                           np.concatenate([kept.doc_ids, run.doc_ids[is_self]]),
                           np.concatenate([kept.scores, run.scores[is_self]]), run.name, run.source)


def _canonical(metric: str, available: Mapping[str, Any]) -> str:
    """Find the key the metrics engine used for ``metric`` (it may canonicalise names)."""
    if metric in available:
        return metric
    lowered = metric.strip().lower()
    for key in available:
        if key.lower() == lowered:
            return key
    try:
        target = str(parse_metric(metric))
        for key in available:
            if str(parse_metric(key)) == target:
                return key
    except Exception:  # noqa: BLE001 - fall through to the clear error below
        pass
    raise ConfigError(f"metric {metric!r} was not computed (have: {', '.join(available)})")


class BeirLayoutSuite(BenchmarkSuite):
    """A suite whose evaluation is :func:`evaluate_loaded` (trec_eval metrics and/or acc@k)."""

    answer_lang: str | None = "en"

    def evaluate(self, loaded: LoadedBenchmark, run: Run) -> EvaluationResult:
        return evaluate_loaded(loaded, run, answer_lang=loaded.meta.get("answer_lang", self.answer_lang))


def empty_qrels() -> Qrels:
    return Qrels.from_arrays([], [], [])
