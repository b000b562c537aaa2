"""The HTML report of a finished suite: locate its files and write ``<report dir>/html/``.

:mod:`reports.html` renders; this module knows the results-root layout (:mod:`harness.ablation.paths`)
and the suite axes (:mod:`harness.ablation.axes`): the stable ``results/<replicate>[@step=<n>]/<benchmark>``
folders of every system, seed replicate and checkpoint, the evaluation cells holding the runs, the
suite's PNG plots (sweeps, learning curves).  The suite runner calls :func:`write_runner_html` when it
writes the tables, and ``harness table suite NAME --html`` calls :func:`write_cli_html`.
"""
from __future__ import annotations

import logging
import math
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.ablation.axes import baseline_system, replicates, suite_systems
from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.cells import eval_key
from harness.ablation.layout import REPORTED_MARK, layout_kind, load_layout, table_section
from harness.ablation.paths import cell_result_dir, eval_cell_dir, report_dir, train_cell_dir
from harness.ablation.provenance import settings_diff, value_text
from harness.ablation.spec import AblationSuite
from harness.benchmark import LoadedBenchmark
from harness.errors import ConfigError, InputError
from harness.io.results_layout import CELL_RESULTS_DIR, COMPARISONS_FILE, HTML_DIR
from harness.store import RUN_FILE, is_result_dir, load_result
from harness.train.logs import LOG_FILE as TRAIN_LOG_FILE
from reports.table import MISSING, BodyRow, Table
from reports.table import layout as table_layout

if TYPE_CHECKING:
    from harness.ablation.runner import SuiteRun
    from reports.html import BenchmarkTexts, SuiteInputs
    from reports.html.model import ResultTable, SettingRow

log = logging.getLogger("harness.ablation")

Loader = Callable[[str], LoadedBenchmark]      # benchmark id -> the loaded benchmark (texts, qrels)


def suite_argument(suite: AblationSuite) -> str:
    """How a command names the suite: its name, or its file when the name would not find it."""
    return str(suite.path) if suite.path is not None and suite.path.stem != suite.name else suite.name


def suite_command(suite: AblationSuite, scale: str, results_root: str | Path, *extra: str,
                  command: tuple[str, ...] = ("run",)) -> str:
    """The ``harness run`` (or ``command``) line of this suite (``extra``: e.g. ``--only VARIANT``)."""
    words = ["harness", *command, suite_argument(suite), "--scale", scale, "--results-root", str(results_root),
             *extra]
    return " ".join(shlex.quote(w) for w in words)


def html_dir(results_root: str | Path, suite: str, scale: str) -> Path:
    """Where the report of a suite goes: ``html/`` next to ``table.md``."""
    return report_dir(results_root, suite, scale) / HTML_DIR


def _texts(loaded: LoadedBenchmark) -> BenchmarkTexts:
    from reports.html import BenchmarkTexts  # lazy (start-up speed): imports jinja2, scipy

    ds = loaded.dataset
    corpus = ds.corpus

    def documents(ids: set[str]) -> dict[str, tuple[str, str]]:
        # one pass over the corpus for the few shown documents (no id -> index map of a large corpus)
        return {d: (corpus.titles[i], corpus.texts[i]) for i, d in enumerate(corpus.ids) if d in ids}

    return BenchmarkTexts(dict(zip(ds.queries.ids, ds.queries.texts)), documents, ds.qrels.to_dict())


