"""Language and topic labels of training rows, for monolingual topic-diverse batches (METHODS.md 5.5).

Languages (``languages`` option, one spec for every source or ``{source: spec}``):

* ``source`` (default): the source's metadata language (a source listing several is refused:
  give a column or an index file);
* ``column:<key>``: the row's own field ``key``;
* ``index:<path>``: a TSV file ``<row index>\\t<language>[\\t...]`` (0-based, in file order; e.g.
  ``train-multidomain/miracl_train_index.tsv``).

Topics (``topics`` option):

* ``column:<key>``: the row's own field;
* ``fasttext:<file>[,<file>...]``: fastText supervised classifiers on the query (the paper's
  DBpedia-14 / Yahoo-10 models; needs the optional extra ``topics``, i.e. ``fasttext-wheel``).
  With several files the first whose top label has probability >= ``topic_threshold`` names the
  topic (the paper lets the Yahoo label take precedence, then DBpedia), else ``Others``;
* ``fasttext12:<dbpedia model>,<yahoo model>``: paper 004's topics (App. B.4, Table 11): the DBpedia-14
  and Yahoo-Answers-10 fastText classifiers label each row's first *positive* passage, and the two labels
  are merged into the 12 MIRACL topics, the Yahoo label first, then the DBpedia one, else ``Others``
  (:data:`MERGED_TOPICS`, xir_BDUMDR ``Src/domain_class/topic_classification.py``: no confidence cut);
* ``kmeans`` (default): k-means clusters (faiss, seeded) of the query embeddings of a dense model,
  per language.  A documented substitute for the paper's classifiers: clusters are topics only
  in so far as the embedding groups queries by subject.
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.collections import TrainingSource
from harness.errors import ConfigError, InputError

OTHERS = "Others"


def _spec_for(option: Any, source: str, what: str) -> str:
    if isinstance(option, Mapping):
        if source not in option:
            raise ConfigError(f"{what}: no entry for training source {source!r} (entries: {', '.join(option)})")
        return str(option[source])
    return str(option)


def _column(rows, key: str, source: str, what: str) -> list[str]:
    out = []
    for n, row in enumerate(rows):
        value = row.meta.get(key)
        if value is None or value == "":
            line = row.meta.get("line", n + 1)
            raise ConfigError(f"{what} column {key!r}: row {line} of source {source!r} has no value")
        out.append(str(value))
    return out


def read_index(path: str | Path, rows: int) -> list[str]:
    """Labels of ``rows`` rows from a TSV ``<row index>\\t<label>`` file (every row needs one)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"language index {path} does not exist")
    labels: dict[int, str] = {}
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip().isdigit() or not parts[1].strip():
            raise InputError(path, f"expected '<row index>\\t<label>', got {line[:80]!r}", line_no)
        labels[int(parts[0])] = parts[1].strip()
    missing = [i for i in range(rows) if i not in labels]
    if missing:
        raise InputError(path, f"{len(missing)} of {rows} rows have no label (first: row index {missing[0]})")
    return [labels[i] for i in range(rows)]


def language_labels(source: TrainingSource, option: Any = "source") -> list[str]:
    """The language of each row of ``source`` (see the module docstring)."""
    spec = _spec_for(option, source.name, "languages")
    if spec == "source":
        lang = source.language
        if isinstance(lang, list):
            if len(lang) != 1:
                raise ConfigError(f"training source {source.name!r} lists {len(lang)} languages; give the rows' "
                                  "languages with languages: column:<key> or index:<tsv file>")
            lang = lang[0]
        return [str(lang)] * len(source.rows)
    kind, _, arg = spec.partition(":")
    if kind == "column" and arg:
        return _column(source.rows, arg, source.name, "languages")
    if kind == "index" and arg:
        return read_index(arg, len(source.rows))
    raise ConfigError(f"unknown languages spec {spec!r}; expected source | column:<key> | index:<tsv file>")


def fasttext_module():
    """The fastText bindings (optional extra ``topics``), or a clear refusal."""
    if importlib.util.find_spec("fasttext") is None:
        raise ConfigError("fastText topic labels need the fastText bindings: pip install 'retrieval-harness[topics]' "
                          "(the fasttext-wheel package), or use topics: kmeans or column:<key>")
    return importlib.import_module("fasttext")


def fasttext_topics(texts: Sequence[str], files: Sequence[str | Path], threshold: float = 0.5) -> list[str]:
    """Topic of each text from fastText classifiers, the first confident one winning (else ``Others``)."""
    fasttext = fasttext_module()
    models = []
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f"fastText model {f} does not exist")
        try:
            models.append(fasttext.load_model(str(f)))
        except ValueError as exc:
            raise ConfigError(f"cannot load fastText model {f}: {exc}") from None
    clean = [" ".join(t.split()) for t in texts]         # fastText predicts one line at a time
    predictions = [m.predict(clean, k=1) for m in models]
    out = []
    for i in range(len(clean)):
        label = OTHERS
        for labels, probs in predictions:
            if labels[i] and float(probs[i][0]) >= threshold:
                label = labels[i][0].removeprefix("__label__")
                break
        out.append(label)
    return out


# fastText label ids of the two classifiers (``__label__<n>``; the order of the DBpedia-14 and Yahoo-Answers-10
# datasets' classes, as xir_BDUMDR Src/domain_class/topic_classification.py reads them).
DBPEDIA_14 = ("Company", "EducationalInstitution", "Artist", "Athlete", "OfficeHolder", "MeanOfTransportation",
              "Building", "NaturalPlace", "Village", "Animal", "Plant", "Album", "Film", "WrittenWork")
