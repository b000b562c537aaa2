"""Fast path for TREC run and qrels files: pyarrow's CSV reader, columns straight into arrays.

The line-by-line readers in :mod:`harness.data.run` and :mod:`harness.data.qrels` are the
reference: they name the file and line of every problem and follow trec_eval's parsing to
the letter.  This module reads the same files with ``pyarrow.csv`` (multi-threaded C++,
ids dictionary-encoded, numbers parsed in C++, no Python object per line) and returns
``None`` whenever it cannot vouch that the line-by-line reader would read exactly the same
values.  The callers then run the line-by-line reader, which either reads the file (rare
layouts: several spaces between fields, tabs mixed with spaces, hexadecimal scores) or
raises its exact ``file:line`` error.

The fast path accepts a file only when every line is empty or holds exactly the expected
number of fields, separated by one space (or one tab, whichever the first line uses), and:

* ids and the other text fields are non-empty, valid UTF-8 and hold no ASCII whitespace,
  control character or Unicode-only whitespace (the checks run once per distinct value,
  on the dictionaries);
* numbers parse in pyarrow: its float parser accepts only plain decimal/exponent numbers
  (and ``inf``/``nan``, which the callers refuse as non-finite) and rounds correctly, so
  its values equal C ``strtod``'s; its integer parser accepts only ``[+-]digits``;
* there is no byte-order mark and no ``\\r`` outside ``\\r\\n`` (pyarrow would skip the one
  and end a line at the other; trec_eval does neither).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from harness.data.ids import IdColumn, arrow_numpy, encode_utf8_chunks, narrow_codes
from harness.io.readers import UNICODE_ONLY_WHITESPACE

# A value with any of these needs the line-by-line reader (it splits there, or refuses it).
_ODD_CHARS = "[\\x00-\\x20\\x7f" + "".join(f"\\x{{{ord(c):x}}}" for c in UNICODE_ONLY_WHITESPACE) + "]"
_ODD_PATTERN = re.compile("[\x00-\x20\x7f" + "".join(UNICODE_ONLY_WHITESPACE) + "]")   # the same, for `re`
_TEXT = pa.dictionary(pa.int32(), pa.string())
_BOM = b"\xef\xbb\xbf"
RUN_COLUMNS = ("qid", "q0", "docid", "rank", "score", "tag")
BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class Columns:
    """Columns of a file read on the fast path, in file order; ids stay dictionary-encoded."""

    queries: pa.ChunkedArray
    docs: pa.ChunkedArray
    values: np.ndarray
    last_tag: str = ""

    def query_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sorted unique query ids, code of each row)``: codes keep string order."""
        uniques, codes = dictionary_codes(self.queries)
        order = np.argsort(uniques)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return uniques[order], rank[codes]

    def doc_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(unique doc ids, code of each row)``, the uniques in no particular order."""
        return dictionary_codes(self.docs)

    def query_ids(self) -> np.ndarray:
        uniques, codes = dictionary_codes(self.queries)
        return uniques[codes]

    def doc_ids(self) -> np.ndarray:
        uniques, codes = dictionary_codes(self.docs)
        return uniques[codes]


def read_bytes(path: Path) -> bytes | None:
    """The (decompressed) bytes of ``path``; None on any failure (the slow reader names it)."""
    try:
        if path.suffix == ".gz":
            with pa.input_stream(str(path), compression="gzip") as stream:
                return stream.read()
        return path.read_bytes()
    except (OSError, pa.ArrowException):
        return None


def _plain_lines(data: bytes) -> bool:
    """No BOM, and every ``\\r`` ends a ``\\r\\n`` line."""
    if data.startswith(_BOM):
        return False
    cr = data.count(b"\r")
    return cr == 0 or cr == data.count(b"\r\n")


def _delimiter(line: bytes) -> str | None:
    """The one field separator of the first line: a space or a tab (not both)."""
    has_space, has_tab = b" " in line, b"\t" in line
    if has_space == has_tab:
        return None
    return " " if has_space else "\t"


def _read_options(names: Sequence[str], block_size: int, skip_rows: int = 0) -> pacsv.ReadOptions:
    return pacsv.ReadOptions(column_names=list(names), skip_rows=skip_rows, block_size=block_size)


def _parse_options(delimiter: str) -> pacsv.ParseOptions:
    return pacsv.ParseOptions(delimiter=delimiter, quote_char=False, double_quote=False, escape_char=False,
                              newlines_in_values=False, ignore_empty_lines=True)


def _convert_options(types: dict) -> pacsv.ConvertOptions:
    return pacsv.ConvertOptions(column_types=types, null_values=[], true_values=[], false_values=[],
                                strings_can_be_null=False, quoted_strings_can_be_null=False)


def _read_table(data: bytes, names: Sequence[str], types: dict, delimiter: str, skip_rows: int = 0) -> pa.Table | None:
    try:
        table = pacsv.read_csv(pa.BufferReader(_arrow_buffer(data)),  # not py_buffer: see _LineBlocks
                               read_options=_read_options(names, 1 << 26, skip_rows),
                               parse_options=_parse_options(delimiter), convert_options=_convert_options(types))
    except (pa.ArrowException, ValueError):
        return None
    return table.unify_dictionaries() if table.num_rows else None


def _dictionary(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0).dictionary


def _clean(column: pa.ChunkedArray) -> bool:
    """Every distinct value is non-empty and free of whitespace and control characters."""
    return _clean_values(_dictionary(column))


def _clean_values(values: pa.Array) -> bool:
    # min() and not equal(..., 0): pyarrow converts a Python scalar through code that imports pandas
    # (half a second of CPU), which nothing here needs.
    if len(values) and pc.min(pc.binary_length(values)).as_py() == 0:
        return False
    return not pc.any(pc.match_substring_regex(values, _ODD_CHARS)).as_py()


def _clean_strings(values: Iterable[str]) -> bool:
    """:func:`_clean_values` for a few Python strings (the distinct Q0 and tag fields)."""
    return all(value and not _ODD_PATTERN.search(value) for value in values)


def dictionary_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A unified dictionary column as ``(distinct values as a numpy unicode array, code of each row)``:
    one Python string per distinct id only."""
    uniques = np.asarray(_dictionary(column).to_pylist(), dtype=str)
    codes = np.concatenate([arrow_numpy(chunk.indices) for chunk in column.chunks])
    return uniques, codes


