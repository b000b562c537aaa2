"""Relevance judgements as columnar arrays, and their readers and writers.

Two file formats are read:

* TREC qrels: ``qid iter docid rel`` separated by whitespace, no header;
* BEIR qrels: ``query-id<TAB>corpus-id<TAB>score`` with a header line.

Both may be gzip-compressed (``.gz``).  Every format error raises
:class:`~harness.errors.InputError` naming the file and line.  Labels are parsed as
trec_eval parses them (see :func:`read_qrels`).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.data.grouped import QueryGrouped
from harness.data.ids import as_id_array
from harness.data.run import flatten_nested, id_columns_of_frame
from harness.errors import InputError
from harness.io import atomic_write
from harness.io.readers import (
    check_id,
    check_input_file,
    iter_input_lines,
    parse_trec_relevance,
    refuse_unicode_whitespace,
)

log = logging.getLogger(__name__)
_LABEL = re.compile(r"[+-]?\d+(?:\.0*)?", re.ASCII)          # a label as parse_trec_relevance accepts it

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")
BEIR_EXPECTED = "BEIR qrels (tab-separated, header 'query-id<TAB>corpus-id<TAB>score')"
TREC_EXPECTED = "TREC qrels (whitespace-separated 'qid iter docid rel', no header)"

# Header names a person may give the columns of a qrels file (lower-cased); a header made of them, in
# BEIR's order (query, document, label) or TREC's (query, iteration, document, label), is unambiguous.
_QUERY_NAMES = frozenset({"query-id", "query_id", "queryid", "qid", "query", "topic", "topic_id", "q_id"})
_DOC_NAMES = frozenset({"corpus-id", "corpus_id", "corpusid", "doc-id", "doc_id", "docid", "docno", "doc",
                        "document", "document_id", "pid", "passage_id", "did"})
_ITER_NAMES = frozenset({"iter", "iteration", "q0", "0", "unused"})
_LABEL_NAMES = frozenset({"score", "rel", "relevance", "label", "judgment", "judgement", "grade"})


@dataclass(frozen=True)
class QrelsLayout:
    """How a qrels file is laid out, as found from its first line (:func:`sniff_qrels`)."""

    fmt: str                            # "beir" (3 columns: query, document, label) or "trec" (4 columns)
    header: bool                        # line 1 names the columns
    delimiter: str | None               # "\t", or None: runs of ASCII whitespace
    found: str                          # what was found, in words (for messages and the log)

    @property
    def standard(self) -> bool:
        """BEIR with its exact header or TREC without one: the layouts the fast reader handles."""
        return self in (_STANDARD_BEIR, _STANDARD_TREC)

    @property
    def width(self) -> int:
        return 3 if self.fmt == "beir" else 4


_STANDARD_BEIR = QrelsLayout("beir", True, "\t", "BEIR qrels with its header")
_STANDARD_TREC = QrelsLayout("trec", False, None, "TREC qrels")


def separation(line: str) -> str:
    """How ``line``'s fields are separated, in words: tab-, comma- or whitespace-separated."""
    if "\t" in line:
        return "tab-separated"
    if "," in line and len(line.split()) <= 1:
        return "comma-separated (CSV)"
    return "whitespace-separated"


