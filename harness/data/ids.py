"""Helpers for id arrays: factorising strings into order-preserving integer codes."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

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
        return arrow_numpy(found.fill_null(-1)).astype(np.int64)


_ARROW_NUMBERS = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
                  "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "float": np.float32,
                  "double": np.float64}


def arrow_numpy(array) -> np.ndarray:
    """A pyarrow array (or chunked array) of numbers as numpy: a read-only view of its buffer for one
    array without nulls, a fresh concatenation for a chunked one.  Why not ``to_numpy``: pyarrow (26)
    imports pandas inside it, half a second of CPU at first use in a command that needs no pandas."""
    if hasattr(array, "chunks"):
        parts = [arrow_numpy(chunk) for chunk in array.chunks]
        dtype = _ARROW_NUMBERS.get(str(array.type))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype or np.float64)
    dtype = _ARROW_NUMBERS.get(str(array.type))
    if dtype is None or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype)[array.offset:array.offset + len(array)]


def narrow_codes(codes: np.ndarray, size: int) -> np.ndarray:
    """Codes as int32 when the vocabulary allows (half the memory of int64)."""
    return codes.astype(np.int32 if size < 2**31 - 1 else np.int64, copy=False)


def lookup_codes(vocab: IdColumn, ids: np.ndarray) -> np.ndarray:
    """For each id in ``ids``, its code in ``vocab``'s vocabulary (-1 when absent); exact.

    A sorted vocabulary is binary-searched for the distinct ids (no hash table of the whole
    vocabulary: a run's 1M document ids against a qrels file's 50k is a sixth of the time, and
    needs no pyarrow copy of the vocabulary); an unsorted one is hashed in C++ by pyarrow."""
    if len(ids) == 0 or len(vocab.vocab) == 0:
        return np.full(len(ids), -1, dtype=np.int64)
    if vocab.sorted:
        distinct, inverse = np.unique(as_id_array(ids), return_inverse=True)
        at = np.minimum(np.searchsorted(vocab.vocab, distinct), len(vocab.vocab) - 1)
        code = np.where(vocab.vocab[at] == distinct, at, -1).astype(np.int64, copy=False)
        return code[inverse.reshape(-1)]
    import pyarrow as pa
    import pyarrow.compute as pc

    found = pc.index_in(pa.array(as_id_array(ids), type=pa.string()), value_set=vocab.arrow_vocab())
    return arrow_numpy(found.fill_null(-1)).astype(np.int64)


_KEY_BITS = 64
_BLOCK = 1 << 20                 # rows a temporary of the key's width covers


def encode_strings(groups: Iterable[Iterable[str]], count: int) -> IdColumn | None:
    """The ids of ``groups`` (non-empty iterables of ``str``, such as the inner dicts of a nested
    run: their keys), ``count`` in all, in order, as an :class:`IdColumn` with a sorted vocabulary,
    with no Python step per id.  None when the ids do not suit this encoder (a NUL or lone surrogate
    in an id, ids too varied to pack into one 64-bit key): the caller encodes them another way.
    TypeError when an id is not a ``str``.

    Why not pyarrow's ``dictionary_encode`` or ``pandas.factorize``: both probe a hash table as big as
    the vocabulary once per row, and for a run of 5M rows over 1M distinct ids those random reads
    cost more than pytrec_eval's whole evaluation.  Here every step streams: the ids are joined into
    one UTF-8 buffer (C loops over the objects, a group at a time), cut into byte columns, and each
    byte position is mapped into a few bits (its offset in the range of bytes seen there, the
    padding after a shorter id below them all; or, when those do not fit, the byte's rank among the
    bytes seen there).  Concatenated, these form an integer key that is exact (different ids,
    different keys) and orders like the ids themselves (UTF-8 byte order = code point order =
    trec_eval's ``strcmp`` order); with the row number in its low bits one SIMD ``np.sort`` gives
    the sorted vocabulary and every row's code.  Typical ids (``doc123456``, MS MARCO numbers) need
    4 bits a varying position, so the key fits with room for the row number.
    """
    if count == 0:
        return IdColumn(np.asarray([], dtype="<U1"), np.zeros(0, dtype=np.int32), sorted=True)
    joined = _joined_utf8(groups)
    if joined is None:
        return None
    raw, ascii_only = joined
    del joined
    size = len(raw)
    if size == 0:                           # one id, the empty string
        return IdColumn(np.asarray([""]), np.zeros(1, dtype=np.int32), sorted=True)
    buffer = np.frombuffer(raw, dtype=np.uint8)
    separators = np.flatnonzero(buffer == 0)
    if len(separators) != count - 1:        # a NUL inside an id: the padding could not tell it apart
        return None
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    np.add(separators, 1, out=starts[1:])
    # The shortest and longest id in bytes: the last, the first, then the others a block at a time.
    shortest = width = size - int(starts[-1])
    if count > 1:
        shortest, width = min(shortest, int(separators[0])), max(width, int(separators[0]))
    for start in range(0, count - 1, _BLOCK):
        lengths = np.diff(separators[start:start + _BLOCK + 1]) - 1
        shortest = min(shortest, int(lengths.min(initial=shortest)))
        width = max(width, int(lengths.max(initial=width)))
    del separators
    last = size - int(starts[-1])
    width = max(width, 1)
    # Byte j of every id, a column at a time (one gather each): after an id come its separator (0)
    # and the next id's bytes, so a byte is kept only while no 0 came before it in its row.  Past
    # the buffer's end the gather repeats its last byte ("clip"): only the last id reads there, and
    # its bytes from its length on are zeroed by hand.
    matrix: list[np.ndarray] = []
    for j in range(width):
        column = np.take(buffer[j:] if j < size else buffer[-1:], starts, mode="clip")
        if j >= last:
            column[-1] = 0
        if j > shortest:                    # every id is longer than j bytes: nothing to zero
            np.multiply(column, matrix[-1] != 0, out=column)
        matrix.append(column)
    del buffer, raw, starts
    return _encode_matrix(matrix, count, width, ascii_only)


def encode_utf8_chunks(chunks: list[tuple[np.ndarray, np.ndarray]],
                       packable: Callable[[], None] | None = None) -> IdColumn | None:
    """Ids held as Arrow string arrays hold them, in :func:`encode_strings`'s encoding (an
    :class:`IdColumn` with a sorted vocabulary, the same vocabulary and codes as ``encode_strings`` of
    the same ids), without a Python step per id and without a hash table of the vocabulary.

    ``chunks`` are ``(data, offsets)`` pairs, one per array, in row order: ``data`` the UTF-8 bytes
    (uint8), ``offsets`` the ``n + 1`` positions in ``data`` where each of its ``n`` ids starts and the
    last one ends.  None when this encoder cannot vouch for the ids (an empty id, a NUL byte in one:
    the 0 padding could not tell them apart; ids too varied for a 64-bit key): the caller encodes
    them another way.  Used by the TREC run reader on pyarrow's columns (a run's 5M document ids:
    pyarrow's own ``dictionary_encode`` probes a hash table of its 1M distinct ids once a row, several
    times the cost of these streaming gathers and one SIMD sort).  Once the ids' bytes are gathered and
    known to fit the key, ``chunks`` is emptied and ``packable`` called, so a caller that kept the arrays
    for another encoding can free them before the key is built (a 50M-row run's ids are ~650 MB).
    """
    count, shortest, width, ascii_only = 0, -1, 0, True
    for data, offsets in chunks:
        n = len(offsets) - 1
        if n <= 0:
            continue
        lengths = np.diff(offsets)
        low, high = int(lengths.min()), int(lengths.max())
        shortest = low if shortest < 0 else min(shortest, low)
        width = max(width, high)
        used = data[int(offsets[0]):int(offsets[-1])]
        if len(used) and int(used.min()) == 0:          # a NUL in an id reads as padding
            return None
        ascii_only = ascii_only and (not len(used) or int(used.max()) < 0x80)
        count += n
    if count == 0:
        return IdColumn(np.asarray([], dtype="<U1"), np.zeros(0, dtype=np.int32), sorted=True)
    if shortest == 0:                       # an empty id: all padding, like a shorter id's tail
        return None
    # Byte j of every id, a column at a time: gathered a chunk at a time from each id's start, and
    # zeroed (the padding) where the id is shorter than j + 1 bytes.  A gather past an id's end reads
    # the next id (or clips at the data's end): those bytes are the ones zeroed.
    matrix = [np.empty(count, dtype=np.uint8) for _ in range(width)]
    at = 0
    for data, offsets in chunks:
        n = len(offsets) - 1
        if n <= 0:
            continue
        starts = offsets[:-1].astype(np.int64)
        lengths = np.diff(offsets)
        low = int(lengths.min())
        position = starts.copy()
        for j in range(width):
            column = matrix[j][at:at + n]
            np.take(data, position, mode="clip", out=column)
            if j >= low:
                np.multiply(column, lengths > j, out=column)
            position += 1
        at += n

    def release() -> None:
        chunks.clear()
        if packable is not None:
            packable()
    return _encode_matrix(matrix, count, width, ascii_only, release)


def _encode_matrix(matrix: list[np.ndarray], count: int, width: int, ascii_only: bool,
                   packable: Callable[[], None] | None = None) -> IdColumn | None:
    """The encoding of :func:`encode_strings` from the ids' byte columns (``matrix[j]``: byte j of every
    id, 0 past its end), which it consumes; ``packable`` is called once the ids are known to fit the key
    (a caller then frees what it kept for another encoding)."""
    row_bits = max((count - 1).bit_length(), 1)
    columns = [_byte_range_map(column) for column in matrix]
    bits = sum(need for need, _, _ in columns)
    if bits + row_bits > _KEY_BITS:         # ranks of the bytes present: fewer bits, one count a column
        columns = [_byte_rank_map(column) if byte_map[0] else byte_map for column, byte_map in zip(matrix, columns)]
        bits = sum(need for need, _, _ in columns)
    if bits > _KEY_BITS:
        return None
    if packable is not None:
        packable()
    packed = bits + row_bits <= _KEY_BITS
    key = _pack_key(matrix, columns, row_bits if packed else 0, count)
    if packed:
        key.sort()                          # one SIMD sort of (id key, row): rows of one id together
        rows = (key & np.uint64((1 << row_bits) - 1)).view(np.int64)
        key >>= np.uint64(row_bits)
        first = np.empty(count, dtype=bool)
        first[0] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
        del key
        code_type = np.int32 if count < 2**31 else np.int64
        sorted_codes = np.cumsum(first, dtype=code_type)
        sorted_codes -= 1
        codes: np.ndarray = np.empty(count, dtype=code_type)
        codes[rows] = sorted_codes
        del sorted_codes
        representatives = rows[first]
    else:                                   # the row number does not fit beside the key
        _, representatives, codes = np.unique(key, return_index=True, return_inverse=True)
    vocab_bytes = np.stack([column.take(representatives) for column in matrix], axis=1)
    matrix.clear()                          # the caller's list too: the byte columns are freed here
    if ascii_only:                          # numpy's own '<U' layout: code points, 0-padded
        vocab = vocab_bytes.astype("<u4").view(f"<U{width}").reshape(-1)
    else:
        vocab = np.asarray([bytes(row).rstrip(b"\0").decode("utf-8") for row in vocab_bytes], dtype=str)
    return IdColumn(vocab, narrow_codes(codes.reshape(-1), len(vocab)), sorted=True)


def _joined_utf8(groups: Iterable[Iterable[str]]) -> tuple[bytearray, bool] | None:
    """The ids of ``groups`` as UTF-8, separated by NUL bytes, and whether all are ASCII; None for an id
    UTF-8 cannot encode (a lone surrogate).  Each group's ids are joined by ``str.join`` (its small
    list stays in cache; one list of all ids would not), a batch of groups at a time, so the text is
    held once, as bytes, plus one batch."""
    out = bytearray()
    ascii_only = True
    remaining = iter(groups)
    try:
        while batch := list(itertools.islice(remaining, 1024)):
            text = "\0".join(map("\0".join, batch))
            if out:
                out += b"\0"
            ascii_only = ascii_only and text.isascii()
            out += text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return out, ascii_only


# How a byte position maps into bits: (bits, table of the 256 byte values, affine).  ``affine`` (range
# maps) is ``(shift, padded)``: the table is ``byte - shift`` for every byte present, except the padding 0
# (mapped to 0) when ``padded``, which _pack_key then computes in uint8 arithmetic instead of a table
# lookup (several times faster: numpy's take converts the uint8 indices to intp first); None for rank maps.
_ByteMap = tuple[int, np.ndarray, "tuple[int, bool] | None"]


def _byte_range_map(column: np.ndarray) -> _ByteMap:
    """``(bits, table, affine)`` mapping a byte column order-preservingly into ``bits`` bits from its
    range alone (two reductions, no count): the padding 0 to 0 and bytes ``lo..hi`` to ``1..hi-lo+1``
    (or ``0..hi-lo`` when no id ends before this position); a constant column needs 0 bits."""
    high, low = int(column.max()), int(column.min())
    table = np.zeros(256, dtype=np.uint32)
    if low == high:
        return 0, table, None
    first = 0 if low else 1
    if not low:
        low = int(column.min(where=column != 0, initial=255))
    table[low:high + 1] = np.arange(first, first + high - low + 1, dtype=np.uint32)
    return (first + high - low).bit_length(), table, (low - first, bool(first))


def _byte_rank_map(column: np.ndarray) -> _ByteMap:
    """``(bits, table, None)`` mapping each byte of ``column`` to its rank among the bytes present."""
    present = np.bincount(column, minlength=256) > 0
    return (int(np.count_nonzero(present)) - 1).bit_length(), (np.cumsum(present) - 1).astype(np.uint32), None


def _pack_key(matrix: list[np.ndarray], columns: list[_ByteMap], row_bits: int, count: int) -> np.ndarray:
    """The uint64 key of :func:`encode_strings`: the mapped bytes of ``columns``, first position in the
    highest bits, above ``row_bits`` bits holding the row number.  The mapped bytes are gathered 32
    bits at a time in a uint32 word (half the memory traffic of shifting the uint64 key for each
    position), and the row numbers are added a block at a time (no temporary of the key's size)."""
    key = np.zeros(count, dtype=np.uint64)
    shift = sum(need for need, _, _ in columns) + row_bits
    word: np.ndarray | None = None
    word_bits = 0
    value = np.empty(count, dtype=np.uint32)     # one buffer for every position's mapped bytes
    small = np.empty(count, dtype=np.uint8)      # and for the range maps' uint8 arithmetic
    for column, (need, table, affine) in [*zip(matrix, columns), (None, (0, None, None))]:
        if word is not None and (column is None or word_bits + need > 32):     # the word is full: into the key
            shift -= word_bits
            for start in range(0, count, _BLOCK):
                part = word[start:start + _BLOCK]
                key[start:start + _BLOCK] |= np.left_shift(part, np.uint64(shift), dtype=np.uint64)
            word, word_bits = None, 0
        if not need or column is None or table is None:
            continue
        mapped: np.ndarray
        if affine is not None:              # byte - shift (mod 256: exact for the bytes present), padding 0
            offset, padded = affine
            np.subtract(column, np.uint8(offset), out=small)
            if padded and offset:           # the padding 0 wrapped round: back to 0
                np.multiply(small, column != 0, out=small)
            mapped = small
        else:
            np.take(table, column, out=value)
            mapped = value
        if word is None:
            word = mapped.astype(np.uint32)
        else:
            word <<= np.uint32(need)
            word |= mapped
        word_bits += need
    if row_bits:
        for start in range(0, count, _BLOCK):
            key[start:start + _BLOCK] |= np.arange(start, min(start + _BLOCK, count), dtype=np.uint64)
    return key
