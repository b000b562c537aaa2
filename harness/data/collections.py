"""Training collections: named sources of ``{"query","pos","neg"}`` rows with metadata.

A *source* (dataset/domain) is what the samplers weight and what group ids name.
Sources come from three layouts:

* a folder of ``<domain>.jsonl`` files, optionally with ``domains.json``::

      {"<domain>": {"file": "<domain>.jsonl", "language": "en", "task": "retrieval",
                    "symmetric": false, "prompt": "Given a question, ...", "only_hn": false}}

  Without ``domains.json`` the metadata comes from ``suites/collections/<folder name>.json``
  shipped with the project (same format), else from the defaults below;
* a single ``.jsonl`` file (one source named after the file);
* a BEIR folder used for training: positives from ``qrels/<split>.tsv`` and the
  corpus, hard negatives from a TREC run file (its top documents minus the positives)
  or none (to be mined later).

``prompt`` may be a list: one of its prompts is drawn per example (paper 000 lists
two prompts for several datasets "for diversity").  Keys starting with ``_`` in a
metadata file are comments (for example the citation of where prompts came from).
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.data import load_beir, read_run
from harness.data.training import FIELDS, TrainingRow, format_column_map, read_training_rows
from harness.errors import ConfigError, InputError
from harness.io import sha256_file
from harness.io.readers import read_input_text

log = logging.getLogger(__name__)

DEFAULT_METADATA: dict[str, Any] = {
    "language": "und", "task": "retrieval", "symmetric": False, "prompt": "", "only_hn": False,
}
_KNOWN_KEYS = {"file", *DEFAULT_METADATA}
SHIPPED_METADATA_DIR = Path(__file__).resolve().parents[2] / "suites" / "collections"


@dataclass
class TrainingSource:
    """One dataset/domain: its rows and how to present them to the model."""

    name: str
    rows: list[TrainingRow]
    language: str | list[str] = "und"
    task: str = "retrieval"
    symmetric: bool = False           # documents also get the prompt (METHODS.md 0.2)
    prompt: str | list[str] = ""      # instruction(s); "" means no instruction
    only_hn: bool = False             # mask in-batch / cross-batch negatives for this source
    path: str | None = None
    fingerprint: str = ""             # content identity (file hashes + options)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def prompts(self) -> list[str]:
        """The instruction list (empty when the source has no instruction)."""
        if isinstance(self.prompt, str):
            return [self.prompt] if self.prompt else []
        return [p for p in self.prompt if p]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "rows": len(self.rows), "language": self.language, "task": self.task,
                "symmetric": self.symmetric, "prompt": self.prompt, "only_hn": self.only_hn,
                "path": self.path, "fingerprint": self.fingerprint}


@dataclass
class TrainingData:
    """The sources of one training run, in a fixed order (source index = group id)."""

    sources: list[TrainingSource]

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError("training data has no sources")
        seen: dict[str, str | None] = {}
        for src in self.sources:
            if src.name in seen:
                raise ConfigError(f"two training sources are named {src.name!r} ({seen[src.name]} and {src.path}); "
                                  "select one with 'domains' or rename a file")
            seen[src.name] = src.path

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    @property
    def sizes(self) -> list[int]:
        return [len(s) for s in self.sources]

    def __len__(self) -> int:
        return len(self.sources)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ConfigError(f"unknown training source {name!r}; sources: {', '.join(self.names)}") from None

    def fingerprint(self) -> str:
        """Identity of the data for caches: source names, metadata and content hashes."""
        digest = hashlib.sha256()
        for src in self.sources:
            desc = src.describe()
            desc.pop("path")
            digest.update(json.dumps(desc, sort_keys=True, ensure_ascii=False).encode())
        return digest.hexdigest()[:24]

    def describe(self) -> list[dict[str, Any]]:
        return [s.describe() for s in self.sources]


# ----------------------------------------------------------------------------- metadata

def read_metadata_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read and validate a ``domains.json``-format file: domain -> metadata dict."""
    path = Path(path)
    try:
        obj = json.loads(read_input_text(path, "metadata file"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON ({exc.msg} at column {exc.colno})", exc.lineno) from None
    except (RecursionError, ValueError) as exc:
        raise InputError(path, f"malformed JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise InputError(path, f"expected a JSON object of domains, got {type(obj).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for domain, meta in obj.items():
        if domain.startswith("_"):
            continue
        if not isinstance(meta, dict):
            raise InputError(path, f"domain {domain!r}: metadata must be an object, got {type(meta).__name__}")
        _check_metadata(meta, path, domain)
        out[domain] = meta
    return out


def _check_metadata(meta: dict, path: Path, domain: str) -> None:
    def bad(key: str, want: str) -> InputError:
        return InputError(path, f"domain {domain!r}: {key!r} must be {want}, got {meta[key]!r}")

    for key in ("file", "task"):
        if key in meta and not isinstance(meta[key], str):
            raise bad(key, "a string")
    for key in ("symmetric", "only_hn"):
        if key in meta and not isinstance(meta[key], bool):
            raise bad(key, "true or false")
    for key in ("language", "prompt"):
        if key in meta:
            value = meta[key]
            ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            if not ok:
                raise bad(key, "a string or a list of strings")


def _metadata_for_folder(folder: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``domains.json`` in the folder, else the shipped file for the folder name, else nothing."""
    own = folder / "domains.json"
    if own.exists():
        return read_metadata_file(own), str(own)
    shipped = SHIPPED_METADATA_DIR / f"{folder.name}.json"
    if shipped.exists():
        return read_metadata_file(shipped), str(shipped)
    return {}, None


def _make_source(name: str, rows: list[TrainingRow], meta: dict[str, Any], path: Path, content_hash: str
                 ) -> TrainingSource:
    merged = {**DEFAULT_METADATA, **{k: v for k, v in meta.items() if k in _KNOWN_KEYS}}
    extra = {k: v for k, v in meta.items() if k not in _KNOWN_KEYS}
    return TrainingSource(name=name, rows=rows, language=merged["language"], task=merged["task"],
                          symmetric=merged["symmetric"], prompt=merged["prompt"], only_hn=merged["only_hn"],
                          path=str(path), fingerprint=content_hash, meta=extra)


# ----------------------------------------------------------------------------- loaders

def load_collection(path: str | Path, *, domains: Sequence[str] | None = None,
                    max_rows: int | None = None, columns: Mapping[str, str] | None = None) -> list[TrainingSource]:
    """Load a folder of ``<domain>.jsonl`` files (or one ``.jsonl`` file) as sources.

    ``domains`` selects a subset (in the given order); ``max_rows`` keeps the first
    rows of each source (for quick runs; the files are already shuffled); ``columns``
    renames the files' own keys to ``query``/``pos``/``neg`` (:func:`parse_column_map`).
    """
    path = Path(path)
    columns = check_column_map(columns or {}, path)
    if path.is_file():
        meta, _ = _metadata_for_folder(path.parent)
        name = _stem(path)
        rows = read_training_rows(path, columns)
        sources = [_make_source(name, rows, meta.get(name, {}), path, _file_identity(path, columns))]
        return _select(sources, domains, max_rows, path)
    if not path.is_dir():
        raise InputError(path, "training collection does not exist")
    meta_by_domain, meta_file = _metadata_for_folder(path)
    files = {_stem(f): f for f in sorted(path.iterdir()) if f.name.endswith((".jsonl", ".jsonl.gz"))}
    if (path / "domains.json").exists():
        wanted = list(meta_by_domain)
        for name in files:
            if name not in meta_by_domain:
                log.warning("%s: %s is not listed in domains.json and is ignored", path, files[name].name)
    else:
        wanted = list(files)
    if not wanted:
        raise InputError(path, "no <domain>.jsonl files in the training collection folder")
    sources = []
    for name in wanted:
        domain_meta = meta_by_domain.get(name, {})
        file = path / domain_meta["file"] if "file" in domain_meta else files.get(name)
        if file is None or not file.exists():
            raise InputError(meta_file or path,
                             f"domain {name!r}: training file {file or name + '.jsonl'} does not exist")
        rows = read_training_rows(file, columns)
        sources.append(_make_source(name, rows, domain_meta, file, _file_identity(file, columns)))
    return _select(sources, domains, max_rows, path)


def _file_identity(path: Path, columns: Mapping[str, str]) -> str:
    """The file's hash, and the column mapping when there is one (it changes which texts are rows)."""
    digest = sha256_file(path)
    return f"{digest}:map={format_column_map(columns)}" if columns else digest


def parse_column_map(text: str) -> dict[str, str]:
    """``question=query,positive=pos`` as ``{"question": "query", "positive": "pos"}`` (``--map``)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        source, sep, target = (part.strip() for part in item.partition("="))
        if not sep or not source or not target:
            raise ConfigError(f"--map expects FROM=TO pairs separated by commas (e.g. question=query,positive=pos), "
                              f"got {item.strip()!r}")
        if source in out:
            raise ConfigError(f"--map names {source!r} twice")
        out[source] = target
    if not out:
        raise ConfigError("--map is empty; give FROM=TO pairs, e.g. question=query,positive=pos")
    return out


def check_column_map(columns: Any, where: Path) -> dict[str, str]:
    """A column mapping checked: file keys (strings) to distinct row fields (query, pos, neg)."""
    if not isinstance(columns, Mapping):
        raise ConfigError(f"training data {where}: 'map' must map the file's keys to {', '.join(FIELDS)}, "
                          f"got {columns!r}")
    seen: dict[str, str] = {}
    for source, target in columns.items():
        if not isinstance(source, str) or not isinstance(target, str):
            raise ConfigError(f"training data {where}: 'map' entries must be names, got {source!r}: {target!r}")
        if target not in FIELDS:
            raise ConfigError(f"training data {where}: 'map' sends {source!r} to {target!r}, which is no row field; "
                              f"fields: {', '.join(FIELDS)}")
        if target in seen:
            raise ConfigError(f"training data {where}: 'map' sends both {seen[target]!r} and {source!r} to {target!r}")
        seen[target] = source
    return dict(columns)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".jsonl.gz", ".jsonl"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _select(sources: list[TrainingSource], domains: Sequence[str] | None, max_rows: int | None,
            where: Path) -> list[TrainingSource]:
    if domains is not None:
        by_name = {s.name: s for s in sources}
        missing = [d for d in domains if d not in by_name]
        if missing:
            raise ConfigError(f"{where}: unknown domain(s) {', '.join(missing)}; available: {', '.join(by_name)}")
        sources = [by_name[d] for d in domains]
    if max_rows is not None:
        if max_rows < 1:
            raise ConfigError(f"max_rows must be >= 1, got {max_rows}")
        for src in sources:
            if len(src.rows) > max_rows:
                src.rows = src.rows[:max_rows]
                src.fingerprint = f"{src.fingerprint}:first{max_rows}"
    return sources


def load_beir_training(directory: str | Path, *, split: str = "train", negatives_run: str | Path | None = None,
                       max_negatives: int = 30, name: str | None = None,
                       metadata: dict[str, Any] | None = None) -> TrainingSource:
    """A BEIR folder as one training source.

    Each query judged in ``split`` with at least one relevant document (relevance > 0)
    becomes a row; its positives are those documents' passages (``title text``).  With
    ``negatives_run`` (TREC run format), the negatives are the run's top documents
    for that query that are not judged relevant, up to ``max_negatives``, in rank order.
    """
    directory = Path(directory)
    dataset = load_beir(directory, split=split)
    name = name or directory.name
    passages = dict(zip(dataset.corpus.ids, dataset.corpus.passages()))
    query_text = dict(zip(dataset.queries.ids, dataset.queries.texts))
    positives: dict[str, list[str]] = {}
    for qid, docs, rels in dataset.qrels.groups():
        pos = [str(d) for d, r in zip(docs, rels) if r > 0]
        if pos:
            positives[qid] = pos
    ranked: dict[str, list[str]] = {}
    digest = hashlib.sha256(f"{dataset.corpus.content_hash()}:{split}:{max_negatives}".encode())
    digest.update(sha256_file(_qrels_path(directory, split)).encode())
    if negatives_run is not None:
        run = read_run(negatives_run)
        digest.update(sha256_file(negatives_run).encode())
        unknown = 0
        for qid, docs, _scores in run.groups():
            if qid not in positives:
                continue
            ranked[qid] = [str(d) for d in docs]
        for ranked_docs in ranked.values():
            unknown += sum(d not in passages for d in ranked_docs)
        if unknown:
            raise InputError(negatives_run, f"{unknown} run rows name documents missing from {directory}/corpus")
    rows = []
    for qid in sorted(positives, key=_natural_key):
        pos_ids = positives[qid]
        judged = set(pos_ids)
        neg_ids = [d for d in ranked.get(qid, []) if d not in judged][:max_negatives]
        rows.append(TrainingRow(query_text[qid], [passages[d] for d in pos_ids], [passages[d] for d in neg_ids],
                                {"query_id": qid, "pos_ids": pos_ids, "neg_ids": neg_ids}))
    if not rows:
        raise InputError(_qrels_path(directory, split), f"no query in split {split!r} has a relevant document")
    meta = dict(metadata or {})
    if not meta:
        shipped, _ = _metadata_for_folder(directory)
        meta = shipped.get(name, {})
    return _make_source(name, rows, meta, directory, digest.hexdigest()[:24])


def _qrels_path(directory: Path, split: str) -> Path:
    for candidate in (directory / "qrels" / f"{split}.tsv", directory / "qrels" / f"{split}.tsv.gz"):
        if candidate.exists():
            return candidate
    return directory / "qrels" / f"{split}.tsv"


def _natural_key(text: str):
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def is_beir_folder(path: Path) -> bool:
    return path.is_dir() and (path / "qrels").is_dir() and any(path.glob("corpus.jsonl*"))


def load_training_data(entries: Iterable[str | Path | dict[str, Any]]) -> TrainingData:
    """Load every entry into one :class:`TrainingData`.

    An entry is a path, or a dict ``{"path": ..., "domains": [...], "max_rows": N, "map": {"question":
    "query"}}`` (collections; ``map`` renames the files' keys to the row fields) or ``{"path": ...,
    "split": "train", "negatives_run": ..., "max_negatives": 30, "name": ..., "max_rows": N}``
    (BEIR folders; detected by ``qrels/`` and ``corpus.jsonl``).
    """
    sources: list[TrainingSource] = []
    for entry in entries:
        opts: dict[str, Any] = dict(entry) if isinstance(entry, dict) else {"path": entry}
        if "path" not in opts:
            raise ConfigError(f"training data entry {entry!r} has no 'path'")
        path = Path(opts.pop("path")).expanduser()
        max_rows = opts.pop("max_rows", None)
        if is_beir_folder(path):
            allowed = {"split", "negatives_run", "max_negatives", "name", "metadata"}
            _check_options(opts, allowed, path)
            src = load_beir_training(path, **opts)
            sources.extend(_select([src], None, max_rows, path))
        else:
            _check_options(opts, {"domains", "map"}, path)
            sources.extend(load_collection(path, domains=opts.get("domains"), max_rows=max_rows,
                                           columns=opts.get("map")))
    return TrainingData(sources)


def _check_options(opts: dict, allowed: set[str], path: Path) -> None:
    unknown = sorted(set(opts) - allowed)
    if unknown:
        raise ConfigError(f"training data {path}: unknown option(s) {', '.join(unknown)}; "
                          f"allowed: {', '.join(sorted(allowed))}")
