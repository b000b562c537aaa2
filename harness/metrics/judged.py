"""A run joined with its judgements: the shared, columnar input of every metric.

:func:`align` does the one expensive step (matching every retrieved document
against the qrels, see :mod:`harness.metrics.join`) once; each metric module
then reduces the resulting flat arrays per query with ``np.bincount``, so no
metric loops over queries in Python.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.data import Qrels, Run
from harness.data.ids import IdColumn, lookup_codes
from harness.metrics.join import NEGATIVE_LABEL, NOT_JUDGED, judged_labels

__all__ = ["NEGATIVE_LABEL", "NOT_JUDGED", "JudgedRun", "align", "position_in_group"]


@dataclass(frozen=True)
class JudgedRun:
    """Retrieved rows of the evaluated queries, with their judgements.

    Row arrays (one entry per retrieved document, grouped by query, in trec_eval
    rank order): ``row_query`` (index into ``query_ids``), ``rank`` (1-based) and
    ``label`` (the qrels label when it is >= 0, else :data:`NOT_JUDGED` or
    :data:`NEGATIVE_LABEL`).  Per query: ``num_rel`` (judged documents with a
    label >= max(threshold, 0), retrieved or not).  The ideal ranking for nDCG is
    kept flat as well: ``ideal_query``, ``ideal_rank`` and ``ideal_gain`` list every
    positive label of each query, highest first.
    """

    query_ids: np.ndarray
    row_query: np.ndarray
    rank: np.ndarray
    label: np.ndarray
    num_rel: np.ndarray
    ideal_query: np.ndarray
    ideal_rank: np.ndarray
    ideal_gain: np.ndarray
    relevance_threshold: int

    @property
    def num_queries(self) -> int:
        return len(self.query_ids)

    @property
    def relevant(self) -> np.ndarray:
        """Per row: does trec_eval count this document as relevant (``label >= threshold``)?"""
        return self.label >= self.relevance_threshold

    def per_query_sum(self, keep: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Sum ``weights`` (or count rows) over the rows selected by the mask ``keep``, per query.

        ``np.bincount`` adds in row order, i.e. in rank order within a query, which is
        the order trec_eval accumulates in.
        """
        w = None if weights is None else weights[keep]
        return np.bincount(self.row_query[keep], weights=w, minlength=self.num_queries).astype(np.float64)

    def relevant_in_top(self, cutoff: int | None) -> np.ndarray:
        """Number of relevant documents among the first ``cutoff`` ranks (all ranks if None)."""
        keep = self.relevant if cutoff is None else self.relevant & (self.rank <= cutoff)
        return self.per_query_sum(keep)


