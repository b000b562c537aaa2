"""BEIR-layout datasets: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

Each file may also be gzip-compressed (``corpus.jsonl.gz`` ...).  Loading validates
everything a metric would silently get wrong: malformed JSON, missing fields,
duplicate ids, empty texts, and qrels that name unknown queries or documents.

Ids (``_id``) are JSON strings without whitespace: a document id with a space would be
written to ``run.trec.gz`` and split into two fields when the run is read back (by the
harness, trec_eval or any other tool).  A JSON integer id is accepted and converted
exactly with ``str(int)`` (real releases number their rows, e.g. MKQA's ``example_id``);
booleans, floats, null, lists and objects are refused instead of becoming ``"True"``
or ``"1.0"``.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.data.qrels import BEIR_EXPECTED, TREC_EXPECTED, Qrels, read_qrels, separation
from harness.errors import InputError
from harness.io.readers import check_input_dir, check_input_file, iter_input_lines, json_id, similar_files

DATASET_FOLDER = "a BEIR-layout folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv"


@dataclass
class Corpus:
    """Documents as parallel lists (ids, titles, texts)."""

    ids: list[str]
    titles: list[str]
    texts: list[str]
    source: str | None = None
    _hash: str | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    def passages(self, sep: str = " ") -> list[str]:
        """Text fed to encoders and BM25: ``title + sep + text`` (stripped), as BEIR/MTEB do."""
        return [(t + sep + x).strip() if t else x.strip() for t, x in zip(self.titles, self.texts)]

    def content_hash(self) -> str:
        """SHA-256 over ids, titles and texts: the corpus identity used by caches and manifests."""
        if self._hash is None:
            digest = hashlib.sha256()
            for i, t, x in zip(self.ids, self.titles, self.texts):
                digest.update(i.encode())
                digest.update(b"\x1f")
                digest.update(t.encode())
                digest.update(b"\x1f")
                digest.update(x.encode())
                digest.update(b"\x1e")
            self._hash = digest.hexdigest()
        return self._hash

    def subset(self, ids) -> Corpus:
        wanted = set(ids)
        keep = [i for i, d in enumerate(self.ids) if d in wanted]
        return Corpus([self.ids[i] for i in keep], [self.titles[i] for i in keep], [self.texts[i] for i in keep],
                      self.source)


@dataclass
class Queries:
    """Queries as parallel lists (ids, texts)."""

    ids: list[str]
    texts: list[str]
    source: str | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, ids) -> Queries:
        wanted = set(ids)
        keep = [i for i, q in enumerate(self.ids) if q in wanted]
        return Queries([self.ids[i] for i in keep], [self.texts[i] for i in keep], self.source)

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for i, t in zip(self.ids, self.texts):
            digest.update(i.encode() + b"\x1f" + t.encode() + b"\x1e")
        return digest.hexdigest()


@dataclass
class BeirDataset:
    """A loaded BEIR-layout dataset with queries restricted to the judged ones."""

    corpus: Corpus
    queries: Queries
    qrels: Qrels
    path: Path
    split: str

    @property
    def name(self) -> str:
        return self.path.name


def iter_jsonl(path: str | Path, what: str = "file") -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line; bad JSON raises InputError.

    Reading goes through :func:`~harness.io.readers.iter_input_lines`, so a missing
    file, a directory, non-UTF-8 bytes or a broken ``.gz`` are InputErrors too.
    """
    for line_no, raw in iter_input_lines(path, what):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON ({exc.msg} at column {exc.colno})", line_no) from None
        except (RecursionError, ValueError) as exc:    # nesting too deep, an integer of > 4300 digits
            raise InputError(path, f"malformed JSON ({type(exc).__name__}: {exc})", line_no) from None
        if not isinstance(obj, dict):
            raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", line_no)
        if "\\ud" in raw or "\\uD" in raw:
            _check_surrogates(obj, path, line_no)
        yield line_no, obj


def _check_surrogates(obj: dict, path, line_no: int) -> None:
    """JSON may escape a lone UTF-16 surrogate (``"\\ud800"``): a str that cannot be encoded
    back to UTF-8 (hashes and writers would fail much later)."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(path, "string contains a lone UTF-16 surrogate escape (not a valid character)",
                         line_no) from None


def _string_field(obj: dict, key: str, path, line_no: int, required: bool = True) -> str:
    if key not in obj:
        if required:
            raise InputError(path, f"missing field {key!r}", line_no)
        return ""
    value = obj[key]
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise InputError(path, f"field {key!r} must be a string, got {type(value).__name__}", line_no)
    return value


def find_file(directory: Path, stem: str) -> Path:
    """Return ``directory/stem`` or ``directory/stem.gz``, whichever exists."""
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.exists():
            return check_input_file(candidate)
    if not directory.is_dir():
        raise InputError(directory / stem, f"file not found: the folder {directory} does not exist")
    others = similar_files(directory, stem)
    if others:
        found = "; ".join(f"{p.name} ({_first_line_separation(p)})" for p in others)
        raise InputError(directory / stem, f"file not found (also looked for .gz), but {found} is beside it: "
                                           f"the harness reads {stem}{_expected_content(stem)}")
    raise InputError(directory / stem, "file not found (also looked for .gz)")


def _first_line_separation(path: Path) -> str:
    """How a neighbouring file's first line is separated (unreadable files are only named)."""
    try:
        for _, line in iter_input_lines(path):
            return separation(line)
    except InputError:
        return "not readable as UTF-8 text"
    return "empty"