@dataclass(frozen=True)
class RunColumns:
    """A run file read on the fast path, rows in file order: ids as integer codes into one
    vocabulary each (queries sorted, so their codes keep string order; documents in first-seen
    order), scores as float64."""

    queries: IdColumn
    docs: IdColumn
    scores: np.ndarray
    last_tag: str = ""


class _LineBlocks:
    """The (decompressed) bytes of a file in blocks of whole lines, each copied into memory that
    pyarrow owns, checked on the way through: whether every ``\\r`` ends a ``\\r\\n`` (else pyarrow
    and trec_eval would split lines differently).  ``head`` holds the bytes already read to find
    the first line.

    The blocks are read here, on the calling thread, and handed to pyarrow as its own memory, so
    that none of pyarrow's threads ever calls into Python or holds a Python object.  Handing it a
    Python file instead (``pacsv.open_csv(python_file)``) let its read-ahead thread call the
    file's ``read`` for blocks nobody would parse any more after a bad block had ended the loop,
    and keep Python ``bytes`` behind every block, released on whichever pyarrow thread dropped the
    block last.  When the command then exited at once (the line-by-line reader names the bad line
    a moment later), such a thread entered the finalizing interpreter and the process died with
    SIGABRT (``terminate called without an active exception``, ``Fatal Python error:
    PyGILState_Release``) instead of exiting 2 with its one-line error."""

    def __init__(self, source, head: bytes, block_size: int):
        self._source = source
        self._head = head
        self._block_size = block_size
        self.cr = 0
        self.crlf = 0
        self._last = b""

    def _check(self, data: bytes) -> None:
        cr = data.count(b"\r")
        if cr:                              # most files have none: no second pass for "\r\n"
            self.cr += cr
            self.crlf += data.count(b"\r\n")
        self.crlf += self._last == b"\r" and data[:1] == b"\n"
        self._last = data[-1:]

    def __iter__(self) -> Iterator[pa.Buffer]:
        carry, self._head = self._head, b""
        self._check(carry)
        while data := self._source.read(self._block_size):
            self._check(data)
            cut = data.rfind(b"\n") + 1
            if not cut:                     # no line ends in this block: keep it for the next
                carry += data
                continue
            yield _arrow_buffer(carry, memoryview(data)[:cut])
            carry = data[cut:]
        if carry:
            yield _arrow_buffer(carry)

    @property
    def plain_lines(self) -> bool:
        return self.cr == self.crlf


