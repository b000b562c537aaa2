"""Reading input files so that every failure is an :class:`~harness.errors.InputError`.

All readers of user input (BEIR corpora and queries, qrels, TREC runs, training rows,
the suites' release formats) open their files through :func:`open_input`,
:func:`iter_input_lines` or :func:`read_input_text`.  They turn what Python and the
decompressor raise into ``InputError(path, problem, line)``:

* a missing file, a directory where a file is expected, a file that cannot be read;
* bytes that are not UTF-8: the file is scanned again to name the line and the byte
  offset (in the decompressed stream) of the first bad byte;
* a ``.gz`` file that is not gzip, is truncated, or is corrupt (``EOFError``,
  ``gzip.BadGzipFile``, ``zlib.error``).

It also holds the number and id rules shared by the TREC readers
(:func:`parse_trec_score`, :func:`parse_trec_relevance`, :func:`check_id`), which
follow trec_eval's own parsing: scores through C ``atof`` (``strtod``), labels through
``atol``, fields split on ASCII whitespace.  Where trec_eval would silently read only
a prefix of a token (``1_000`` -> 1, ``1e30`` as a label -> 1, ``high`` -> 0) the
harness refuses the token and says what trec_eval would have read, so that every value
it accepts is exactly trec_eval's.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator
from io import BufferedReader
from pathlib import Path
from typing import IO, Any

from harness.errors import InputError
from harness.io.files import open_text

# What the decompressor raises on a .gz that is not gzip, cut short or corrupt.
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)

# Characters Python's str.split()/isspace() treat as whitespace but C's isspace() does not:
# trec_eval would keep them inside a field, Python tools would split there.
UNICODE_ONLY_WHITESPACE = ("\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                           "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_UNICODE_WS = re.compile(f"[{UNICODE_ONLY_WHITESPACE}]")
_BAD_ID_CHAR = re.compile(r"[\s\x00-\x1f\x7f]")          # \s: exactly str.isspace() (tested)

# The whole token as C strtod reads it (decimal, hex, inf/nan) and as atol reads a label.
_DEC = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_HEX = r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?"
_SPECIAL = r"[+-]?(?:inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)"
_STRTOD_FULL = re.compile(f"(?:{_DEC}|{_HEX}|{_SPECIAL})", re.IGNORECASE | re.ASCII)
_STRTOD_PREFIX = re.compile(f"(?:{_HEX}|{_DEC}|{_SPECIAL})", re.IGNORECASE | re.ASCII)
_ATOL_PREFIX = re.compile(r"[+-]?\d+", re.ASCII)
_LABEL_FULL = re.compile(r"([+-]?\d+)(?:\.0*)?", re.ASCII)    # "2" or "2.0": atol reads 2, exactly the value
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


# --------------------------------------------------------------------------- files
def check_input_file(path: str | Path, what: str = "file") -> Path:
    """``path`` as a Path; InputError if it does not exist or is a directory."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, f"{what} does not exist")
    if path.is_dir():
        raise InputError(path, f"{what} is a directory, expected a file")
    return path


def check_input_dir(path: str | Path, what: str = "folder", hint: str = "") -> Path:
    """``path`` as a Path; InputError if it does not exist or is a file (then naming the folder it is in,
    ``hint`` saying what the folder should hold)."""
    path = Path(path)
    if path.is_file():
        holds = f" ({hint})" if hint else ""
        raise InputError(path, f"{what} is a file, expected a folder{holds}; did you mean its folder {path.parent}?")
    if not path.exists():
        raise InputError(path, f"{what} does not exist")
    if not path.is_dir():
        raise InputError(path, f"{what} is not a folder")
    return path


def similar_files(directory: str | Path, name: str) -> list[Path]:
    """Files in ``directory`` with the stem of ``name`` but another extension (``test.csv`` beside a
    missing ``test.tsv``), sorted; none when the folder does not exist."""
    directory = Path(directory)
    stem = name.split(".", 1)[0]
    if not stem or not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir()
                  if p.is_file() and p.name.split(".", 1)[0] == stem and p.name not in (name, f"{name}.gz"))


