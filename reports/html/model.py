"""What the HTML report shows, as plain data: built by :mod:`reports.html.build`, drawn by
:mod:`reports.html.render`.

The application layer (the suite runner, ``harness table suite --html``) knows where a suite keeps
its files; it hands them over as a :class:`SuiteInputs`, so this package reads stored results and
runs without knowing the results-root layout.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SystemInfo:
    """One row of the suite: a variant (or an external baseline)."""

    id: str
    label: str
    method: str = ""
    command: str = ""              # the command that (re)produces this variant's cells


@dataclass(frozen=True)
class BenchmarkInfo:
    id: str
    label: str                     # the name comparisons.json and the tables use
    suite: str = ""


@dataclass
class BenchmarkTexts:
    """Query and document texts of one benchmark, and its judgements (for the per-query view)."""

    queries: dict[str, str]
    documents: Callable[[set[str]], dict[str, tuple[str, str]]]   # ids -> {id: (title, text)}
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class SettingRow:
    """A setting of a system that differs from the baseline's, with where each value was set."""

    system: str
    setting: str                                       # "train.lr", "options.k", "method", ...
    value: str
    source: str                                        # "<suite file>:<line>", or the method's preset/default
    baseline: str
    baseline_source: str


@dataclass(frozen=True)
class CellSource:
    """One evaluated model on one benchmark (a replicate or a checkpoint too), for the cells table."""

    system: str                                        # as shown, e.g. "tDRO [seed 2]" or "tDRO @ step 100"
    benchmark: str
    command: str
    result_dir: Path
    cell_dir: str = ""                                 # the content-keyed cell folders behind it


@dataclass
class SuiteInputs:
    """Everything the report reads, located by the caller."""

    suite: str
    scale: str
    report_dir: Path                                   # comparisons.json and summary.json
    systems: list[SystemInfo]                          # baseline first
    benchmarks: list[BenchmarkInfo]
    # (system id, benchmark id) -> its stored results: one, or one per seed replicate (averaged per query)
    result_dirs: dict[tuple[str, str], list[Path]]
    run_files: dict[tuple[str, str], Path | None] = field(default_factory=dict)   # the (first) replicate's run
    cells: list[CellSource] = field(default_factory=list)
    texts: Callable[[str], BenchmarkTexts] | None = None                  # benchmark id -> texts
    plots: list[Path] = field(default_factory=list)    # PNG files of the suite (copied into the report)
    description: str = ""
    generated_by: str = ""                             # the command that wrote the report
    settings: list[SettingRow] = field(default_factory=list)   # how each system differs from the baseline
    train_logs: dict[str, Path] = field(default_factory=dict)  # system label -> its run's train_log.jsonl


@dataclass(frozen=True)
class StatCell:
    """One table cell: a system's score, and for a non-baseline system its comparison."""

    value: float
    text: str                                          # formatted as in table.md
    delta: float | None = None
    delta_text: str = ""
    mark: str = ""                                     # significance marker (legend in the table)
    ci: tuple[float, float] | None = None
    ci_text: str = ""
    p: float | None = None
    p_adjusted: float | None = None
    wins_ties_losses: tuple[int, int, int] | None = None
    n: int | None = None
    best: bool = False                                 # the column's best shown value (bold, as in table.md)


@dataclass(frozen=True)
class TableColumn:
    key: str
    label: str
    group: str = ""


@dataclass(frozen=True)
class TableRow:
    system: str                                        # label
    kind: str                                          # "baseline" | "system"
    cells: dict[str, StatCell]


@dataclass
class ResultTable:
    id: str
    title: str
    columns: list[TableColumn]
    rows: list[TableRow]
    legend: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    detailed: bool = False                             # show CI, p and W/T/L columns


@dataclass(frozen=True)
class DocHit:
    rank: int
    doc_id: str
    score: float
    title: str
    text: str
    relevance: int | None                              # the judgement, None when unjudged


@dataclass(frozen=True)
class QueryExample:
    query_id: str
    query: str
    base_value: float
    system_value: float
    delta: float
    base_docs: tuple[DocHit, ...]
    system_docs: tuple[DocHit, ...]


@dataclass
class PerQueryGroup:
    """The largest wins and losses of one system over the baseline on one benchmark and metric."""

    id: str
    system: str
    benchmark: str
    metric: str
    wins: list[QueryExample]
    losses: list[QueryExample]
    counts: tuple[int, int, int]                       # wins, ties, losses over all queries
    note: str = ""                                     # why texts or documents are missing


@dataclass(frozen=True)
class CellInfo:
    system: str
    benchmark: str
    command: str
    result_dir: str
    stored: str                                        # cell folders (training and evaluation)
    created: str
    git_commit: str
    n_queries: int


@dataclass(frozen=True)
class Plot:
    title: str
    file: str                                          # name inside the report's assets folder
    data: bytes


@dataclass
class HtmlReport:
    suite: str
    scale: str
    description: str
    baseline: str
    systems: list[str]
    metrics: list[str]
    tables: list[ResultTable]
    per_query: list[PerQueryGroup]
    cards: dict[str, dict[str, Any]]
    cells: list[CellInfo]
    plots: list[Plot]
    notes: list[str]
    generated_by: str = ""
    warnings: list[str] = field(default_factory=list)
    ci_level: float = 0.95
    settings: list[SettingRow] = field(default_factory=list)