def suite_inputs(suite: AblationSuite, scale: str, results_root: str | Path, loader: Loader | None = None,
                 generated_by: str = "") -> SuiteInputs:
    """Locate every file of the finished suite the report reads: each system's replicate results
    (``results/<replicate>/<benchmark>``), the evaluation cells holding their runs, checkpoint cells,
    and the suite's PNG plots.  A missing result is a ConfigError naming it and the command that makes it."""
    # lazy (start-up speed): imports jinja2, scipy
    from reports.html import BenchmarkInfo, CellSource, SuiteInputs, SystemInfo

    cfg = suite.scale(scale)
    folder = report_dir(results_root, suite.name, scale)
    if not (folder / COMPARISONS_FILE).exists():
        raise ConfigError(f"{folder}: suite {suite.name!r} has no finished tables at scale {scale!r} "
                          f"(run: {suite_command(suite, scale, results_root)})")
    base = baseline_system(suite)
    ordered = [base] + [s for s in suite_systems(suite) if s.id != base.id]
    systems = [SystemInfo(s.id, s.label, s.variant.method, suite_command(suite, scale, results_root, "--only", s.id))
               for s in ordered]
    benchmarks = [BenchmarkInfo(b.id, b.label, b.suite) for b in cfg.benchmarks]
    result_dirs: dict[tuple[str, str], list[Path]] = {}
    run_files: dict[tuple[str, str], Path | None] = {}
    cells: list[CellSource] = []
    train_logs: dict[str, Path] = {}
    for system, info in zip(ordered, systems):
        for b in cfg.benchmarks:
            for replicate in replicates(suite, system, scale):
                for step in [None, *_checkpoint_steps(folder, replicate.id)]:
                    cell_id = replicate.id if step is None else f"{replicate.id}@step={step}"
                    path = cell_result_dir(folder, cell_id, b.id)
                    if not is_result_dir(path):
                        raise ConfigError(f"{path}: no stored result for {cell_id} on {b.id} (rerun: "
                                          f"{suite_command(suite, scale, results_root)}; finished cells are reused)")
                    run, cell_dir = _run_file(results_root, path, b.suite)
                    label = replicate.label if step is None else f"{replicate.label} @ step {step}"
                    cells.append(CellSource(label, b.label, info.command, path, cell_dir))
                    if step is None:
                        result_dirs.setdefault((system.id, b.id), []).append(path)
                        run_files.setdefault((system.id, b.id), run)
                        log = _train_log(results_root, path)
                        if log is not None:
                            train_logs.setdefault(info.label, log)
    plots = sorted(p for p in folder.rglob("*.png")
                   if p.relative_to(folder).parts[0] not in (CELL_RESULTS_DIR, HTML_DIR) and not p.name.startswith("."))

    texts = None
    if loader is not None:
        def texts(bench: str, load: Loader = loader) -> BenchmarkTexts:
            return _texts(load(bench))

    return SuiteInputs(suite.name, scale, folder, systems, benchmarks, result_dirs, run_files, cells, texts,
                       plots, " ".join(suite.description.split()), generated_by, settings_rows(suite, scale),
                       train_logs)


def _train_log(results_root: str | Path, result: Path) -> Path | None:
    """The training log of the run behind a linked result (its manifest names the training cell)."""
    train_key = (load_result(result).manifest.get("cell") or {}).get("train_key")
    if not isinstance(train_key, str):
        return None
    log = train_cell_dir(results_root, train_key) / TRAIN_LOG_FILE
    return log if log.is_file() else None


def settings_rows(suite: AblationSuite, scale: str) -> list[SettingRow]:
    """The report's settings table: what the dry run prints (:func:`harness.ablation.provenance.settings_diff`)."""
    from reports.html.model import SettingRow  # lazy (start-up speed): imports jinja2, scipy

    return [SettingRow(d.system, d.name, value_text(d.value), d.source, value_text(d.baseline), d.baseline_source)
            for d in settings_diff(suite, scale)]


def _checkpoint_steps(folder: Path, replicate_id: str) -> list[int]:
    """The steps of a replicate's evaluated checkpoints (``results/<replicate>@step=<n>/``), ascending."""
    prefix = f"{replicate_id}@step="
    results = folder / "results"
    names = [p.name for p in results.iterdir() if p.name.startswith(prefix)] if results.is_dir() else []
    return sorted(int(n[len(prefix):]) for n in names if n[len(prefix):].isdigit())


def _run_file(results_root: str | Path, result: Path, benchmark_suite: str) -> tuple[Path | None, str]:
    """The run of a linked result: its evaluation cell (same manifest) keeps ``run.trec.gz``."""
    stored = load_result(result)
    train_key = (stored.manifest.get("cell") or {}).get("train_key")
    if not isinstance(train_key, str):
        return None, ""
    step = (stored.manifest.get("cell") or {}).get("step")
    own = (stored.manifest.get("cell") or {}).get("variant_evaluation")
    source = eval_cell_dir(results_root, eval_key(train_key, benchmark_suite, stored.card.fingerprint(), step, own))
    if (source / RUN_FILE).exists() and is_result_dir(source) and \
            load_result(source).manifest.get("created") == stored.manifest.get("created"):
        return source / RUN_FILE, str(source)
    return None, ""


