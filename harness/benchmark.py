"""The benchmark-suite interface and its registry.

A benchmark suite (BEIR, MIRACL, MKQA, C-MTEB, DuReader, the synthetic world, or one from
another package) knows how to load its data (the release's own format and BEIR layout),
which protocol card applies, and how to score a run under that protocol.  The evaluation
pipeline (:mod:`harness.pipeline`) is generic over this interface.

A suite declares its load options (:class:`SuiteOption`: name, type, default, help), so the
CLI can parse ``--option key=value`` and print help without knowing the suite, and its
:meth:`BenchmarkSuite.stats` (what ``harness data stats`` prints).  Built-in suites live in
``suites.benchmarks``; other packages add theirs through the ``retrieval_harness.suites``
entry point group or a ``package.module:Class`` reference in a suite file.
"""
from __future__ import annotations

import abc
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.data.beir import BeirDataset
from harness.data.run import Run
from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.registry import Registry

# Options every suite accepts: overrides of its protocol card's fields.
CARD_OPTIONS = ("query_prompt", "doc_prompt", "query_max_length", "doc_max_length", "top_k", "metrics",
                "relevance_threshold", "bm25_ties")


@dataclass
class LoadedBenchmark:
    """One evaluation set ready to run: data, its protocol card, optional answers."""

    dataset: BeirDataset
    card: ProtocolCard
    answers: dict[str, list[str]] | None = None   # query id -> answer strings (answer containment)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.card.dataset or self.dataset.name


