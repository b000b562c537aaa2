"""Retrieval runs (ranked lists) as columnar arrays, and TREC run file I/O.

A TREC run line is ``qid Q0 docid rank score tag``.  Like trec_eval, the harness
ignores the rank column and orders each query's documents by score descending,
breaking ties by document id descending (``strcmp`` order).
"""
from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.data.grouped import QueryGrouped
from harness.data.ids import (
    IdColumn,
    as_id_array,
    encode_strings,
    factorize_grouped,
    group_bounds,
    hash_ids,
    narrow_codes,
)
from harness.errors import InputError
from harness.io import atomic_write
from harness.io.readers import (
    check_input_file,
    parse_trec_score,
    read_input_text,
    refuse_unicode_whitespace,
    scores_need_checking,
    split_lines,
)


class Run(QueryGrouped):
    """A run as parallel columns, sorted by query id and then in trec_eval rank order.

    Ids are held as :class:`~harness.data.ids.IdColumn` (integer codes into one vocabulary,
    4 bytes a row), so a 50M-line run fits in a few hundred MB; ``query_ids`` and ``doc_ids``
    give the ids as numpy unicode arrays, built on first use.  ``Run(query_ids, doc_ids,
    scores, name, source)`` wraps columns that are already in trec_eval order.
    """

    def __init__(self, query_ids, doc_ids, scores, name: str = "run", source: str | None = None):
        self.queries = query_ids if isinstance(query_ids, IdColumn) else IdColumn.plain(query_ids)
        self.docs = doc_ids if isinstance(doc_ids, IdColumn) else IdColumn.plain(doc_ids)
        self.scores = np.asarray(scores)
        self.name = name
        self.source = source
        self._bounds: dict = {}

    def __repr__(self) -> str:
        return f"Run(name={self.name!r}, rows={len(self)}, queries={len(self.bounds()[0])}, source={self.source!r})"

    @property
    def query_ids(self) -> np.ndarray:  # type: ignore[override]
        return self.queries.values()

    @property
    def doc_ids(self) -> np.ndarray:  # type: ignore[override]
        return self.docs.values()

    def __len__(self) -> int:
        return len(self.scores)

    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(unique query ids, starts, ends)``: on the query codes when the vocabulary is sorted."""
        if "b" not in self._bounds:
            if self.queries.codes is not None and self.queries.sorted:
                starts, ends = group_bounds(self.queries.codes)
                self._bounds["b"] = (self.queries.vocab[self.queries.codes[starts]], starts, ends)
            else:
                return super().bounds()
        return self._bounds["b"]

    def query_codes(self) -> np.ndarray:
        """Per row, the index of its query among ``bounds()[0]`` (int64)."""
        _, starts, ends = self.bounds()
        return np.repeat(np.arange(len(starts), dtype=np.int64), ends - starts)

    @classmethod
    def from_arrays(cls, query_ids, doc_ids, scores, name: str = "run", source: str | None = None,
                    check_duplicates: bool = True) -> Run:
        """Build a run; rows are sorted into trec_eval order (score desc, doc id desc).

        ``check_duplicates=False`` skips the (query, doc) uniqueness check for callers
        that guarantee it (retrievers, or a reader that already checked).
        """
        q = as_id_array(query_ids)
        d = as_id_array(doc_ids)
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if not (len(q) == len(d) == len(s)):
            raise ValueError("query_ids, doc_ids and scores must have the same length")
        if len(s) and not np.all(np.isfinite(s)):
            i = int(np.flatnonzero(~np.isfinite(s))[0])
            raise InputError(source, f"score of query {q[i]!r} document {d[i]!r} is not finite ({s[i]})")
        if len(q) == 0:
            return cls(q, d, s, name, source)
        uniques, qcode = factorize_grouped(q)
        if check_duplicates:
            _check_unique_pairs(q, d, qcode, source)
        order = _trec_order(qcode, s, lambda rows: _string_ranks(d[rows]))
        if order is not None:
            qcode, d, s = qcode[order], d[order], s[order]
        queries = IdColumn(uniques, narrow_codes(qcode, len(uniques)), sorted=True)
        return cls(queries, IdColumn.plain(d), s, name, source)

    @classmethod
    def from_columns(cls, queries: IdColumn, docs: IdColumn, scores: np.ndarray, name: str = "run",
                     source: str | None = None) -> Run:
        """Build a run from dictionary-encoded ids (``queries`` with a sorted vocabulary, so its codes
        keep string order): the checks and the trec_eval order work on integer codes, and no id
        string is built per row."""
        return cls._from_parts([queries, docs, scores], name, source)

    @classmethod
    def _from_parts(cls, parts: list, name: str, source: str | None, unique: bool = False,
                    owned: bool = False) -> Run:
        """:meth:`from_columns` taking ``[queries, docs, scores]`` out of ``parts`` (which it empties), so
        that each column is freed as soon as its reordered copy exists (a 50M-row run holds one
        reordered column at a time, not a second copy of all three).  ``unique``: the caller vouches
        that no (query, doc) pair repeats (a nested dict's keys), and the check is skipped; ``owned``:
        the columns' code arrays are the caller's to give away (reordered in place)."""
        queries, docs, scores = parts
        parts.clear()
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        del scores
        qcode, dcode = queries.row_codes(), docs.row_codes()
        docs = docs.encoded()
        qvocab, dvocab, dsorted, darrow = queries.vocab, docs.vocab, docs.sorted, docs._arrow
        if not queries.sorted:
            raise ValueError("from_columns needs the query vocabulary in sorted order")
        if not (len(qcode) == len(dcode) == len(s)):
            raise ValueError("query and doc columns and scores must have the same length")
        if len(s) and not np.all(np.isfinite(s)):
            i = int(np.flatnonzero(~np.isfinite(s))[0])
            raise InputError(source, f"score of query {str(queries.vocab[qcode[i]])!r} document "
                                     f"{str(docs.vocab[dcode[i]])!r} is not finite ({s[i]})")
        del queries, docs
        order, positions, sources = _trec_moves(qcode, s, _vocab_ranks(dvocab, dcode, dsorted))
        if order is None and positions is not None:     # by (query, score) already: move tied docs only
            moved = dcode[sources]
            if not owned or not dcode.flags.writeable:     # (a view of pyarrow's memory is read-only)
                dcode = dcode.copy()
            dcode[positions] = moved
            del moved
        elif order is not None:
            if positions is not None and sources is not None:
                order[positions] = sources
            s = s[order]
            qcode = qcode[order]
            dcode = dcode[order]
        del order, positions, sources
        if not unique:
            _check_unique_codes(qcode, dcode, qvocab, dvocab, source)
        return cls(IdColumn(qvocab, qcode, True), IdColumn(dvocab, dcode, dsorted, darrow), s, name, source)

    @classmethod
    def from_codes(cls, query_uniques: np.ndarray, query_codes: np.ndarray, doc_uniques: np.ndarray,
                   doc_codes: np.ndarray, scores: np.ndarray, name: str = "run", source: str | None = None) -> Run:
        """:meth:`from_columns` from bare vocabularies and codes (``query_uniques`` sorted)."""
        return cls.from_columns(IdColumn(as_id_array(query_uniques), np.asarray(query_codes), True),
                                IdColumn(as_id_array(doc_uniques), np.asarray(doc_codes), False),
                                scores, name, source)

    @classmethod
    def from_dict(cls, run: Mapping[str, Mapping[str, float]], name: str = "run") -> Run:
        """Build a run from ``{query id: {doc id: score}}`` (the pytrec_eval / ir-measures / ranx dict).

        The ids and scores are flattened without Python work per row (:func:`flatten_nested`):
        document ids are encoded with a sorted vocabulary and the query ids repeated per query, then
        the run is put in trec_eval order on integer codes as :func:`read_run` does (no duplicate
        check: a dict's keys are unique).  Ids that are not all ``str`` (or scores that numpy cannot
        read as floats) go through :meth:`from_arrays` row by row, which gives the same run.
        """
        flat = flatten_nested(run, np.float64)
        if flat is None:
            qs, ds, ss = [], [], []
            for qid, docs in run.items():
                for did, score in docs.items():
                    qs.append(str(qid))
                    ds.append(str(did))
                    ss.append(float(score))
            return cls.from_arrays(qs, ds, ss, name=name)
        query_column, doc_column, values = flat
        if len(values) == 0:
            return cls.from_arrays([], [], [], name=name)
        return cls._from_parts([query_column, doc_column, values], name, None, unique=True, owned=True)

    @classmethod
    def from_df(cls, df, q_col: str = "q_id", doc_col: str = "doc_id", score_col: str = "score",
                name: str = "run") -> Run:
        """Build a run from a pandas DataFrame with one row per (query, document, score); the default
        column names are those of ranx's ``Run.to_dataframe()``.

        Columns of ``str`` ids are encoded without Python work per row
        (:func:`~harness.data.ids.encode_strings` on the column's values) and the run is put in
        trec_eval order on integer codes; a duplicate (query, document) pair is refused.  Other id
        columns (numbers, missing values) are converted with ``astype(str)`` row by row, as before.
        """
        for col in (q_col, doc_col, score_col):
            if col not in df.columns:
                raise InputError(None, f"DataFrame has no column {col!r} (columns: {list(df.columns)})")
        scores = df[score_col].to_numpy(dtype=np.float64)
        columns = id_columns_of_frame(df, (q_col, doc_col))
        if columns is None or not len(scores):
            return cls.from_arrays(df[q_col].astype(str).to_numpy(dtype=str),
                                   df[doc_col].astype(str).to_numpy(dtype=str), scores, name=name)
        return cls._from_parts([columns[0], columns[1], scores], name, None)

    @classmethod
    def from_ranx(cls, run, name: str | None = None) -> Run:
        """Build a run from a ``ranx.Run`` (its ``{query: {doc: score}}`` held in numba dicts), named
        ``name`` or the ranx run's name.  Reading numba's dicts costs a Python step per row (ranx
        offers no columnar export); the run is then built as :meth:`from_dict` builds it."""
        nested = {str(q): dict(docs) for q, docs in run.run.items()}
        return cls.from_dict(nested, name=name or getattr(run, "name", None) or "run")

    @property
    def values(self) -> np.ndarray:
        return self.scores

    def _take(self, keep: np.ndarray) -> Run:
        return Run(self.queries.take(keep), self.docs.take(keep), self.scores[keep], self.name, self.source)

    def ranks(self) -> np.ndarray:
        """1-based rank of every row within its query."""
        _, starts, ends = self.bounds()
        ranks = np.arange(len(self), dtype=np.int64)
        return ranks - np.repeat(starts, ends - starts) + 1

    def top_k(self, k: int) -> Run:
        """Keep the first ``k`` documents of every query (after trec_eval ordering)."""
        return self._take(self.ranks() <= k)

    def self_hits(self) -> np.ndarray:
        """Per row: is the document id equal to the query id?  On codes for encoded columns."""
        if self.queries.codes is None or self.docs.codes is None:
            return self.query_ids == self.doc_ids
        doc_code_of_query = self.queries.positions_in(self.docs.vocab)
        return doc_code_of_query[self.queries.codes] == self.docs.codes

    def without_self_hits(self) -> Run:
        """Drop rows whose document id equals the query id (BEIR's ArguAna/Quora protocol)."""
        return self._take(~self.self_hits())


_BLOCK_ROWS = 1 << 22


def _trec_order(qcode: np.ndarray, scores: np.ndarray,
                doc_ranks: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
    """Row order: query, then score descending, then doc id descending (trec_eval); None when the
    rows already are in that order.

    ``doc_ranks(rows)`` gives, for those rows, integers that order like their doc ids (equal ids,
    equal integers).  Only rows whose (query, score) ties with a neighbour need them; untied
    rows are ordered by numbers alone, and the tied ones by one integer sort on
    (tie group, doc rank descending): no string is compared per row.
    """
    base, positions, sources = _trec_moves(qcode, scores, doc_ranks)
    if positions is None or sources is None:
        return base
    order = np.arange(len(qcode), dtype=np.int64) if base is None else base
    order[positions] = sources
    return order


def _trec_moves(qcode: np.ndarray, scores: np.ndarray, doc_ranks: Callable[[np.ndarray], np.ndarray]
                ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """:func:`_trec_order` as ``(base, positions, sources)``: the rows by (query, score descending) are
    ``base`` (None: already so), and then the tied rows at ``positions`` of that order are the rows
    ``sources`` (None: no tie to reorder).  Tied rows share their query and score, so a caller whose
    rows are already by (query, score) moves only the doc column, and only at ``positions``."""
    grouped = _grouped_order(qcode, scores)
    identity = isinstance(grouped, str)
    order: np.ndarray | None = None          # None: the identity, built only when ties need it
    if isinstance(grouped, np.ndarray):
        order = grouped
    elif not identity:
        order = np.lexsort((-scores, qcode))
    if order is None:                       # already in order: no gathered copies
        tied_next = (qcode[1:] == qcode[:-1]) & (scores[1:] == scores[:-1])
    else:                                   # a block at a time: no full gathered copies
        tied_next = np.empty(max(len(order) - 1, 0), dtype=bool)
        for a in range(0, len(tied_next), _BLOCK_ROWS):
            rows = order[a:a + _BLOCK_ROWS + 1]
            qs, ss = qcode[rows], scores[rows]
            tied_next[a:a + len(rows) - 1] = (qs[1:] == qs[:-1]) & (ss[1:] == ss[:-1])
    if not tied_next.any():
        return order, None, None
    in_tie = np.zeros(len(qcode), dtype=bool)
    in_tie[1:] |= tied_next
    in_tie[:-1] |= tied_next
    idx = np.flatnonzero(in_tie)
    del in_tie
    starts_group = np.ones(len(idx), dtype=bool)
    starts_group[1:] = ~tied_next[idx[1:] - 1]
    del tied_next
    group = np.cumsum(starts_group, dtype=np.int64)
    del starts_group
    tied_rows = idx if order is None else order[idx]
    ranks = np.asarray(doc_ranks(tied_rows)).astype(np.int64, copy=False)
    top = int(ranks.max()) if len(ranks) else 0
    if int(group[-1]) < (2**62) // (top + 1):
        # One int64 key per tied row: group ascending, then doc rank descending; built in place in
        # ``group`` (no temporaries: with most of a 50M-row run tied, each would be hundreds of MB).
        key = group
        key *= top + 1
        key += top
        key -= ranks
        del group, ranks
        within = _stable_argsort_consuming(key)
    else:                                   # the key would overflow: two sorts
        within = np.lexsort((top - ranks, group))
    if identity and np.all(within[1:] > within[:-1]):
        return None, None, None             # the ties too are already in order: no gathered copies
    return order, idx, tied_rows[within]


def _stable_argsort_consuming(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for a non-negative int64 ``key``, whose memory it reuses.

    When a key and its position fit in 63 bits together, one ``np.sort`` of ``key << bits | position``
    gives the same order: numpy sorts integers with SIMD code but argsorts them without (several
    times slower on a CPU without AVX-512), and equal keys keep their positions' order, as in a
    stable sort.  The packed words are built in ``key`` itself, the positions a block at a time, so
    no temporary of the key's size is made."""
    n = len(key)
    bits = max((n - 1).bit_length(), 1)
    if n == 0 or key.dtype != np.int64 or int(key.max()) >= 1 << (63 - bits):
        return np.argsort(key, kind="stable")
    packed = key.view(np.uint64)
    packed <<= np.uint64(bits)
    for start in range(0, n, _BLOCK_ROWS):
        packed[start:start + _BLOCK_ROWS] |= np.arange(start, min(start + _BLOCK_ROWS, n), dtype=np.uint64)
    packed.sort()
    packed &= np.uint64((1 << bits) - 1)
    return packed.view(np.int64)


def _string_ranks(ids: np.ndarray) -> np.ndarray:
    """For each id, its index among the distinct ids in string (code point = strcmp) order."""
    return np.unique(ids, return_inverse=True)[1].reshape(-1)


def _vocab_ranks(vocab: np.ndarray, codes: np.ndarray, vocab_sorted: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``doc_ranks`` for :func:`_trec_order` on dictionary-encoded doc ids: the vocabulary is ranked
    once (one sort of its distinct ids, not of the rows), and a row's rank is its code's rank."""
    def ranks(rows: np.ndarray) -> np.ndarray:
        if vocab_sorted:                    # codes already order like the ids
            return codes[rows]
        rank = np.empty(len(vocab), dtype=np.int64)
        rank[_string_order(vocab)] = np.arange(len(vocab), dtype=np.int64)
        return rank[codes[rows]]
    return ranks


def _string_order(ids: np.ndarray) -> np.ndarray:
    """``np.argsort(ids, kind="stable")`` for a unicode array, faster for short Latin-1 ids (the usual
    doc ids): their code points, one byte each, are packed big-endian into at most four uint64 words
    per id, and integer sorts replace string comparisons (same order: code point by code point, the
    shorter id first, since the padding is 0 as numpy's own padding is)."""
    n, width = len(ids), ids.dtype.itemsize // 4
    words = -(-width // 8)
    if n == 0 or width == 0 or words > 4:
        return np.argsort(ids, kind="stable")
    points = ids.view(np.uint32).reshape(n, width)
    if int(points.max()) > 255:
        return np.argsort(ids, kind="stable")
    packed = np.zeros((n, 8 * words), dtype=np.uint8)
    packed[:, :width] = points
    keys = packed.view(">u8").reshape(n, words)
    if words == 1:
        return np.argsort(keys[:, 0], kind="stable")
    return np.lexsort(keys.T[::-1])             # lexsort's last key is the primary one


def flatten_nested(nested: Mapping, value_dtype: type) -> tuple[IdColumn, IdColumn, np.ndarray] | None:
    """``{query: {doc: value}}`` as (queries with a sorted vocabulary, dictionary-encoded docs, values),
    flattened without a Python step per row; None when an id is not a ``str`` or a value is not
    numeric (the caller's row-by-row path then converts them exactly as before).

    Document ids go through :func:`~harness.data.ids.encode_strings` (sorted vocabulary, streaming,
    no hash table); ids it cannot pack are dictionary-encoded by pyarrow instead (unsorted vocabulary).
    """
    inner = list(nested.values())
    counts = np.fromiter(map(len, inner), dtype=np.int64, count=len(inner))
    total = int(counts.sum())
    query_keys = [q for q, n in zip(nested.keys(), counts.tolist()) if n]   # an empty query has no rows
    if len(query_keys) < len(inner):
        inner = [d for d, n in zip(inner, counts.tolist()) if n]
    counts = counts[counts > 0]
    # Types gathered in C (map/set): only str ids (bytes or None would pass pyarrow but str() differs).
    if not all(issubclass(t, str) for t in set(map(type, query_keys))):
        return None
    keys = np.asarray(query_keys, dtype=str) if query_keys else np.asarray([], "<U1")
    # The queries flattened in string order: the rows come out grouped as the run's trec_eval order
    # groups them, so no block of them is moved afterwards (three gathers of every row saved).
    order = np.argsort(keys, kind="stable")
    if len(order) > 1 and not np.all(order[1:] > order[:-1]):
        inner = [inner[i] for i in order.tolist()]
        counts, keys = counts[order], keys[order]
    try:
        values = _nested_values(inner, counts, total, value_dtype)
        docs = encode_strings(inner, total)
    except (TypeError, ValueError, OverflowError):     # TypeError: a doc id that is not a str
        return None
    if docs is None:
        docs = _arrow_encoded(inner, total)
        if docs is None:
            return None
    uniques, query_code = np.unique(keys, return_inverse=True)
    qcode = narrow_codes(np.repeat(query_code.reshape(-1), counts), len(uniques))
    return IdColumn(uniques, qcode, sorted=True), docs, values


def _nested_values(inner: list[Mapping], counts: np.ndarray, total: int, value_dtype: type) -> np.ndarray:
    """The values of the inner dicts, flattened in order: one ``np.fromiter`` a dict when they are big
    (numpy iterates each dict's values in C), one over their chain otherwise (fewer calls)."""
    if total < 64 * len(inner):
        return np.fromiter(itertools.chain.from_iterable(d.values() for d in inner), dtype=value_dtype, count=total)
    values: np.ndarray = np.empty(total, dtype=value_dtype)
    at = 0
    for d, n in zip(inner, counts.tolist()):
        values[at:at + n] = np.fromiter(d.values(), dtype=value_dtype, count=n)
        at += n
    return values


def id_columns_of_frame(df, names: Sequence[str]) -> list[IdColumn] | None:
    """The DataFrame columns ``names`` as :class:`IdColumn` (sorted vocabularies) when every value is a
    ``str`` and :func:`~harness.data.ids.encode_strings` can pack them; None otherwise."""
    columns = []
    for name in names:
        values = df[name].tolist()
        try:
            column = encode_strings([values], len(values)) if values else None
        except TypeError:                   # a value that is not a str: the caller converts row by row
            return None
        if column is None:
            return None
        columns.append(column)
    return columns


def _arrow_encoded(inner: list[Mapping], total: int) -> IdColumn | None:
    """Doc ids (all ``str``) dictionary-encoded by pyarrow, for ids :func:`encode_strings` cannot pack;
    None for an id pyarrow cannot hold (a lone surrogate)."""
    # Imported here: pyarrow costs ~30 ms at start-up, paid only by callers that pass such dicts.
    import pyarrow as pa  # lazy (start-up speed)
    import pyarrow.compute as pc  # lazy (start-up speed)

    try:
        encoded = pc.dictionary_encode(pa.array(itertools.chain.from_iterable(inner), type=pa.string(), size=total))
    except (pa.ArrowException, UnicodeEncodeError):
        return None
    vocab = encoded.dictionary
    doc_codes = narrow_codes(encoded.indices.to_numpy(zero_copy_only=False), len(vocab))
    doc_vocab = np.asarray(vocab.to_pylist(), dtype=str) if len(vocab) else np.asarray([], "<U1")
    return IdColumn(doc_vocab, doc_codes, sorted=False, arrow=vocab)


def _grouped_order(qcode: np.ndarray, scores: np.ndarray) -> np.ndarray | str | None:
    """The (query, score descending) order without a full sort when, as in most run files, each
    query's rows are contiguous and already by score descending: only the blocks are reordered.
    ``"identity"`` when the rows already are in order; None when they are not laid out so."""
    n = len(qcode)
    if n == 0:
        return "identity"
    change = np.flatnonzero(qcode[1:] != qcode[:-1]) + 1
    if not np.all((scores[1:] <= scores[:-1]) | (qcode[1:] != qcode[:-1])):
        return None
    starts = np.concatenate(([0], change))
    lengths = np.diff(np.append(starts, n))
    block_order = np.argsort(qcode[starts], kind="stable")
    heads = qcode[starts][block_order]
    if np.any(heads[1:] == heads[:-1]):     # a query in two blocks
        return None
    if np.all(block_order[1:] > block_order[:-1]):
        return "identity"
    sorted_lengths = lengths[block_order]
    new_starts = np.cumsum(sorted_lengths) - sorted_lengths
    return np.arange(n, dtype=np.int64) + np.repeat(starts[block_order] - new_starts, sorted_lengths)


def _check_unique_codes(qcode: np.ndarray, dcode: np.ndarray, query_vocab: np.ndarray, doc_vocab: np.ndarray,
                        source: str | None, block_rows: int = 1 << 22) -> None:
    """Raise InputError if a (query, doc) pair occurs twice; rows grouped by query, checked a block
    of whole queries at a time on integer keys (memory stays bounded by the block)."""
    n = len(qcode)
    width = max(len(doc_vocab), 1)
    start = 0
    while start < n:
        end = min(start + block_rows, n)
        if end < n:                          # extend to the end of the query the block stops in
            end = int(np.searchsorted(qcode, qcode[end - 1], side="right"))
        key = np.sort(qcode[start:end].astype(np.int64) * width + dcode[start:end])
        same = np.flatnonzero(key[1:] == key[:-1])
        if len(same):
            q, d = divmod(int(key[same[0]]), width)
            raise InputError(source, f"document {str(doc_vocab[d])!r} appears twice for query {str(query_vocab[q])!r}")
        start = end


def _check_unique_pairs(q: np.ndarray, d: np.ndarray, qcode: np.ndarray, source: str | None) -> None:
    """Raise InputError if a (query, doc) pair occurs twice (hash, then confirm exactly)."""
    with np.errstate(over="ignore"):
        key = hash_ids(d) ^ (qcode.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    order = np.argsort(key, kind="stable")
    ks = key[order]
    same = np.flatnonzero(ks[1:] == ks[:-1])
    if not len(same):
        return
    candidates = np.unique(np.concatenate((order[same], order[same + 1])))
    seen: set[tuple[str, str]] = set()
    for i in candidates.tolist():
        pair = (str(q[i]), str(d[i]))
        if pair in seen:
            raise InputError(source, f"document {pair[1]!r} appears twice for query {pair[0]!r}")
        seen.add(pair)


def read_run(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``; ``.gz`` allowed).

    The file is read by :func:`harness.data.trec_fast.read_run_columns` (pyarrow's CSV
    reader, ids dictionary-encoded); when it cannot vouch for the file (odd layout or
    characters, a token it cannot parse, a duplicate or non-finite score) the
    line-by-line reader :func:`read_run_lines` reads it or names the bad line.
    Lines end at ``\\n`` and fields are split on ASCII whitespace, as in trec_eval;
    a line holding other whitespace (U+3000, U+00A0...) is refused, since other tools
    would split it differently.  Scores are read as trec_eval's ``atof`` reads them
    (:func:`~harness.io.readers.parse_trec_score`): a token atof would read only a
    prefix of (``1_000``, ``0.5x``) is refused, and so is a non-finite score.
    """
    path = check_input_file(path, "run file")
    # Imported here: pyarrow costs ~30 ms, paid only by commands that read TREC files.
    from harness.data.trec_fast import read_run_columns  # lazy (start-up speed): imports pyarrow

    columns = read_run_columns(path)
    if columns is not None:
        parts = [columns.queries, columns.docs, columns.scores]
        run_name = name or columns.last_tag or path.stem
        del columns
        try:
            return Run._from_parts(parts, run_name, str(path))
        except InputError:
            pass                            # the line-by-line reader names the line
    return read_run_lines(path, name)


def read_run_lines(path: str | Path, name: str | None = None) -> Run:
    """:func:`read_run` line by line: the reference reader, exact ``file:line`` errors."""
    path = check_input_file(path, "run file")
    text = read_input_text(path, "run file")
    refuse_unicode_whitespace(text, path)
    with _no_gc():
        rows = [line.split() for line in split_lines(text)]
    del text
    if all(rows):
        line_nos: Sequence[int] = range(1, len(rows) + 1)
    else:                                   # blank lines: skip them, keep the real line numbers
        line_nos = [i + 1 for i, cols in enumerate(rows) if cols]
        rows = [cols for cols in rows if cols]
    if not rows:
        raise InputError(path, "run file contains no results")
    if set(map(len, rows)) != {6}:
        for line_no, cols in zip(line_nos, rows):
            if len(cols) != 6:
                raise InputError(path, f"expected 6 columns (qid Q0 docid rank score tag), got {len(cols)}", line_no)
    with _no_gc():
        qs, _, ds, rank_texts, score_texts, tags = zip(*rows)
    try:
        np.asarray(rank_texts, dtype=np.int64)
    except (ValueError, OverflowError):
        for line_no, text in zip(line_nos, rank_texts):
            try:
                int(text)
            except ValueError:
                raise InputError(path, f"rank {text!r} is not an integer", line_no) from None
    scores = _parse_scores(score_texts, path, line_nos)
    try:
        return Run.from_arrays(qs, ds, scores, name=name or tags[-1] or path.stem, source=str(path))
    except InputError as exc:
        if "appears twice" not in exc.problem:
            raise
        _raise_duplicate_line(path, qs, ds, line_nos)
        raise


def _parse_scores(score_texts: tuple[str, ...], path: Path, line_nos) -> np.ndarray:
    """Scores as float64, equal to trec_eval's atof values; InputError names the first bad line.

    numpy's conversion is Python's ``float``, which agrees with strtod on ASCII tokens
    without ``_``; anything else goes token by token through the exact C grammar.
    """
    try:
        scores = np.asarray(score_texts, dtype=np.float64)
        trusted = not scores_need_checking("".join(score_texts))
    except ValueError:
        trusted = False
    if not trusted:
        scores = np.asarray([parse_trec_score(t, path, n) for n, t in zip(line_nos, score_texts)], dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        i = int(np.flatnonzero(~np.isfinite(scores))[0])
        parse_trec_score(score_texts[i], path, line_nos[i])       # raises with the reason
    return scores


@contextlib.contextmanager
def _no_gc():
    """Pause the cyclic garbage collector while millions of small lists are built
    (it would rescan them all repeatedly; they hold no cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _raise_duplicate_line(path: Path, qs, ds, line_nos) -> None:
    first: dict[tuple[str, str], int] = {}
    for q, d, line_no in zip(qs, ds, line_nos):
        if (q, d) in first:
            raise InputError(path, f"document {d!r} appears twice for query {q!r} (first on line {first[(q, d)]})",
                             line_no)
        first[(q, d)] = line_no


def write_run(run: Run, path: str | Path, tag: str | None = None) -> None:
    """Write a TREC run atomically (``.gz`` compresses); ranks follow trec_eval order."""
    tag = (tag or run.name or "run").replace(" ", "_")
    ranks = run.ranks().tolist()
    rows = zip(run.query_ids.tolist(), run.doc_ids.tolist(), ranks, run.scores.tolist())
    with atomic_write(path) as handle:
        # Large blocks: one write (and one gzip call) per 100k lines, not per line.
        while block := list(itertools.islice(rows, 100_000)):
            handle.write("".join(f"{q} Q0 {d} {r} {s!r} {tag}\n" for q, d, r, s in block))