@contextlib.contextmanager
def input_errors(path: str | Path, line: int | None = None) -> Iterator[None]:
    """Turn decoding, decompression and file-kind errors raised inside into InputError."""
    try:
        yield
    except InputError:
        raise
    except UnicodeDecodeError:
        raise locate_decode_error(path) from None
    except _GZIP_ERRORS as exc:
        raise InputError(path, gzip_problem(exc), line) from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, expected a file", line) from None
    except FileNotFoundError:
        raise InputError(path, "file does not exist", line) from None
    except PermissionError:
        raise InputError(path, "permission denied", line) from None
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror or exc})", line) from None


def gzip_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "compressed data ends early (truncated .gz file)"
    if isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
        return "not a gzip file, although its name ends in .gz"
    return f"corrupt gzip data ({exc})"


@contextlib.contextmanager
def open_input(path: str | Path, what: str = "file") -> Iterator[IO[str]]:
    """Open a UTF-8 text input (``.gz`` decompressed); every read error is an InputError."""
    path = check_input_file(path, what)
    with input_errors(path), open_text(path) as handle:
        yield handle


def read_input_text(path: str | Path, what: str = "file") -> str:
    """The whole decoded text of an input file (see :func:`open_input`)."""
    with open_input(path, what) as handle, input_errors(path):
        text = handle.read()
    _refuse_bom(text, path)
    return text


