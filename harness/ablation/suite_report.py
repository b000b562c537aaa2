"""The report of a finished suite: compare every system with the baseline, write the tables and the summary.

Under ``suites/<suite>/<scale>/`` (:func:`harness.ablation.paths.report_dir`) it writes ``table.md``,
``table.tex``, ``comparisons.json`` and ``summary.json``, exposes every evaluation cell under its stable name
``results/<variant>/<benchmark>/`` (hard links to ``cells/eval/<key>/``), adds the sweep and learning-curve
tables and plots of a suite with those axes, then the HTML report (a hook the caller passes);
:func:`write_json_lock` records the resolved suite next to them.  It reads a
:class:`harness.ablation.suite_state.SuiteState` and the stored results; it trains and evaluates nothing
(:mod:`harness.ablation.cell_work` does).
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.ablation.axes import baseline_system, replicate_table, suite_systems
from harness.ablation.layout import LayoutColumn, TableLayout, layout_kind
from harness.ablation.paths import cell_result_dir
from harness.ablation.suite_state import SuiteState
from harness.io import atomic_dir, atomic_write_json, atomic_write_text
from harness.io.claims import claim
from harness.io.results_layout import (
    COMPARISONS_FILE,
    RESOLVED_SUITE_FILE,
    SUMMARY_FILE,
    TABLE_MD,
    TABLE_TEX,
)
from harness.protocol import assert_comparable
from harness.store import (
    MANIFEST_FILE,
    METRICS_FILE,
    PER_QUERY_FILE,
    RESULT_FILES,
    StoredResult,
    is_result_dir,
    load_result,
)
from reports.latex import render_latex
from reports.markdown import render_markdown
from reports.table import Table

if TYPE_CHECKING:
    from harness.stats.suite import ComparisonReport

# benchmark label -> cell label -> its stored result (every finished cell, checkpoints included)
Results = dict[str, dict[str, StoredResult]]
# benchmark label -> system label -> the runs of its seed replicates (systems with more than one)
Replicates = dict[str, dict[str, list[Any]]]


@dataclass
class SuiteOutcome:
    suite: str
    scale: str
    report_dir: Path
    complete: bool
    markdown: str | None = None
    latex: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    main_process: bool = True      # False on the other ranks of a launch: they train, the main one evaluates


def write_report(state: SuiteState, write_html: Callable[[], object]) -> SuiteOutcome:
    """Compare every variant with the baseline and write the tables (all cells must be done, else the outcome
    lists the pending ones and nothing is written).  ``write_html`` runs last, under the same claim; it logs
    its own failure (the tables stand)."""
    pending = state.pending()
    if pending:
        return SuiteOutcome(state.suite.name, state.scale, state.report_dir, False, pending=pending)

    report, results, replicates = _compare(state)
    table = _table(state, report, replicates)
    markdown, latex = render_markdown(table), render_latex(table)
    summary = _summary(state, report, results)
    out = state.report_dir
    # Two processes finishing the same suite would race to rename the result links into place.
    with claim(out, f"tables of {state.suite.name} ({state.scale})"):
        atomic_write_text(out / TABLE_MD, markdown)
        atomic_write_text(out / TABLE_TEX, latex)
        atomic_write_json(out / COMPARISONS_FILE, report.to_dict())
        atomic_write_json(out / SUMMARY_FILE, summary)
        _link_results(state)
        sections = _axes_reports(state)     # sweep and learning-curve tables and plots, if the suite has axes
        if sections:
            markdown = "\n".join([markdown, *sections])
            atomic_write_text(out / TABLE_MD, markdown)

        write_html()     # html/ next to table.md
    return SuiteOutcome(state.suite.name, state.scale, out, True, markdown, latex, summary)


def write_json_lock(state: SuiteState) -> None:
    """Record the resolved suite (cells and their configs) next to the table, for provenance."""
    payload = {"suite": state.suite.raw, "scale": state.scale,
               "cells": {c.variant.id: {"key": c.key, "config": c.config} for c in state.train_cells}}
    atomic_write_text(state.report_dir / RESOLVED_SUITE_FILE, json.dumps(payload, indent=2, default=str) + "\n")


def _axes_reports(state: SuiteState) -> list[str]:
    """The ``sweep`` and ``curve`` layouts of a suite with those axes, over its aggregates (else every
    benchmark) and metrics: ``sweep.md``/``curve.md`` and their ``.tex``, plots as PNG and PDF; returns the
    Markdown sections appended to ``table.md`` (none for a suite without axes)."""
    from reports.plots import save_figure  # lazy (start-up speed): imports PIL, matplotlib

    suite, scale, cfg = state.suite, state.scale, state.config
    targets = list(cfg.aggregates) or [b.id for b in cfg.benchmarks]
    columns = [LayoutColumn(t, m) for t in targets for m in suite.metrics]
    kinds = []
    if any(v.sweep is not None for v in suite.variants):
        kinds.append(("sweep", "parameter sweeps"))
    if any(suite.checkpoints_for(v, scale) is not None for v in suite.variants):
        kinds.append(("curve", "learning curves"))
    sections = []
    for kind, what in kinds:
        caption = f"Suite '{suite.name}' (scale {scale}): {what}"
        layout = TableLayout(kind, kind, caption, columns)
        impl = layout_kind(kind)
        impl.check(layout, suite, scale)
        table = impl.render(suite, scale, state.root, layout)
        text = render_markdown(table)
        atomic_write_text(state.report_dir / f"{kind}.md", text)
        atomic_write_text(state.report_dir / f"{kind}.tex", render_latex(table))
        save_figure(impl.figure(suite, scale, state.root, layout), state.report_dir / kind)
        sections.append(text)
    return sections


def _link_results(state: SuiteState) -> None:
    """Expose every eval cell as ``results/<variant>/<benchmark>`` (content keys are not stable names)."""
    for cell in state.eval_cells:
        source = state.eval_dir(cell)
        with atomic_dir(cell_result_dir(state.report_dir, cell.id, cell.benchmark.id),
                        is_ours=is_result_dir, what="a harness result", owned=RESULT_FILES) as tmp:
            for name in (PER_QUERY_FILE, METRICS_FILE, MANIFEST_FILE):
                try:
                    os.link(source / name, tmp / name)
                except OSError:  # another file system, or links not allowed: copy
                    shutil.copy2(source / name, tmp / name)


def _aggregates(state: SuiteState) -> dict[str, list[str]]:
    """The scale's aggregates with their members named by benchmark label (as the comparison knows them)."""
    bench_labels = {b.id: b.label for b in state.config.benchmarks}
    return {name: [bench_labels.get(m, m) for m in members] for name, members in state.config.aggregates.items()}