def _expected_content(name: str) -> str:
    if name.endswith(".tsv"):
        return f": {BEIR_EXPECTED} or {TREC_EXPECTED}; rename or convert the file"
    return "; rename or convert the file"


def read_corpus(path: str | Path, allow_empty: bool = False) -> Corpus:
    """Read ``corpus.jsonl`` rows ``{"_id", "title", "text"}`` (title optional)."""
    path = Path(path)
    ids: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    first_line: dict[str, int] = {}
    for line_no, obj in iter_jsonl(path):
        doc_id = json_id(obj, "_id", path, line_no, "document id")
        title = _string_field(obj, "title", path, line_no, required=False)
        text = _string_field(obj, "text", path, line_no)
        if not allow_empty and not (title.strip() or text.strip()):
            raise InputError(path, f"document {doc_id!r} has empty title and text", line_no)
        if doc_id in first_line:
            raise InputError(path, f"duplicate document id {doc_id!r} (first on line {first_line[doc_id]})", line_no)
        first_line[doc_id] = line_no
        ids.append(doc_id)
        titles.append(title)
        texts.append(text)
    if not ids:
        raise InputError(path, "corpus contains no documents")
    return Corpus(ids, titles, texts, source=str(path))


def read_queries(path: str | Path) -> Queries:
    """Read ``queries.jsonl`` rows ``{"_id", "text"}``."""
    path = Path(path)
    ids: list[str] = []
    texts: list[str] = []
    first_line: dict[str, int] = {}
    for line_no, obj in iter_jsonl(path):
        qid = json_id(obj, "_id", path, line_no, "query id")
        text = _string_field(obj, "text", path, line_no)
        if not text.strip():
            raise InputError(path, f"query {qid!r} has empty text", line_no)
        if qid in first_line:
            raise InputError(path, f"duplicate query id {qid!r} (first on line {first_line[qid]})", line_no)
        first_line[qid] = line_no
        ids.append(qid)
        texts.append(text)
    if not ids:
        raise InputError(path, "no queries")
    return Queries(ids, texts, source=str(path))


def check_qrels_ids(qrels: Qrels, query_ids, doc_ids, path: str | Path) -> None:
    """Raise InputError (with the qrels line) if qrels name unknown queries or documents."""
    known_q = np.isin(qrels.query_ids, np.asarray(list(query_ids), dtype=str))
    known_d = np.isin(qrels.doc_ids, np.asarray(list(doc_ids), dtype=str))
    bad = np.flatnonzero(~(known_q & known_d))
    if not len(bad):
        return
    i = int(bad[0])
    qid, did = str(qrels.query_ids[i]), str(qrels.doc_ids[i])
    what = f"unknown query id {qid!r}" if not known_q[i] else f"unknown document id {did!r} (query {qid!r})"
    line = _find_qrels_line(path, qid, did)
    raise InputError(path, f"qrels name an {what}; {len(bad)} judgement(s) refer to ids not in the dataset", line)


def _find_qrels_line(path: str | Path, qid: str, did: str) -> int | None:
    for line_no, raw in iter_input_lines(path, "qrels file"):
        cols = raw.split()
        if len(cols) >= 3 and qid in cols and did in cols:
            return line_no
    return None


def load_beir(directory: str | Path, split: str = "test", qrels_file: str | Path | None = None,
              allow_empty_docs: bool = False) -> BeirDataset:
    """Load a BEIR-layout folder; queries are restricted to those judged in ``split``."""
    directory = check_input_dir(directory, "dataset directory", DATASET_FOLDER)
    corpus = read_corpus(find_file(directory, "corpus.jsonl"), allow_empty=allow_empty_docs)
    queries = read_queries(find_file(directory, "queries.jsonl"))
    qrels_path = Path(qrels_file) if qrels_file else find_file(directory / "qrels", f"{split}.tsv")
    qrels = read_qrels(qrels_path)
    check_qrels_ids(qrels, queries.ids, corpus.ids, qrels_path)
    judged = set(qrels.query_list())
    return BeirDataset(corpus, queries.subset(judged), qrels, directory, split)