def position_in_group(keys: np.ndarray) -> np.ndarray:
    """1-based position of each element within its run of equal consecutive ``keys``."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.ones(n, dtype=bool)
    change[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(change)
    return np.arange(n, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, n))) + 1


def _ideal_ranking(qrels: Qrels, qrels_rows: np.ndarray, qrels_row_query: np.ndarray):
    """Positive labels per evaluated query, sorted descending, with 1-based ideal ranks."""
    gains = qrels.relevance[qrels_rows]
    positive = gains > 0
    query, gains = qrels_row_query[positive], gains[positive]
    order = np.lexsort((-gains, query))
    query, gains = query[order], gains[order]
    return query, position_in_group(query), gains.astype(np.float64)


def align(qrels: Qrels, run: Run, *, relevance_threshold: int = 1, complete: bool = False,
          run_query_ids: np.ndarray | None = None) -> JudgedRun:
    """Join ``run`` with ``qrels`` for the queries trec_eval would evaluate.

    Evaluated queries are the judged queries that the run answers (default), or
    every judged query when ``complete`` (``trec_eval -c``; unanswered queries then
    have no rows and score 0).  ``run_query_ids`` names the queries the run answers
    when that differs from the queries left in ``run`` (after self-hit removal a
    query may have no rows left but still counts as answered).  Queries are
    returned in sorted id order, as trec_eval reports them.
    """
    judged_queries, q_starts, q_ends = qrels.bounds()
    run_queries, r_starts, r_ends = run.bounds()
    answered = run_queries if run_query_ids is None else np.unique(run_query_ids)
    if complete:
        query_ids = judged_queries
    else:
        query_ids = judged_queries[np.isin(judged_queries, answered)]

    # Map each run query to its evaluated index (-1: not evaluated) and qrels index.
    pos = np.minimum(np.searchsorted(query_ids, run_queries), max(len(query_ids) - 1, 0))
    evaluated = (query_ids[pos] == run_queries) if len(query_ids) else np.zeros(len(run_queries), bool)
    group_sizes = r_ends - r_starts
    row_eval_query = np.repeat(np.where(evaluated, pos, -1), group_sizes)
    keep_rows = row_eval_query >= 0
    row_query = row_eval_query[keep_rows]
    rank = run.ranks()[keep_rows]
    doc_ids = run.doc_ids[keep_rows]

    # Every evaluated query is judged, so its qrels index always exists.
    qrels_index_of_eval = np.searchsorted(judged_queries, query_ids)
    labels = judged_labels(qrels, qrels_index_of_eval[row_query], doc_ids)

    # Qrels rows of the evaluated queries, and each row's evaluated-query index.
    judged_is_evaluated = np.zeros(len(judged_queries), dtype=bool)
    judged_is_evaluated[qrels_index_of_eval] = True
    eval_index_of_judged = np.cumsum(judged_is_evaluated) - 1
    row_judged_query = np.repeat(np.arange(len(judged_queries), dtype=np.int64), q_ends - q_starts)
    qrels_rows = np.flatnonzero(judged_is_evaluated[row_judged_query])
    qrels_row_query = eval_index_of_judged[row_judged_query[qrels_rows]]
    counted = qrels.relevance[qrels_rows] >= max(relevance_threshold, 0)
    num_rel = np.bincount(qrels_row_query[counted], minlength=len(query_ids)).astype(np.int64)
    ideal_query, ideal_rank, ideal_gain = _ideal_ranking(qrels, qrels_rows, qrels_row_query)

    return JudgedRun(
        query_ids=query_ids,
        row_query=row_query.astype(np.int64),
        rank=rank.astype(np.int64),
        label=labels,
        num_rel=num_rel,
        ideal_query=ideal_query,
        ideal_rank=ideal_rank,
        ideal_gain=ideal_gain,
        relevance_threshold=int(relevance_threshold),
    )


def judged_rows(qrels: Qrels, run: Run, *, relevance_threshold: int = 1, complete: bool = False,
                run_query_ids: np.ndarray | None = None, block_rows: int = 1 << 22) -> JudgedRun:
    """:func:`~harness.metrics.judged.align` on the run's integer id codes, keeping judged rows only.

    Every metric reads only rows whose label is >= 0 (a relevant document, or a judged one for
    ``relevance_threshold`` 0), so the rows of documents the qrels do not judge for that query
    (most of a run) and of negative labels are dropped here; their ranks are kept, so every
    value equals :func:`align`'s.  The join maps the judged documents into the run's document
    vocabulary once (:func:`~harness.data.ids.lookup_codes`) and then matches integer
    ``(query code, doc code)`` keys block by block, so memory stays bounded by the block and no
    per-row id string is ever built: a 50M-row run is evaluated in its codes.
    """
    judged_queries, q_starts, q_ends = qrels.bounds()
    queries = run.queries if (run.queries.codes is not None and run.queries.sorted) else \
        IdColumn.encode(run.queries.values())
    docs = run.docs.encoded()
    run_queries, r_starts, r_ends = run.bounds()
    answered = run_queries if run_query_ids is None else np.unique(run_query_ids)
    query_ids = judged_queries if complete else judged_queries[np.isin(judged_queries, answered)]
    qrels_index_of_eval = np.searchsorted(judged_queries, query_ids)

    # Evaluated index of every run query code (-1: not evaluated).
    eval_of_code = np.full(len(queries.vocab) + 1, -1, dtype=np.int64)
    if len(query_ids):
        at = np.minimum(np.searchsorted(queries.vocab, query_ids), max(len(queries.vocab) - 1, 0))
        present = queries.vocab[at] == query_ids if len(queries.vocab) else np.zeros(len(query_ids), bool)
        eval_of_code[at[present]] = np.flatnonzero(present)

    # Qrels rows as (run query code, run doc code) keys; rows whose query or doc the run lacks cannot match.
    row_judged_query = np.repeat(np.arange(len(judged_queries), dtype=np.int64), q_ends - q_starts)
    code_of_judged = np.full(len(judged_queries), -1, dtype=np.int64)
    if len(queries.vocab) and len(judged_queries):
        at = np.minimum(np.searchsorted(queries.vocab, judged_queries), len(queries.vocab) - 1)
        hit = queries.vocab[at] == judged_queries
        code_of_judged[hit] = at[hit]
    qrels_query_code = code_of_judged[row_judged_query]
    qrels_doc_code = lookup_codes(docs, qrels.doc_ids)
    usable = (qrels_query_code >= 0) & (qrels_doc_code >= 0)
    width = np.int64(max(len(docs.vocab), 1))
    qrels_keys = qrels_query_code[usable] * width + qrels_doc_code[usable]
    qrels_labels = qrels.relevance[usable]
    # The qrels keys sorted (stably: a repeated key finds its first row) and binary-searched by the run
    # rows whose document is judged for some query, which a table over the doc codes picks (a few
    # percent of a run): no hash of every row, and no pyarrow (nor the pandas it imports) to load.
    key_order = np.argsort(qrels_keys, kind="stable")
    sorted_keys, sorted_labels = qrels_keys[key_order], qrels_labels[key_order]
    judged_doc = np.zeros(int(width), dtype=bool)
    judged_doc[qrels_doc_code[usable]] = True

    rows_out: list[np.ndarray] = []
    labels_out: list[np.ndarray] = []
    qcode, dcode = queries.codes, docs.codes
    assert qcode is not None and dcode is not None
    if len(qrels_keys):
        for start in range(0, len(qcode), block_rows):
            block_docs = dcode[start:start + block_rows]
            candidates = np.flatnonzero(judged_doc[block_docs])
            keys = qcode[start + candidates].astype(np.int64) * width + block_docs[candidates]
            at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
            hit = sorted_keys[at] == keys
            del keys
            matched = candidates[hit]
            if not len(matched):
                continue
            labels = sorted_labels[at[hit]]
            keep = labels >= 0
            rows_out.append(matched[keep] + start)
            labels_out.append(labels[keep])
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, dtype=np.int64)
    labels = np.concatenate(labels_out) if labels_out else np.zeros(0, dtype=np.int64)
    row_eval = eval_of_code[qcode[rows]]
    evaluated = row_eval >= 0
    rows, labels, row_eval = rows[evaluated], labels[evaluated], row_eval[evaluated]
    group = np.searchsorted(r_starts, rows, side="right") - 1
    rank = rows - r_starts[group] + 1

    # Qrels rows of the evaluated queries: relevant counts and the ideal ranking.
    judged_is_evaluated = np.zeros(len(judged_queries), dtype=bool)
    judged_is_evaluated[qrels_index_of_eval] = True
    eval_index_of_judged = np.cumsum(judged_is_evaluated) - 1
    qrels_rows = np.flatnonzero(judged_is_evaluated[row_judged_query])
    qrels_row_query = eval_index_of_judged[row_judged_query[qrels_rows]]
    gains = qrels.relevance[qrels_rows]
    counted = gains >= max(relevance_threshold, 0)
    num_rel = np.bincount(qrels_row_query[counted], minlength=len(query_ids)).astype(np.int64)
    positive = gains > 0
    ideal_query, ideal_gain = qrels_row_query[positive], gains[positive]
    order = np.lexsort((-ideal_gain, ideal_query))
    ideal_query, ideal_gain = ideal_query[order], ideal_gain[order]
    return JudgedRun(query_ids=query_ids, row_query=row_eval.astype(np.int64), rank=rank.astype(np.int64),
                     label=labels.astype(np.int64), num_rel=num_rel, ideal_query=ideal_query,
                     ideal_rank=position_in_group(ideal_query), ideal_gain=ideal_gain.astype(np.float64),
                     relevance_threshold=int(relevance_threshold))