def _arrow_buffer(*parts: bytes | memoryview) -> pa.Buffer:
    """``parts`` copied, one after the other, into one buffer that pyarrow allocated (``pa.py_buffer``
    would keep the Python object and release it, under the GIL, wherever pyarrow drops the buffer)."""
    buffer = pa.allocate_buffer(sum(len(part) for part in parts))
    writer = pa.FixedSizeBufferWriter(buffer)
    for part in parts:
        writer.write(part)
    writer.close()
    return buffer


def _open_with_head(path: Path):
    """``(binary stream, bytes up to and including the first newline)``, or None on failure."""
    try:
        source = pa.input_stream(str(path), compression="gzip" if path.suffix == ".gz" else None)
        head = source.read(1 << 16)
        while b"\n" not in head:
            more = source.read(1 << 16)
            if not more:
                break
            head += more
    except (OSError, pa.ArrowException):
        return None
    return source, head


def read_run_columns(path: Path, block_size: int = 1 << 24) -> RunColumns | None:
    """Columns of a TREC run file (``qid Q0 docid rank score tag``), or None (use the slow reader).

    The file goes through pyarrow's CSV reader block by block (``block_size`` bytes of whole lines,
    read on this thread: see :class:`_LineBlocks`) and only the ids' codes and the scores are kept:
    peak memory is a few bytes per line plus one block, never the whole text.  Query ids, Q0 and tag
    are dictionary-encoded as they are parsed (few distinct values); document ids are kept as strings
    and encoded at the end by :func:`_doc_column`.
    """
    opened = _open_with_head(path)
    if opened is None:
        return None
    source, head = opened
    with source:
        if head.startswith(_BOM):
            return None
        delimiter = _delimiter(head[:head.find(b"\n")] if b"\n" in head else head)
        if delimiter is None:
            return None
        blocks = _LineBlocks(source, head, block_size)
        types = {"qid": _TEXT, "q0": _TEXT, "docid": pa.string(), "rank": pa.int64(), "score": pa.float64(),
                 "tag": _TEXT}
        query_chunks: list[pa.Array] = []
        doc_chunks: list[pa.Array] = []
        score_chunks: list[np.ndarray] = []
        other: set[str] = set()             # the distinct Q0 and tag fields
        last_tag = ""
        options = {"read_options": _read_options(RUN_COLUMNS, 1 << 20), "parse_options": _parse_options(delimiter),
                   "convert_options": _convert_options(types)}
        try:
            for block in blocks:
                # One block at a time, parsed in parallel 1 MiB pieces (one chunk each).
                table = pacsv.read_csv(pa.BufferReader(block), **options)
                del block
                if not table.num_rows:
                    continue
                query_chunks.extend(table.column(0).chunks)
                doc_chunks.extend(table.column(2).chunks)
                score_chunks.append(arrow_numpy(table.column(4)))
                for index in (1, 5):
                    for chunk in table.column(index).chunks:
                        other.update(chunk.dictionary.to_pylist())
                last_tag = table.column(5)[-1].as_py()
                del table
        except (pa.ArrowException, ValueError, OSError):
            return None
    if not doc_chunks or not blocks.plain_lines or not _clean_strings(other):
        return None
    scores = np.concatenate(score_chunks)
    del score_chunks
    queries = _query_column(pa.chunked_array(query_chunks, type=_TEXT).unify_dictionaries())
    del query_chunks
    if queries is None:
        return None
    docs = _doc_column(doc_chunks)
    if docs is None:
        return None
    return RunColumns(queries, docs, scores, last_tag)


