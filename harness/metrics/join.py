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

import numpy as np

from harness.data import Qrels

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
