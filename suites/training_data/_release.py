"""Readers shared by the recipes: the sentence-transformers release rows, eval queries, text normalising, option lists.

sentence-transformers/embedding-training-data (the source of most sets of papers 000 and 003) stores
one JSON value per line of a ``.jsonl.gz`` file, in five shapes (the dataset card, "Data Format"):

* pair ``["text1", "text2"]`` and triplet ``["anchor", "positive", "negative"]`` (longer lists: more
  negatives);
* set ``{"set": ["text1", "text2", ...]}``: paraphrases; the first is the query, the rest positives;
* query-pairs ``{"query": ..., "pos": [...]}`` and query-triplets ``{..., "neg": [...]}``.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.data.builders import iter_release_jsonl, iter_tsv
from harness.errors import ConfigError, InputError
from suites.groupings import MIRACL_WITH_TRAINING


def _texts(value: Any, path: Path, line: int, what: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(path, f"{what} must be a string or a list of strings", line)
    return [v for v in value if v.strip()]


def release_row(value: Any, path: Path, line: int) -> dict[str, Any]:
    """One release line as ``{"query", "pos", "neg"}``; an unknown shape or an empty text fails at file:line."""
    if isinstance(value, list):
        if len(value) < 2 or not all(isinstance(v, str) for v in value):
            raise InputError(path, "a list row must hold at least 2 strings (pair, triplet)", line)
        query, pos, neg = value[0], [value[1]], list(value[2:])
    elif isinstance(value, dict) and "set" in value:
        texts = _texts(value["set"], path, line, "'set'")
        if len(texts) < 2:
            raise InputError(path, "a 'set' row needs at least 2 non-empty texts", line)
        query, pos, neg = texts[0], texts[1:], []
    elif isinstance(value, dict) and "query" in value:
        if not isinstance(value["query"], str):
            raise InputError(path, "'query' must be a string", line)
        query = value["query"]
        pos = _texts(value.get("pos", []), path, line, "'pos'")
        neg = _texts(value.get("neg", []), path, line, "'neg'")
    else:
        raise InputError(path, "unknown row shape: expected a list, {'set': [...]} or {'query', 'pos'[, 'neg']}",
                         line)
    if not query.strip():
        raise InputError(path, "empty query", line)
    pos = [p for p in pos if p.strip()]
    if not pos:
        raise InputError(path, "no non-empty positive", line)
    return {"query": query, "pos": pos, "neg": [n for n in neg if n.strip()]}


def iter_release_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, row)`` of a release file in any of the five shapes."""
    for line, value in iter_release_jsonl(path):
        yield line, release_row(value, path, line)


def normalise(text: str) -> str:
    r"""Text compared by the normalised deduplication: NFKC, case folded, ``_`` dropped (as tDRO's
    ``format_query`` does, tdro data/inspect_duplicates.py), punctuation and spacing reduced to single
    spaces between words.  A word is a run of letters, digits *and combining marks* (Unicode L, N, M):
    ``\w`` alone drops the vowel signs of Indic and Thai scripts, which would make different words equal."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("_", "")
    chars = [ch if unicodedata.category(ch)[0] in "LNM" else " " for ch in text]
    return " ".join("".join(chars).split())


def read_eval_queries(path: Path) -> list[tuple[str, Path, int]]:
    """Evaluation queries as ``(text, file, line)``: a BEIR ``queries.jsonl`` (``text``) or any
    ``.jsonl`` with ``text``/``query``, a TSV topics file ``qid<TAB>query`` (MIRACL), or a folder (every
    ``queries.jsonl[.gz]`` and ``topics*.tsv`` below it)."""
    if path.is_dir():
        files = sorted([*path.rglob("queries.jsonl"), *path.rglob("queries.jsonl.gz"), *path.rglob("topics*.tsv")])
        if not files:
            raise InputError(path, "no queries.jsonl or topics*.tsv below this evaluation folder")
        return [q for f in files for q in read_eval_queries(f)]
    out: list[tuple[str, Path, int]] = []
    if path.name.endswith((".tsv", ".tsv.gz")):
        for line, fields in iter_tsv(path, (2, 3), "evaluation queries"):
            out.append((fields[1], path, line))
        return out
    for line, value in iter_release_jsonl(path, "evaluation queries"):
        if not isinstance(value, dict):
            raise InputError(path, "expected a JSON object with 'text' or 'query'", line)
        text = value.get("text", value.get("query"))
        if not isinstance(text, str):
            raise InputError(path, "no string field 'text' or 'query'", line)
        out.append((text, path, line))
    return out


def passage(title: str, text: str) -> str:
    """``title text`` as :meth:`harness.data.beir.Corpus.passages` joins them."""
    return f"{title} {text}".strip() if title else text.strip()


def miracl_training_languages(value: object, recipe: str) -> tuple[str, ...]:
    """A recipe's comma-separated ``languages`` option, each one of MIRACL's 16 languages with a training split
    (``suites.groupings.MIRACL_WITH_TRAINING``: no de, yo); an empty list or another code is refused, naming it."""
    langs = tuple(x.strip() for x in str(value).split(",") if x.strip())
    unknown = [x for x in langs if x not in MIRACL_WITH_TRAINING]
    if unknown or not langs:
        raise ConfigError(f"{recipe}: not a MIRACL language with a training split: "
                          f"{', '.join(unknown) or '(none given)'}; languages: {', '.join(MIRACL_WITH_TRAINING)}")
    return langs