def write_suite_html(suite: AblationSuite, scale: str, results_root: str | Path, loader: Loader | None = None,
                     generated_by: str = "") -> Path:
    """Build and write the suite's HTML report; returns the path of ``index.html``."""
    from reports.html import build_report, write_html  # lazy (start-up speed): imports jinja2, scipy

    inputs = suite_inputs(suite, scale, results_root, loader, generated_by)
    report = build_report(inputs)
    tables, problems = reported_tables(suite, scale, results_root)
    report.tables += tables
    report.warnings += problems
    for warning in report.warnings:
        log.warning("HTML report of %s (%s): %s", suite.name, scale, warning)
    return write_html(report, html_dir(results_root, suite.name, scale))


def reported_tables(suite: AblationSuite, scale: str, results_root: str | Path) -> tuple[list[ResultTable], list[str]]:
    """The suite's layouts that print a paper's numbers beside ours (reported rows or columns), as tables of the
    HTML report, and a warning for each such layout that could not be rendered (the report stands without it)."""
    tables: list[ResultTable] = []
    warnings: list[str] = []
    section = table_section(suite)
    for name in section.layouts:
        try:
            layout = load_layout(suite, scale, name, section)
        except ConfigError:
            continue            # e.g. a layout without columns at this scale: not part of this report
        if not layout.has_reported:
            continue
        try:
            table = layout_kind(layout.kind).render(suite, scale, results_root, layout)
        except (ConfigError, InputError) as exc:
            warnings.append(f"layout {name!r} (printed numbers beside ours) was not rendered: {exc}")
            continue
        tables.append(html_table(table, f"reported-{name}", f"{table.caption} (layout {name})"))
    return tables, warnings


def html_table(table: Table, table_id: str, title: str) -> ResultTable:
    """A :class:`reports.table.Table` as a table of the HTML report, with the texts its Markdown shows: printed
    numbers carry their mark and footnote number, the footnotes and notes follow the table."""
    from reports.html.model import ResultTable, StatCell, TableColumn, TableRow  # lazy (start-up speed): jinja2, scipy

    shown = table_layout(table)
    rows = []
    for item in shown.body:
        if not isinstance(item, BodyRow):
            continue
        cells = {}
        for column, cell in zip(shown.columns, item.cells):
            if cell.text == MISSING and cell.note_ref is None:
                continue
            text = cell.text + (REPORTED_MARK if REPORTED_MARK in cell.marks else "") + \
                (f" [{cell.note_ref}]" if cell.note_ref else "")
            cells[column.key] = StatCell(_sort_value(cell.text), text, delta_text=cell.delta or "",
                                         mark="".join(m for m in cell.marks if m != REPORTED_MARK), best=cell.bold)
        printed_only = all(REPORTED_MARK in c.marks for c in item.cells if c.text != MISSING)
        kind = "baseline" if item.kind == "baseline" else "reported" if printed_only else "system"
        rows.append(TableRow(item.label, kind, cells))
    notes = [*shown.notes, *(f"[{ref}] {text}" for ref, text in shown.cell_notes)]
    return ResultTable(table_id, title, [TableColumn(c.key, c.label, c.group or "") for c in shown.columns], rows,
                       list(shown.legend), notes)


def _sort_value(text: str) -> float:
    """The number a cell sorts by: its leading number ("48.7 ± 0.3", "+1.2"), NaN for text."""
    match = re.match(r"[+-]?\d+(?:\.\d+)?", text)
    return float(match.group(0)) if match else math.nan


def write_cli_html(suite: AblationSuite, scale: str, results_root: str | Path) -> Path:
    """``harness table suite NAME --html``: the report of a finished suite, benchmarks loaded for the texts."""
    refs = {b.id: b for b in suite.scale(scale).benchmarks}
    command = suite_command(suite, scale, results_root, "--html", command=("table", "suite"))
    return write_suite_html(suite, scale, results_root, lambda b: load_benchmark_ref(refs[b], suite.metrics),
                            command)


def write_runner_html(runner: SuiteRun) -> Path | None:
    """The runner's hook: write the report; a failure is logged as an error naming the cause and the command
    that retries it, and the run's tables (already written) stand."""
    try:
        index = write_suite_html(runner.suite, runner.scale, runner.root, runner.benchmark,
                                 suite_command(runner.suite, runner.scale, runner.root))
        log.info("HTML report: %s", index)
        return index
    except Exception as exc:  # noqa: BLE001 - reported, not swallowed: the tables are written already
        log.error("HTML report of suite %s (%s) failed: %s: %s; retry with: %s", runner.suite.name, runner.scale,
                  type(exc).__name__, exc,
                  suite_command(runner.suite, runner.scale, runner.root, "--html", command=("table", "suite")))
        return None