@dataclass(frozen=True)
class SuiteOption:
    """One load option a suite declares: ``--option name=value`` on the command line."""

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None

    def parse(self, value: Any, suite: str) -> Any:
        """``value`` (a string from the command line, or a YAML value) converted to ``type`` and checked."""
        try:
            if self.type is bool and isinstance(value, str):
                lowered = value.strip().lower()
                if lowered not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                out: Any = lowered in ("true", "1", "yes")
            else:
                out = self.type(value)
        except (TypeError, ValueError):
            raise ConfigError(f"suite {suite!r}: option {self.name} must be a {self.type.__name__}, "
                              f"got {value!r}") from None
        if self.choices is not None and out not in self.choices:
            import difflib

            hint = next(iter(difflib.get_close_matches(str(out), list(map(str, self.choices)), n=1)), None)
            raise ConfigError(f"suite {suite!r}: option {self.name} must be one of "
                              f"{', '.join(map(str, self.choices))}, got {out!r}"
                              + (f" (did you mean {hint!r}?)" if hint else ""))
        return out

    def describe(self) -> str:
        choices = f" ({'|'.join(map(str, self.choices))})" if self.choices else ""
        return f"{self.name}={self.type.__name__}{choices} [default {self.default}]: {self.help}"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset's official download: where from, where it goes, how to check and unpack it
    (what :meth:`BenchmarkSuite.remote_files` declares; :mod:`suites.download` fetches it)."""

    url: str
    target: str                       # path inside the dataset folder (archives: where to unpack)
    sha256: str | None = None
    md5: str | None = None
    unpack: str | None = None         # "zip" | "tar" | None
    strip_top: bool = False           # drop the archive's single top-level folder
    probe: bool = False               # part of a shard sequence: HTTP 404 ends it


class BenchmarkSuite(abc.ABC):
    """A benchmark family with its protocol."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    options: ClassVar[tuple[SuiteOption, ...]] = ()
    # Options ``harness data stats`` passes to ``load`` (e.g. counting needs no corpus).
    stats_options: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every ``load`` a suite defines first checks its declared options (:meth:`check_options`), so a
        choice is enforced whoever calls it: a suite file, ``--option`` on the command line, or Python."""
        super().__init_subclass__(**kwargs)
        load = cls.__dict__.get("load")
        if load is not None and not getattr(load, "__isabstractmethod__", False) \
                and not getattr(load, "_checks_options", False):
            @functools.wraps(load)
            def checked_load(self: BenchmarkSuite, dataset_dir: str | Path, **options: Any) -> LoadedBenchmark:
                type(self).check_options(options)
                return load(self, dataset_dir, **options)

            checked_load._checks_options = True  # type: ignore[attr-defined]
            cls.load = checked_load  # type: ignore[method-assign]

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Refuse a declared option whose value its :class:`SuiteOption` does not accept (type, ``choices``);
        None stands for the default, and other keys (load arguments, card overrides) are left to ``load``."""
        declared = {o.name: o for o in cls.options}
        for key, value in options.items():
            if key in declared and value is not None:
                declared[key].parse(value, cls.name)

    @abc.abstractmethod
    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        """Load a local folder (release format or BEIR layout) under this suite's protocol."""

    @abc.abstractmethod
    def evaluate(self, loaded: LoadedBenchmark, run: Run) -> EvaluationResult:
        """Score a run under the protocol (per query)."""

    def datasets(self) -> list[str]:
        """Names of the datasets this family defines (for downloads and groupings)."""
        return []

    def remote_files(self, dataset: str | None, *, base_url: str | None = None,
                     with_corpus: bool = False) -> tuple[str, list[RemoteFile]]:
        """The folder name ``dataset`` is cached under and its files at their official public location
        (``base_url`` replaces the host: a mirror or a local server).  A suite with official downloads
        overrides this; ``harness data download`` offers the suites that do."""
        raise ConfigError(f"suite {self.name!r} has no download source")

    @classmethod
    def has_downloads(cls) -> bool:
        """Whether the suite declares its remote files (:meth:`remote_files`)."""
        return cls.remote_files is not BenchmarkSuite.remote_files

    def stats(self, loaded: LoadedBenchmark) -> dict[str, Any]:
        """Counts of a loaded benchmark (what ``harness data stats`` prints)."""
        return dataset_stats(loaded)

    @classmethod
    def parse_options(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """Convert user options (strings or YAML values) by the declared schema; card overrides pass
        through; anything else is refused with the suite's options listed."""
        declared = {o.name: o for o in cls.options}
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key in declared:
                out[key] = declared[key].parse(value, cls.name)
            elif key in CARD_OPTIONS:
                out[key] = value
            else:
                known = ", ".join([*declared, *CARD_OPTIONS])
                raise ConfigError(f"suite {cls.name!r} has no option {key!r}; options: {known}")
        return out


def dataset_stats(loaded: LoadedBenchmark) -> dict[str, Any]:
    """Counts of a loaded benchmark: documents, queries, judged pairs, relevant documents per query."""
    ds = loaded.dataset
    threshold = loaded.card.relevance_threshold
    judged = len(ds.qrels.query_list()) if len(ds.qrels) else 0
    relevant = int((ds.qrels.relevance >= threshold).sum()) if len(ds.qrels) else 0
    per_query = ds.qrels.num_relevant(threshold) if len(ds.qrels) else {}
    in_file = int(loaded.meta.get("queries_in_file", len(ds.queries)))
    stats: dict[str, Any] = {
        "docs": None if loaded.meta.get("corpus_missing") else len(ds.corpus),
        "queries": len(ds.queries),
        "queries_in_file": in_file,
        "judged_queries": judged,
        "judged_pairs": len(ds.qrels),
        "relevant_pairs": relevant,
        "queries_without_judgments": in_file - judged,
        "queries_without_relevant": sum(1 for v in per_query.values() if v == 0),
        "mean_relevant_per_query": round(relevant / judged, 4) if judged else None,
    }
    if loaded.answers is not None:
        stats["queries_with_answers"] = len(loaded.answers)
        stats["queries_without_answers"] = in_file - len(loaded.answers)
    for key in ("gallery_size", "candidates", "languages"):
        if key in loaded.meta:
            value = loaded.meta[key]
            stats[key] = len(value) if isinstance(value, (dict, list)) and key == "candidates" else value
    return stats


def data_hash(dataset: BeirDataset, answers: Mapping[str, Sequence[str]] | None = None,
              extra: Iterable[str] = ()) -> str:
    """SHA-256 over what is evaluated: corpus, queries, qrels, answers (and protocol extras): a card's
    ``data_hash`` (the suites' loaders and the suite runner's seeded subsets both use it)."""
    digest = hashlib.sha256()
    digest.update(dataset.corpus.content_hash().encode())
    digest.update(dataset.queries.content_hash().encode())
    q = dataset.qrels
    for qid, did, rel in zip(q.query_ids.tolist(), q.doc_ids.tolist(), q.relevance.tolist()):
        digest.update(f"{qid}\x1f{did}\x1f{rel}\x1e".encode())
    if answers:
        for qid in sorted(answers):
            digest.update(("\x1d" + qid + "\x1f" + "\x1f".join(answers[qid])).encode())
    for item in extra:
        digest.update(("\x1c" + item).encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------- registry
def _set_name(name: str, cls: type[BenchmarkSuite]) -> None:
    if "name" not in vars(cls):   # a subclass of a registered suite must not inherit its name
        cls.name = name


SUITES: Registry[type[BenchmarkSuite]] = Registry(
    "suite", builtins=("suites.benchmarks",),
    check=lambda obj: isinstance(obj, type) and issubclass(obj, BenchmarkSuite), on_register=_set_name)


def register_suite(name: str) -> Callable[[type[BenchmarkSuite]], type[BenchmarkSuite]]:
    """Class decorator: ``@register_suite("beir")``."""
    return SUITES.decorator(name)


def get_suite(name: str) -> BenchmarkSuite:
    """A fresh instance of the suite registered as ``name`` (or of a ``package.module:Class`` reference)."""
    suite: BenchmarkSuite = SUITES.create(name)
    return suite


def list_suites() -> list[str]:
    return sorted(SUITES.names())