def _doc_column(chunks: list[pa.Array]) -> IdColumn | None:
    """Document ids (string arrays, which it consumes) as an :class:`IdColumn`; None when one is not clean.

    Printable ASCII ids (the usual ones; checked on the bytes themselves, no regex) are encoded by
    :func:`~harness.data.ids.encode_utf8_chunks` straight from the arrays' buffers: a sorted vocabulary
    (so tied rows need no sort of the vocabulary either) and no hash table probed once a row.  Other
    ids, or ids it cannot pack, are dictionary-encoded by pyarrow and their distinct values checked."""
    buffers = _utf8_buffers(chunks)
    if buffers is not None and _printable_ascii(buffers):
        docs = encode_utf8_chunks(buffers, packable=chunks.clear)     # the arrays freed once they pack
        del buffers
        if docs is not None:
            return docs
    del buffers
    encoded = pc.dictionary_encode(pa.chunked_array(chunks, type=pa.string()))
    chunks.clear()
    vocab = encoded.chunk(0).dictionary
    if not _clean_values(vocab):
        return None
    codes = np.concatenate([arrow_numpy(chunk.indices) for chunk in encoded.chunks])
    del encoded
    return IdColumn(np.asarray(vocab.to_pylist(), dtype=str), narrow_codes(codes, len(vocab)), sorted=False,
                    arrow=vocab)


def _utf8_buffers(chunks: Sequence[pa.Array]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """``(data bytes, offsets)`` of each string array, as numpy views of its buffers (no copy); None
    when one has nulls (the CSV reader makes none) or is not a plain ``string`` array."""
    out = []
    for chunk in chunks:
        if chunk.type != pa.string() or chunk.null_count:
            return None
        _, offsets, data = chunk.buffers()
        if offsets is None:
            return None
        out.append((np.frombuffer(data, dtype=np.uint8) if data is not None and data.size else
                    np.zeros(0, dtype=np.uint8),
                    np.frombuffer(offsets, dtype=np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]))
    return out


def _printable_ascii(buffers: Sequence[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Every byte of every id is printable ASCII other than the space (``!`` to ``~``): clean ids, as
    :func:`_clean_values` would find them, bar the empty id (which the encoder refuses)."""
    for data, offsets in buffers:
        used = data[int(offsets[0]):int(offsets[-1])] if len(offsets) else data[:0]
        if len(used) and (int(used.min()) <= 0x20 or int(used.max()) >= 0x7f):
            return False
    return True


def _query_column(column: pa.ChunkedArray) -> IdColumn | None:
    """A unified dictionary column as an :class:`IdColumn` with a sorted vocabulary."""
    vocab = column.chunk(0).dictionary
    if not _clean_values(vocab):
        return None
    uniques = np.asarray(vocab.to_pylist(), dtype=str)
    order = np.argsort(uniques, kind="stable")
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    codes = np.concatenate([rank[arrow_numpy(chunk.indices)] for chunk in column.chunks])
    return IdColumn(uniques[order], codes, sorted=True)


def read_qrels_columns(path: Path, fmt: str = "auto") -> Columns | None:
    """Columns of TREC (``qid iter docid rel``) or BEIR tsv qrels, or None (use the slow reader)."""
    data = read_bytes(path)
    if data is None or not _plain_lines(data):
        return None
    first = data[:data.find(b"\n")] if b"\n" in data else data
    try:
        head = tuple(c.strip() for c in first.decode("utf-8").removesuffix("\r").split("\t"))
    except UnicodeDecodeError:
        return None
    beir = fmt in ("auto", "beir") and head == BEIR_QRELS_HEADER
    if fmt == "beir" and not beir:
        return None
    names: tuple[str, ...]
    texts: tuple[str, ...]
    delimiter = "\t" if beir else _delimiter(first)
    if delimiter is None:
        return None
    if beir:
        names, texts = ("qid", "docid", "rel"), ("qid", "docid")
        types = {"qid": _TEXT, "docid": _TEXT, "rel": pa.int64()}
    else:
        names = ("qid", "iter", "docid", "rel")
        types = {"qid": _TEXT, "iter": _TEXT, "docid": _TEXT, "rel": pa.int64()}
        texts = ("qid", "iter", "docid")
    table = _read_table(data, names, types, delimiter, skip_rows=1 if beir else 0)
    del data
    if table is None or not all(_clean(table.column(name)) for name in texts):
        return None
    return Columns(table.column("qid"), table.column("docid"), arrow_numpy(table.column("rel")))
