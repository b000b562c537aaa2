"""Helpers for id arrays: factorising strings into order-preserving integer codes."""
from __future__ import annotations

import numpy as np


def as_id_array(values) -> np.ndarray:
    """Return ids as a numpy unicode array (fast C-level sorting and comparison).

    Unicode arrays compare by code point, which is the same order as ``strcmp`` on
    UTF-8 bytes, i.e. trec_eval's docno order.
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "U":
        return arr
    if arr.size == 0:
        return np.asarray([], dtype="<U1")
    return arr.astype(str)


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(uniques, codes)`` with ``uniques`` sorted, so codes preserve string order."""
    uniques, codes = np.unique(values, return_inverse=True)
    return uniques, codes.reshape(-1).astype(np.int64)


def group_bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For an array sorted by key, return ``(starts, ends)`` of each run of equal keys."""
    n = len(sorted_keys)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    change = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    starts = np.concatenate(([0], change)).astype(np.int64)
    ends = np.concatenate((change, [n])).astype(np.int64)
    return starts, ends


def hash_ids(values: np.ndarray) -> np.ndarray:
    """A 64-bit polynomial hash of each id string, vectorised over the array's code points.

    Used to find equal ids (duplicates, joins) without sorting strings; callers
    confirm hash matches by comparing the real strings, so collisions are harmless.
    """
    arr = as_id_array(values)
    n = len(arr)
    width = arr.dtype.itemsize // 4
    h = np.full(n, 1469598103934665603, dtype=np.uint64)
    if n == 0 or width == 0:
        return h
    points = arr.view(np.uint32).reshape(n, width)
    prime = np.uint64(1099511628211)
    with np.errstate(over="ignore"):
        for j in range(width):
            h = h * prime + points[:, j].astype(np.uint64)
    return h


def factorize_grouped(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`factorize`, but fast when equal values already sit in contiguous blocks
    (runs and qrels usually list each query's rows together)."""
    n = len(values)
    if n == 0:
        return values[:0], np.zeros(0, dtype=np.int64)
    starts, ends = group_bounds(values)
    heads = values[starts]
    uniques, head_codes = np.unique(heads, return_inverse=True)
    if len(uniques) != len(heads):          # a value appears in two blocks: not grouped
        return factorize(values)
    return uniques, np.repeat(head_codes.reshape(-1).astype(np.int64), ends - starts)


class IdColumn:
    """A column of ids stored as integer codes into one vocabulary of distinct ids.

    A run of 50,000 queries x 1,000 documents holds 50M rows but only ~1M distinct
    document ids: rows cost 4 bytes (int32 code) instead of a fixed-width unicode cell
    (4 bytes per character of the longest id), and equality, grouping and joins work on
    integers.  ``vocab`` is a numpy unicode array; ``sorted`` says whether it is in string
    (code point = ``strcmp``) order, in which case codes order like the ids themselves.
    A *plain* column (``codes`` None) is an ordinary id array wrapped as is (no encoding
    cost for callers that build small runs from arrays); :meth:`encoded` encodes it.
    """

    __slots__ = ("vocab", "codes", "sorted", "_arrow", "_values")

    def __init__(self, vocab: np.ndarray, codes: np.ndarray | None, sorted: bool, arrow=None):  # noqa: A002
        self.vocab = vocab
        self.codes = codes
        self.sorted = bool(sorted)
        self._arrow = arrow            # the vocabulary as a pyarrow string array, when known
        self._values: np.ndarray | None = None

    @classmethod
    def plain(cls, values) -> IdColumn:
        return cls(as_id_array(values), None, sorted=False)

    @classmethod
    def encode(cls, values) -> IdColumn:
        """Encode ids with a sorted vocabulary (codes keep string order)."""
        arr = as_id_array(values)
        uniques, codes = np.unique(arr, return_inverse=True)
        return cls(uniques, narrow_codes(codes.reshape(-1), len(uniques)), sorted=True)

    def __len__(self) -> int:
        return len(self.vocab) if self.codes is None else len(self.codes)

    @property
    def nbytes(self) -> int:
        return self.vocab.nbytes + (0 if self.codes is None else self.codes.nbytes)

    def values(self) -> np.ndarray:
        """The ids of every row as one numpy unicode array (built once, then kept)."""
        if self.codes is None:
            return self.vocab
        if self._values is None:
            self._values = self.vocab[self.codes]
        return self._values

    def take(self, rows: np.ndarray) -> IdColumn:
        """The column restricted (or reordered) to ``rows`` (a boolean mask or indices)."""
        if self.codes is None:
            return IdColumn(self.vocab[rows], None, sorted=False)
        return IdColumn(self.vocab, self.codes[rows], self.sorted, self._arrow)

    def encoded(self) -> IdColumn:
        """This column with integer codes (a plain column is encoded, sorted)."""
        return self if self.codes is not None else IdColumn.encode(self.vocab)

    def row_codes(self) -> np.ndarray:
        return self.encoded().codes  # type: ignore[return-value]

    def arrow_vocab(self):
        """The vocabulary as a pyarrow string array (converted once)."""
        if self._arrow is None:
            import pyarrow as pa

            self._arrow = pa.array(self.vocab, type=pa.string())
        return self._arrow

    def positions_in(self, table: np.ndarray) -> np.ndarray:
        """For every vocabulary entry, its index in the id array ``table`` (first match), -1 when absent.

        Exact string equality (a hash set of ``table`` probed with every vocabulary id, in C++)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if len(self.vocab) == 0 or len(table) == 0:
            return np.full(len(self.vocab), -1, dtype=np.int64)
        found = pc.index_in(self.arrow_vocab(), value_set=pa.array(as_id_array(table), type=pa.string()))
        return found.fill_null(-1).to_numpy().astype(np.int64)


def narrow_codes(codes: np.ndarray, size: int) -> np.ndarray:
    """Codes as int32 when the vocabulary allows (half the memory of int64)."""
    return codes.astype(np.int32 if size < 2**31 - 1 else np.int64, copy=False)


def lookup_codes(vocab: IdColumn, ids: np.ndarray) -> np.ndarray:
    """For each id in ``ids``, its code in ``vocab``'s vocabulary (-1 when absent); exact, hashed in C++."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(ids) == 0 or len(vocab.vocab) == 0:
        return np.full(len(ids), -1, dtype=np.int64)
    found = pc.index_in(pa.array(as_id_array(ids), type=pa.string()), value_set=vocab.arrow_vocab())
    return found.fill_null(-1).to_numpy().astype(np.int64)
