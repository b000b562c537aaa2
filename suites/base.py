"""The benchmark-suite interface and registry.

A benchmark suite (BEIR, MIRACL, MKQA, C-MTEB, DuReader, the synthetic world)
knows how to load its data (the release's own format and BEIR layout), which
protocol card applies, and how to score a run under that protocol (trec_eval
metrics, or answer containment for MKQA).  The evaluation pipeline
(:mod:`harness.pipeline`) is generic over this interface.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.data.beir import BeirDataset
from harness.data.run import Run
from harness.errors import ConfigError
from harness.protocol import ProtocolCard
from harness.results import EvaluationResult


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


class BenchmarkSuite(abc.ABC):
    """A benchmark family with its protocol."""

    name: str = ""
    description: str = ""

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


_REGISTRY: dict[str, Callable[[], BenchmarkSuite]] = {}


def register_suite(name: str) -> Callable:
    """Class decorator: ``@register_suite("beir")``."""

    def deco(cls):
        _REGISTRY[name] = cls
        cls.name = cls.name or name
        return cls

    return deco


def get_suite(name: str) -> BenchmarkSuite:
    _load_builtin_suites()
    try:
        return _REGISTRY[name]()
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise ConfigError(f"unknown suite {name!r}; known suites: {known}") from None


def list_suites() -> list[str]:
    _load_builtin_suites()
    return sorted(_REGISTRY)


def _load_builtin_suites() -> None:
    """Import every module of ``suites.benchmarks`` so that their decorators register them."""
    import importlib
    import pkgutil

    try:
        import suites.benchmarks as pkg
    except ImportError:
        return
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"suites.benchmarks.{info.name}")