def sniff_qrels(path: str | Path, fmt: str = "auto") -> QrelsLayout:
    """The layout of a qrels file from its first line: BEIR (3 columns with a header) or TREC (4 columns,
    no header), tab or whitespace separated.  A header of recognised column names (``qid docid rel``,
    ``qid iter docid rel``) is read as such; CSV and what is truly ambiguous (3 columns without a header,
    a header of unknown names) are refused at ``file:1`` saying what was found and what is expected."""
    path = Path(path)
    line = next((text for _, text in iter_input_lines(path, "qrels file")), None)   # the first line only
    if line is None or fmt == "trec":
        return _STANDARD_TREC
    if tuple(c.strip() for c in line.split("\t")) == BEIR_QRELS_HEADER:
        return _STANDARD_BEIR
    sep = separation(line)
    if sep.startswith("comma"):
        raise InputError(path, f"found comma-separated values (CSV) {line!r}; expected {BEIR_EXPECTED} or "
                               f"{TREC_EXPECTED}: save the file with tabs instead of commas", 1)
    cols = [c.strip() for c in line.split("\t")] if "\t" in line else line.split()
    names = [c.lower() for c in cols]
    delimiter = "\t" if "\t" in line else None
    is_label = _LABEL.fullmatch(cols[-1]) is not None if cols else False
    if len(cols) == 3 and names[0] in _QUERY_NAMES and names[1] in _DOC_NAMES and names[2] in _LABEL_NAMES:
        return QrelsLayout("beir", True, delimiter, f"3 {sep} columns with the header {line.strip()!r}")
    if len(cols) == 4 and names[0] in _QUERY_NAMES and names[1] in _ITER_NAMES and names[2] in _DOC_NAMES \
            and names[3] in _LABEL_NAMES and fmt == "auto":
        return QrelsLayout("trec", True, delimiter, f"4 {sep} columns with the header {line.strip()!r}")
    if fmt == "beir":
        raise InputError(path, f"expected BEIR header 'query-id<TAB>corpus-id<TAB>score', got {line!r}", 1)
    # a header is words only; a 4-column line with numbers is data (its bad label is named on reading)
    is_header = not is_label and (len(cols) == 3 or not any(_LABEL.fullmatch(c) for c in cols))
    if is_header and len(cols) in (3, 4):
        raise InputError(path, f"found a header of {len(cols)} {sep} columns {line.strip()!r} whose names are not "
                               f"recognised; expected {BEIR_EXPECTED} or {TREC_EXPECTED}", 1)
    if len(cols) == 3:
        raise InputError(path, f"found 3 {sep} columns and no header ({line.strip()!r}); expected {TREC_EXPECTED} "
                               f"or {BEIR_EXPECTED}: add the header line if the columns are query, document, "
                               "score", 1)
    return _STANDARD_TREC


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

    @classmethod
    def from_df(cls, df, q_col: str = "q_id", doc_col: str = "doc_id", score_col: str = "score",
                source: str | None = None) -> Qrels:
        """Judgements from a pandas DataFrame with one row per (query, document, label); the default
        column names are those of ranx's ``Qrels.to_dataframe()``.  ``str`` id columns are encoded
        without Python work per row; others are converted with ``astype(str)``.  The same qrels as
        :meth:`from_arrays` on the same rows (a duplicate judgement is refused)."""
        for col in (q_col, doc_col, score_col):
            if col not in df.columns:
                raise InputError(source, f"DataFrame has no column {col!r} (columns: {list(df.columns)})")
        labels = df[score_col].to_numpy(dtype=np.int64)
        columns = id_columns_of_frame(df, (q_col, doc_col))
        if columns is None:
            return cls.from_arrays(df[q_col].astype(str).to_numpy(dtype=str),
                                   df[doc_col].astype(str).to_numpy(dtype=str), labels, source)
        return cls.from_arrays(columns[0].values(), columns[1].values(), labels, source)

    @classmethod
    def from_ranx(cls, qrels, source: str | None = None) -> Qrels:
        """Judgements from a ``ranx.Qrels`` (numba dicts read a row at a time: ranx has no columnar
        export), as :meth:`from_dict` builds them."""
        return cls.from_dict({str(q): dict(docs) for q, docs in qrels.qrels.items()}, source)

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
    layout = sniff_qrels(path, fmt)
    if not layout.standard:
        return read_qrels_lines(path, fmt)
    fmt = layout.fmt
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
    layout = sniff_qrels(path, fmt)
    if not layout.standard:
        log.info("%s: read as %s (%s)", path, "BEIR qrels" if layout.fmt == "beir" else "TREC qrels", layout.found)
    for line_no, line in iter_input_lines(path, "qrels file"):
        if line_no == 1 and layout.header:
            continue
        if not line.strip():
            continue
        if layout.delimiter == "\t":
            cols = [c.strip() for c in line.split("\t")]
            if len(cols) != layout.width:
                names = "query-id, corpus-id, score" if layout.width == 3 else "qid, iter, docid, rel"
                raise InputError(path, f"expected {layout.width} tab-separated columns ({names}), got {len(cols)}",
                                 line_no)
        else:
            refuse_unicode_whitespace(line, path, line_no)
            cols = line.split()
            if len(cols) != layout.width:
                names = "qid docid rel" if layout.width == 3 else "qid iter docid rel"
                hint = f"; {_column_hint(line, layout)}" if line_no <= 2 else ""
                raise InputError(path, f"expected {layout.width} columns ({names}), got {len(cols)}{hint}", line_no)
        qid, did, rel_text = (cols[0], cols[1], cols[2]) if layout.width == 3 else (cols[0], cols[2], cols[3])
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


def _column_hint(line: str, layout: QrelsLayout) -> str:
    """What the first data line of a qrels file looks like, against what its layout expects."""
    return f"found {separation(line)} {line.strip()!r}; expected " + (TREC_EXPECTED if layout.fmt == "trec"
                                                                      else BEIR_EXPECTED)


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
