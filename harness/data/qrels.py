"""Relevance judgements as columnar arrays, and their readers and writers.

Two file formats are read:

* TREC qrels: ``qid iter docid rel`` separated by whitespace, no header;
* BEIR qrels: ``query-id<TAB>corpus-id<TAB>score`` with a header line.

Both may be gzip-compressed (``.gz``).  Every format error raises
:class:`~harness.errors.InputError` naming the file and line.  Labels are parsed as
trec_eval parses them (see :func:`read_qrels`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.data.grouped import QueryGrouped
from harness.data.ids import as_id_array
from harness.data.run import flatten_nested
from harness.errors import InputError
from harness.io import atomic_write
from harness.io.readers import (
    check_id,
    check_input_file,
    iter_input_lines,
    parse_trec_relevance,
    refuse_unicode_whitespace,
)

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class Qrels(QueryGrouped):
    """Judgements as parallel arrays sorted by (query id, doc id).

    ``relevance`` holds the raw graded labels (they may be 0 or negative: judged
    non-relevant).  Which labels count as relevant is a protocol option of the
    metrics (``relevance_threshold``), not a property of the qrels.
    """

    query_ids: np.ndarray
    doc_ids: np.ndarray
    relevance: np.ndarray
    source: str | None = None
    _bounds: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_arrays(cls, query_ids, doc_ids, relevance, source: str | None = None) -> Qrels:
        q = as_id_array(query_ids)
        d = as_id_array(doc_ids)
        r = np.asarray(relevance, dtype=np.int64).reshape(-1)
        if not (len(q) == len(d) == len(r)):
            raise ValueError("query_ids, doc_ids and relevance must have the same length")
        order = np.lexsort((d, q))
        q, d, r = q[order], d[order], r[order]
        if len(q) > 1:
            dup = np.flatnonzero((q[1:] == q[:-1]) & (d[1:] == d[:-1]))
            if len(dup):
                i = dup[0] + 1
                raise InputError(source, f"duplicate judgement for query {q[i]!r} and document {d[i]!r}")
        return cls(q, d, r, source)

    @classmethod
    def from_dict(cls, qrels: Mapping[str, Mapping[str, int]], source: str | None = None) -> Qrels:
        """Judgements from ``{query id: {doc id: label}}``, flattened in C when the ids are ``str``
        (:func:`harness.data.run.flatten_nested`), row by row otherwise; the same qrels either way."""
        flat = flatten_nested(qrels, np.int64)
        if flat is not None:
            query_column, doc_column, labels = flat
            return cls.from_arrays(query_column.values(), doc_column.values(), labels, source)
        qs, ds, rs = [], [], []
        for qid, docs in qrels.items():
            for did, rel in docs.items():
                qs.append(str(qid))
                ds.append(str(did))
                rs.append(int(rel))
        return cls.from_arrays(qs, ds, rs, source)

    @property
    def values(self) -> np.ndarray:
        return self.relevance

    def _take(self, keep: np.ndarray) -> Qrels:
        return Qrels(self.query_ids[keep], self.doc_ids[keep], self.relevance[keep], self.source)

    def num_relevant(self, threshold: int = 1) -> dict[str, int]:
        qids, starts, ends = self.bounds()
        rel = self.relevance >= threshold
        counts = np.add.reduceat(rel.astype(np.int64), starts) if len(starts) else np.zeros(0, np.int64)
        return dict(zip(qids.tolist(), counts.tolist()))


def read_qrels(path: str | Path, fmt: str = "auto") -> Qrels:
    """Read TREC (``qid iter docid rel``) or BEIR tsv (header ``query-id corpus-id score``) qrels.

    ``fmt`` is ``"trec"``, ``"beir"`` or ``"auto"`` (BEIR when the first line is the
    BEIR header, TREC otherwise).  Labels are read as trec_eval's ``atol`` reads them
    (:func:`~harness.io.readers.parse_trec_relevance`): ``2`` or ``2.0``; negative labels
    are kept and count as non-relevant; tokens atol would read only a prefix of (``1e30``,
    ``1.5``, ``high``) are refused.  TREC lines split on ASCII whitespace as in trec_eval;
    ids with any other whitespace (U+3000, U+00A0...) are refused in both formats.

    The fast path (:func:`harness.data.trec_fast.read_qrels_columns`, pyarrow) reads
    plain files; the line-by-line :func:`read_qrels_lines` reads the rest and names
    the line of every problem.
    """
    path = check_input_file(path, "qrels file")
    # Imported here: pyarrow costs ~30 ms, paid only by commands that read TREC files.
    from harness.data.trec_fast import read_qrels_columns  # lazy (start-up speed): imports pyarrow

    columns = read_qrels_columns(path, fmt)
    if columns is not None:
        try:
            return Qrels.from_arrays(columns.query_ids(), columns.doc_ids(), columns.values, source=str(path))
        except InputError:
            pass                            # a duplicate: the line-by-line reader names its line
    return read_qrels_lines(path, fmt)


def read_qrels_lines(path: str | Path, fmt: str = "auto") -> Qrels:
    """:func:`read_qrels` line by line: the reference reader, exact ``file:line`` errors."""
    path = check_input_file(path, "qrels file")
    qs: list[str] = []
    ds: list[str] = []
    rs: list[int] = []
    seen: dict[tuple[str, str], int] = {}
    for line_no, line in iter_input_lines(path, "qrels file"):
        if line_no == 1 and fmt in ("auto", "beir"):
            head = tuple(c.strip() for c in line.split("\t"))
            if head == BEIR_QRELS_HEADER:
                fmt = "beir"
                continue
            if fmt == "beir":
                raise InputError(path, f"expected BEIR header 'query-id<TAB>corpus-id<TAB>score', got {line!r}", 1)
            fmt = "trec"
        if not line.strip():
            continue
        if fmt == "beir":
            cols = line.split("\t")
            if len(cols) != 3:
                raise InputError(path, "expected 3 tab-separated columns (query-id, corpus-id, score), "
                                       f"got {len(cols)}", line_no)
            qid, did, rel_text = (c.strip() for c in cols)
        else:
            refuse_unicode_whitespace(line, path, line_no)
            cols = line.split()
            if len(cols) != 4:
                raise InputError(path, f"expected 4 columns (qid iter docid rel), got {len(cols)}", line_no)
            qid, _, did, rel_text = cols
        if not qid or not did:
            raise InputError(path, "empty query or document id", line_no)
        check_id(qid, path, line_no, "query id")
        check_id(did, path, line_no, "document id")
        rel = parse_trec_relevance(rel_text, path, line_no)
        key = (qid, did)
        if key in seen:
            raise InputError(path, f"duplicate judgement for query {qid!r} and document {did!r} "
                                   f"(first on line {seen[key]})", line_no)
        seen[key] = line_no
        qs.append(qid)
        ds.append(did)
        rs.append(rel)
    if not qs:
        raise InputError(path, "qrels file contains no judgements")
    return Qrels.from_arrays(qs, ds, rs, source=str(path))


def write_qrels(qrels: Qrels, path: str | Path, fmt: str = "trec") -> None:
    """Write qrels atomically as TREC (``qid 0 docid rel``) or BEIR tsv."""
    with atomic_write(path) as handle:
        if fmt == "beir":
            handle.write("\t".join(BEIR_QRELS_HEADER) + "\n")
            for q, d, r in zip(qrels.query_ids.tolist(), qrels.doc_ids.tolist(), qrels.relevance.tolist()):
                handle.write(f"{q}\t{d}\t{r}\n")
        else:
            for q, d, r in zip(qrels.query_ids.tolist(), qrels.doc_ids.tolist(), qrels.relevance.tolist()):
                handle.write(f"{q} 0 {d} {r}\n")