def iter_input_lines(path: str | Path, what: str = "file") -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line without its newline)``; lines end at ``\\n`` only
    (as trec_eval's), a ``\\r`` before it is dropped."""
    with open_input(path, what) as handle, input_errors(path):
        for line_no, raw in enumerate(_split_lf(handle), start=1):
            if line_no == 1:
                _refuse_bom(raw, path)
            yield line_no, raw.removesuffix("\r")


def _refuse_bom(text: str, path: str | Path) -> None:
    """A byte-order mark would become part of the first id (trec_eval keeps it too): refuse it
    rather than read a query id that matches nothing."""
    if text.startswith("\ufeff"):
        raise InputError(path, "starts with a byte-order mark (U+FEFF); save the file as UTF-8 without BOM", 1)


def _split_lf(handle: IO[str], block: int = 1 << 20) -> Iterator[str]:
    """Lines of a text stream split on ``\\n`` only (``str.splitlines`` also splits on
    ``\\r``, ``\\x1c``, ``\\u2028``..., which would shift every later line number)."""
    rest = ""
    while chunk := handle.read(block):
        parts = (rest + chunk).split("\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


def split_lines(text: str) -> list[str]:
    """``text`` split into lines at ``\\n`` (a final newline ends the last line, not a new one)."""
    text = text.removesuffix("\n")
    return text.split("\n") if text else []


def locate_decode_error(path: str | Path) -> InputError:
    """Scan the (decompressed) bytes again for the first byte that is not UTF-8."""
    offset = 0
    try:
        with _open_binary(Path(path)) as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return InputError(path, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at byte offset "
                                            f"{offset + exc.start} ({exc.reason})", line_no)
                offset += len(raw)
    except (OSError, *_GZIP_ERRORS) as exc:
        return InputError(path, f"not valid UTF-8 ({exc})")
    return InputError(path, "not valid UTF-8")


def _open_binary(path: Path) -> gzip.GzipFile | BufferedReader:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


# --------------------------------------------------------------------------- numbers, as trec_eval reads them
def _atof_prefix(text: str) -> tuple[str, float]:
    match = _STRTOD_PREFIX.match(text)
    if not match:
        return "", 0.0
    prefix = match.group(0)
    return prefix, _c_double(prefix)


def _c_double(token: str) -> float:
    body = token.lstrip("+-")
    if body[:2].lower() == "0x":
        try:
            value = float.fromhex(body)
        except OverflowError:               # strtod returns HUGE_VAL there
            value = float("inf")
        return -value if token.startswith("-") else value
    if body.lower().startswith("nan"):
        return float("nan")
    return float(token)


def parse_trec_score(text: str, path: str | Path | None, line: int | None) -> float:
    """A run score exactly as trec_eval's ``atof`` reads it; refused when atof would read
    only a prefix of the token (or nothing), and when the value is not finite."""
    if not _STRTOD_FULL.fullmatch(text):
        prefix, value = _atof_prefix(text)
        read = f"only {value!r} from its prefix {prefix!r}" if prefix else "it as 0"
        raise InputError(path, f"score {text!r} is not a number (trec_eval's atof would silently read {read})", line)
    value = _c_double(text)
    if not math.isfinite(value):
        why = "NaN or infinite" if math.isnan(value) or "inf" in text.lower() else "overflows a 64-bit float"
        raise InputError(path, f"score {text!r} is not finite ({why})", line)
    return value


def scores_need_checking(score_text: str) -> bool:
    """False when the fast float parser and strtod provably agree on every token of ``score_text``
    (ASCII, no ``_``); then numpy's conversion can be trusted as trec_eval's."""
    return not score_text.isascii() or "_" in score_text


def parse_trec_relevance(text: str, path: str | Path | None, line: int | None) -> int:
    """A relevance label as trec_eval's ``atol`` reads it (``2`` or ``2.0``; negative allowed);
    refused when atol would read only a prefix, or the value does not fit in 64 bits."""
    match = _LABEL_FULL.fullmatch(text)
    if not match:
        prefix = _ATOL_PREFIX.match(text)
        read = f"only {int(prefix.group(0))} from its prefix {prefix.group(0)!r}" if prefix else "it as 0"
        raise InputError(path, f"relevance {text!r} is not an integer (trec_eval's atol would silently read {read})",
                         line)
    value = int(match.group(1))
    if not INT64_MIN <= value <= INT64_MAX:
        raise InputError(path, f"relevance {text!r} is out of range (labels must fit in 64 bits, "
                               f"-2^63 to 2^63-1)", line)
    return value


# --------------------------------------------------------------------------- ids
def check_id(value: str, path: str | Path | None, line: int | None, what: str) -> str:
    """Refuse an empty id or one containing whitespace (it could not be written to, and read
    back from, a TREC run or qrels file: trec_eval and every Python tool split fields there)."""
    if not value:
        raise InputError(path, f"empty {what}", line)
    found = _BAD_ID_CHAR.search(value)
    if found is not None:
        bad = found.group(0)
        raise InputError(path, f"{what} {value!r} contains whitespace or a control character (U+{ord(bad):04X}); "
                               "ids must be single tokens to survive TREC run files", line)
    return value


def json_id(obj: dict, key: str, path: str | Path | None, line: int | None, what: str) -> str:
    """The id in JSON field ``key``: a string, or an integer converted exactly with ``str(int)``
    (MKQA's release numbers its examples); booleans, floats, null, lists and objects are refused."""
    if key not in obj:
        raise InputError(path, f"missing field {key!r}", line)
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(path, f"field {key!r} must be a string or an integer, got {_json_type(value)}", line)
    return check_id(str(value), path, line, what)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, float):
        return f"number {value!r}"
    names: dict[type, str] = {list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def refuse_unicode_whitespace(text: str, path: str | Path | None, line: int | None = None) -> None:
    """Refuse whitespace that C's isspace() does not split on but Python's ``split()`` does
    (U+3000, U+00A0, U+2028...): trec_eval would keep it inside a field, Python tools split
    there, so the two would read different ids.  ``text`` is one line (``line`` given) or a
    whole file (the line is counted)."""
    match = _UNICODE_WS.search(text)
    if match is None:
        return
    at = match.start()
    if line is None:
        line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    raise InputError(path, f"contains the whitespace character U+{ord(text[at]):04X} at column {column}; "
                           "trec_eval would keep it inside a field while Python tools split there", line)


def read_json_object(path: str | Path, what: str = "file", hint: str = "") -> dict[str, Any]:
    """A JSON file that must hold an object (manifests, model configs, suite summaries); a missing file,
    bad UTF-8, malformed JSON (with its line) or another JSON type is an InputError.  ``hint`` ends the
    message with the likely fix (e.g. "re-save the model")."""
    return read_json_object_text(path, what, hint)[0]


def read_json_object_text(path: str | Path, what: str = "file", hint: str = "") -> tuple[dict[str, Any], str]:
    """:func:`read_json_object` and the text it was parsed from (to find the line of a bad entry)."""
    text = read_input_text(path, what)
    tail = f"; {hint}" if hint else ""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON ({exc.msg}, column {exc.colno}){tail}", exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object, got {type(data).__name__}{tail}", 1)
    return data, text