def _compare(state: SuiteState) -> tuple[ComparisonReport, Results, Replicates]:
    """The comparison of every system with the baseline (seed replicates averaged per query), every finished
    cell's result and the replicates of each system with several."""
    from harness.stats import compare_suite  # lazy (start-up speed): imports scipy
    from harness.stats.replicates import average_replicates  # lazy (start-up speed): imports scipy
    from harness.stats.suite import same_runs  # lazy (start-up speed): imports scipy

    suite = state.suite
    stats = dict(suite.stats)
    systems = suite_systems(suite)
    labels = {s.id: s.label for s in systems}
    results: Results = {}                         # every finished cell, by its own label (the summary)
    compared: dict[str, dict[str, Any]] = {}     # one result per system: replicates averaged per query
    replicates: Replicates = {}
    for b in state.config.benchmarks:
        per_variant = {}
        per_system: dict[str, list[Any]] = {}
        reference = None
        for ec in state.eval_cells:
            if ec.benchmark.id != b.id:
                continue
            stored = load_result(state.eval_dir(ec))
            if reference is None:
                reference = stored
            else:
                assert_comparable(reference.card, stored.card, what=f"results on {b.label}")
            per_variant[ec.train.label if ec.step is None else f"{ec.train.label} @ step {ec.step}"] = stored
            if ec.step is None:
                per_system.setdefault(ec.train.system, []).append(stored)
        results[b.label] = per_variant
        replicates[b.label] = {labels[s]: runs for s, runs in per_system.items() if len(runs) > 1}
        compared[b.label] = {labels[s.id]: (per_system[s.id][0] if len(per_system[s.id]) == 1 else
                                            average_replicates(per_system[s.id], what=f"{s.id} on {b.label}"))
                             for s in systems}
    aggregates = _aggregates(state)
    baseline = labels[baseline_system(suite).id]
    # a run shown under two names (or two runs with identical results) is compared and counted once
    keys: dict[str, set[str]] = {}
    for c in state.train_cells:
        keys.setdefault(labels[c.system], set()).add(c.key)
    same_as = same_runs(keys, compared, [labels[s.id] for s in systems if labels[s.id] != baseline])
    report = compare_suite(compared, suite.metrics, baseline=baseline,
                           aggregates=aggregates or None, aggregate_method=stats.get("aggregate", "pooled"),
                           options=suite.stats_options(), correction=stats.get("correction", "holm"),
                           alpha=float(stats.get("alpha", 0.05)), same_as=same_as or None)
    return report, results, replicates


def _table(state: SuiteState, report: ComparisonReport, replicates: Replicates) -> Table:
    """The comparison table; rows of systems with seed replicates show ``mean ± sd`` over the seeds."""
    from reports.comparison import comparison_table  # lazy (start-up speed): imports scipy

    suite, scale = state.suite, state.scale
    caption = f"Ablation suite '{suite.name}' (scale {scale}): variants vs baseline " \
              f"'{baseline_system(suite).label}'; deltas in parentheses."
    table = comparison_table(report, caption=caption, label=f"tab:{suite.name}-{scale}")
    if any(replicates.values()):
        table = replicate_table(table, replicates, suite.metrics, _aggregates(state), grouped=True)
    return table


def _summary(state: SuiteState, report: ComparisonReport, results: Results) -> dict[str, Any]:
    """``summary.json``: every cell's scores, the cells with their keys and folders, the tests and the cards."""
    suite = state.suite
    scores = {bench: {variant: stored.metrics for variant, stored in per_variant.items()}
              for bench, per_variant in results.items()}
    cells = []
    for c in state.train_cells:
        # "dir" is relative to the results root: the summary of the same suite is the same anywhere
        entry: dict[str, Any] = {"variant": c.variant.id, "method": c.method, "key": c.key,
                                 "dir": state.train_dir(c).relative_to(state.root).as_posix() if c.trains else None}
        if c.replicate is not None and (c.system != c.variant.id or c.seed is not None or c.steps):
            entry.update({"declared": c.declared, "system": c.system, "seed": c.seed, "steps": c.steps,
                          "final_step": c.spec.steps if c.spec is not None else None})
        cells.append(entry)
    return {"suite": suite.name, "version": suite.version, "scale": state.scale,
            "baseline": suite.baseline, "metrics": suite.metrics, "scores": scores,
            "cells": cells, "correction": report.correction, "test": report.options.test,
            "cards": {bench: next(iter(pv.values())).card.to_dict() for bench, pv in results.items()}}