YAHOO_10 = ("Society & Culture", "Science & Mathematics", "Health", "Education & Reference", "Computers & Internet",
            "Sports", "Business & Finance", "Entertainment & Music", "Family & Relationships",
            "Politics & Government")
# Paper 004 Table 11: the 12 MIRACL topics and the classifier labels merged into each (the released mapping;
# Yahoo's Society & Culture and Family & Relationships map to none and fall to the DBpedia label).
MERGED_TOPICS: dict[str, tuple[str, ...]] = {
    "BL": ("WrittenWork",),
    "SM": ("Science & Mathematics", "EducationalInstitution"),
    "LH": ("Health", "Animal", "Plant"),
    "JE": ("Education & Reference",),
    "CI": ("Computers & Internet", "Company"),
    "SP": ("Sports", "Athlete"),
    "BF": ("Business & Finance", "OfficeHolder"),
    "PG": ("Politics & Government",),
    "TT": ("MeanOfTransportation",),
    "AE": ("Entertainment & Music", "Artist", "Album", "Film"),
    "GE": ("Building", "Village", "NaturalPlace"),
    "OT": (),
}


def merged_topic(dbpedia: str, yahoo: str) -> str:
    """The MIRACL topic (Table 11 code: BL, SM, ..., OT) of a DBpedia and a Yahoo label: the topic holding
    the Yahoo label, else the one holding the DBpedia label, else OT."""
    for label in (yahoo, dbpedia):
        for topic, members in MERGED_TOPICS.items():
            if label in members:
                return topic
    return "OT"


def _fasttext_label(label: str, names: Sequence[str]) -> str:
    raw = label.removeprefix("__label__")
    try:
        return names[int(raw) - 1]
    except (ValueError, IndexError):
        return raw          # a model whose labels are names


def fasttext12_topics(texts: Sequence[str], dbpedia_file: str | Path, yahoo_file: str | Path) -> list[str]:
    """Paper 004's 12 topics of ``texts`` (first positives) from the DBpedia-14 and Yahoo-10 classifiers."""
    fasttext = fasttext_module()
    models = []
    for f in (dbpedia_file, yahoo_file):
        if not Path(f).is_file():
            raise ConfigError(f"fastText model {f} does not exist (paper 004 B.4: the DBpedia-14 and Yahoo-10 "
                              "supervised models of fastText's text-classification examples)")
        models.append(fasttext.load_model(str(f)))
    clean = [" ".join(t.replace('"', "").split()) for t in texts]
    (db_labels, _), (ya_labels, _) = (m.predict(clean, k=1) for m in models)
    return [merged_topic(_fasttext_label(d[0], DBPEDIA_14) if len(d) else "",
                         _fasttext_label(y[0], YAHOO_10) if len(y) else "") if text else "OT"
            for text, d, y in zip(clean, db_labels, ya_labels)]


def kmeans_topics(embeddings: np.ndarray, groups: Sequence[str], n_topics: int, seed: int = 0) -> list[str]:
    """``<group>/c<k>`` labels: k-means (faiss, seeded) within each group (language) of query embeddings;
    a group with fewer than ``2 * n_topics`` rows gets ``max(1, n // 2)`` clusters."""
    import faiss

    if n_topics < 1:
        raise ConfigError(f"n_topics must be >= 1, got {n_topics}")
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    out = [""] * len(groups)
    for group in dict.fromkeys(groups):
        idx = [i for i, g in enumerate(groups) if g == group]
        k = min(n_topics, max(1, len(idx) // 2))
        if k == 1:
            assign = np.zeros(len(idx), dtype=np.int64)
        else:
            km = faiss.Kmeans(x.shape[1], k, niter=25, seed=seed, verbose=False, spherical=True)
            km.train(x[idx])
            _, assign = km.index.search(x[idx], 1)
            assign = assign.reshape(-1)
        for i, c in zip(idx, assign):
            out[i] = f"{group}/c{int(c)}"
    return out


def topic_labels(source: TrainingSource, languages: Sequence[str], option: Any = "kmeans", *, n_topics: int = 12,
                 threshold: float = 0.5, seed: int = 0,
                 embed: Callable[[list[str]], np.ndarray] | None = None) -> list[str]:
    """The topic of each row of ``source`` (see the module docstring); ``embed`` encodes queries for k-means."""
    spec = _spec_for(option, source.name, "topics")
    queries = [r.query for r in source.rows]
    if spec == "kmeans":
        if embed is None:
            raise ConfigError("topics: kmeans needs a dense model to embed the queries")
        return kmeans_topics(embed(queries), languages, n_topics, seed)
    kind, _, arg = spec.partition(":")
    if kind == "column" and arg:
        return _column(source.rows, arg, source.name, "topics")
    if kind == "fasttext" and arg:
        return fasttext_topics(queries, [p.strip() for p in arg.split(",") if p.strip()], threshold)
    if kind == "fasttext12" and arg:
        files = [p.strip() for p in arg.split(",") if p.strip()]
        if len(files) != 2:
            raise ConfigError(f"topics {spec!r}: fasttext12 takes two models, <dbpedia model>,<yahoo model>")
        return fasttext12_topics([r.pos[0] if r.pos else "" for r in source.rows], files[0], files[1])
    raise ConfigError(f"unknown topics spec {spec!r}; expected kmeans | column:<key> | fasttext:<file>[,<file>] | "
                      "fasttext12:<dbpedia model>,<yahoo model>")
