"""Matching retrieved (query, document) rows against the qrels, fast and exactly.

A run holds millions of rows and most of them are unjudged, so comparing every
document id string against the judged ids (binary search over strings) would
dominate evaluation time.  Instead every id is hashed to 64 bits straight from
its code points (a vectorised polynomial hash), the pairs are matched on
integer keys (a bit table first drops the rows that cannot match, then binary
search), and every match is then confirmed by comparing the actual ids.
Confirmation removes false matches; a missed match would need two judged pairs
with the same key, which is checked for, and then the exact string search is
used instead.  Results are therefore always exact.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from harness.data import Qrels, Run
from harness.data.ids import IdColumn, lookup_codes

if TYPE_CHECKING:
    from harness.metrics.judged import JudgedRun

# trec_eval's codes for retrieved documents without a usable judgement (form_res_rels.c).
NOT_JUDGED = -1       # document absent from the qrels of its query ("not in pool")
NEGATIVE_LABEL = -2   # judged with a negative label ("in pool but unjudged")

_MASK = (1 << 64) - 1
_DOC_MULTIPLIER = 0x9E3779B97F4A7C15   # odd 64-bit constants (golden ratio, splitmix64)
_QUERY_MULTIPLIER = 0xBF58476D1CE4E5B9
_CHUNK_ROWS = 1 << 16


def hash_ids(ids: np.ndarray) -> np.ndarray:
    """64-bit hash of each id: sum of code point j times M**j, modulo 2**64.

    Works on the fixed-width unicode buffer without creating Python strings.  The
    zero padding of shorter ids adds nothing, so equal ids hash equally whatever
    the width of the array they sit in.
    """
    ids = ids if ids.dtype.kind == "U" else ids.astype(str)
    if not ids.dtype.isnative:  # code points must be read in this machine's byte order
        ids = ids.astype(ids.dtype.newbyteorder("="))
    ids = np.ascontiguousarray(ids)
    width = ids.dtype.itemsize // 4
    out = np.zeros(len(ids), dtype=np.uint64)
    if width == 0 or len(ids) == 0:
        return out
    powers = np.array([pow(_DOC_MULTIPLIER, j, 1 << 64) for j in range(width)], dtype=np.uint64)
    chars = ids.view(np.uint32).reshape(len(ids), width)
    for start in range(0, len(ids), _CHUNK_ROWS):  # chunks bound the uint64 copy
        out[start:start + _CHUNK_ROWS] = chars[start:start + _CHUNK_ROWS].astype(np.uint64) @ powers
    return out


def _pair_keys(query_codes: np.ndarray, doc_ids: np.ndarray) -> np.ndarray:
    return hash_ids(doc_ids) ^ (query_codes.astype(np.uint64) * np.uint64(_QUERY_MULTIPLIER))


def _as_trec_codes(labels: np.ndarray) -> np.ndarray:
    return np.where(labels >= 0, labels, NEGATIVE_LABEL)


def _exact_labels(qrels: Qrels, qrels_query: np.ndarray, row_query: np.ndarray, doc_ids: np.ndarray,
                  labels: np.ndarray) -> np.ndarray:
    """The same join with binary search over the id strings (used on hash collisions)."""
    judged_docs, doc_code = np.unique(qrels.doc_ids, return_inverse=True)
    qrels_keys = qrels_query * len(judged_docs) + doc_code.reshape(-1)
    order = np.argsort(qrels_keys, kind="stable")
    qrels_keys = qrels_keys[order]
    doc_pos = np.minimum(np.searchsorted(judged_docs, doc_ids), len(judged_docs) - 1)
    row_keys = row_query * len(judged_docs) + doc_pos
    hit = np.minimum(np.searchsorted(qrels_keys, row_keys), len(qrels_keys) - 1)
    matched = (judged_docs[doc_pos] == doc_ids) & (qrels_keys[hit] == row_keys)
    labels[matched] = _as_trec_codes(qrels.relevance[order[hit[matched]]])
    return labels


def judged_labels(qrels: Qrels, row_query: np.ndarray, doc_ids: np.ndarray) -> np.ndarray:
    """trec_eval relevance code of each retrieved row.

    ``row_query[i]`` is the index of row i's query among ``qrels.bounds()[0]``
    and ``doc_ids[i]`` its document.  Returns the qrels label when it is >= 0,
    :data:`NEGATIVE_LABEL` for negative labels and :data:`NOT_JUDGED` otherwise.
    """
    row_query = np.asarray(row_query, dtype=np.int64)
    labels = np.full(len(doc_ids), NOT_JUDGED, dtype=np.int64)
    if len(doc_ids) == 0 or len(qrels) == 0:
        return labels
    _, starts, ends = qrels.bounds()
    qrels_query = np.repeat(np.arange(len(starts), dtype=np.int64), ends - starts)
    qrels_keys = _pair_keys(qrels_query, qrels.doc_ids)
    order = np.argsort(qrels_keys)
    sorted_keys = qrels_keys[order]
    if np.any(sorted_keys[1:] == sorted_keys[:-1]):
        return _exact_labels(qrels, qrels_query, row_query, doc_ids, labels)

    row_keys = _pair_keys(row_query, doc_ids)
    # Most rows are unjudged: a bit table on the top key bits discards nearly all
    # of them with one memory access each, and only the rest are binary-searched.
    bits = int(np.clip(np.ceil(np.log2(16 * len(sorted_keys))), 16, 26))
    shift = np.uint64(64 - bits)
    table = np.zeros(1 << bits, dtype=bool)
    table[(sorted_keys >> shift).astype(np.intp)] = True
    maybe = np.flatnonzero(table[(row_keys >> shift).astype(np.intp)])
    hit = np.minimum(np.searchsorted(sorted_keys, row_keys[maybe]), len(sorted_keys) - 1)
    found = sorted_keys[hit] == row_keys[maybe]
    candidates, source = maybe[found], order[hit[found]]
    confirmed = (qrels_query[source] == row_query[candidates]) & (qrels.doc_ids[source] == doc_ids[candidates])
    labels[candidates[confirmed]] = _as_trec_codes(qrels.relevance[source[confirmed]])
    return labels


def judged_rows(qrels: Qrels, run: Run, *, relevance_threshold: int = 1, complete: bool = False,
                run_query_ids: np.ndarray | None = None, block_rows: int = 1 << 22) -> JudgedRun:
    """:func:`~harness.metrics.judged.align` on the run's integer id codes, keeping judged rows only.

    Every metric reads only rows whose label is >= 0 (a relevant document, or a judged one for
    ``relevance_threshold`` 0), so the rows of documents the qrels do not judge for that query
    (most of a run) and of negative labels are dropped here; their ranks are kept, so every
    value equals :func:`align`'s.  The join maps the judged documents into the run's document
    vocabulary once (a hash lookup of each distinct judged id) and then matches integer
    ``(query code, doc code)`` keys block by block, so memory stays bounded by the block and no
    per-row id string is ever built: a 50M-row run is evaluated in its codes.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from harness.metrics.judged import JudgedRun, position_in_group  # judged imports this module

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
    value_set = pa.array(qrels_keys, type=pa.int64())

    rows_out: list[np.ndarray] = []
    labels_out: list[np.ndarray] = []
    qcode, dcode = queries.codes, docs.codes
    assert qcode is not None and dcode is not None
    if len(qrels_keys):
        for start in range(0, len(qcode), block_rows):
            keys = qcode[start:start + block_rows].astype(np.int64) * width + dcode[start:start + block_rows]
            found = pc.index_in(pa.array(keys), value_set=value_set)
            del keys
            matched = np.flatnonzero(found.is_valid().to_numpy(zero_copy_only=False))
            if not len(matched):
                continue
            labels = qrels_labels[found.take(pa.array(matched)).to_numpy()]
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
