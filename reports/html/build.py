"""Collect a finished suite's report content: tables, breakdowns, per-query wins and losses, cards.

Numbers come from the files the suite run wrote, never recomputed differently: the tables from
``comparisons.json`` (the same comparisons ``table.md`` shows, formatted by the same
:func:`reports.table.format_number`), the per-query values from each cell's ``per_query.tsv.gz``,
and the retrieved documents from each evaluation cell's stored run.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.run import read_run
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.io.readers import read_json_object
from harness.io.results_layout import COMPARISONS_FILE, SUMMARY_FILE
from harness.stats.replicates import (
    aggregate_replicate_means,
    average_replicates,
    replicate_means,
    replicate_spread,
)
from harness.store import load_result
from reports.comparison import GAIN_MARK, LOSS_MARK, metric_label
from reports.html.model import (
    BenchmarkTexts,
    CellInfo,
    DocHit,
    HtmlReport,
    PerQueryGroup,
    Plot,
    QueryExample,
    ResultTable,
    StatCell,
    SuiteInputs,
    SystemInfo,
    TableColumn,
    TableRow,
)
from reports.languages import language_label
from reports.table import format_delta, format_number, round_display

SCALE, DECIMALS = 100.0, 1          # as table.md: scores x 100, one decimal
TOP_QUERIES = 5                     # largest wins and largest losses shown per (system, benchmark, metric)
TOP_DOCS = 3                        # retrieved documents shown per query and system
TEXT_CHARS = 400                    # document text shown (the rest is cut with an ellipsis)


def _fmt(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else format_number(value, SCALE, DECIMALS)


def _comparisons(report_dir: Path) -> dict[str, Any]:
    path = report_dir / COMPARISONS_FILE
    if not path.exists():
        raise InputError(path, "missing: the suite has not written its tables yet (run it to the end first)")
    data = read_json_object(path, "suite comparisons")
    if not isinstance(data.get("comparisons"), list) or not isinstance(data.get("systems"), list):
        raise InputError(path, "'comparisons' and 'systems' must be lists; rerun the suite to rewrite it")
    return data


def _stat_cell(c: Mapping[str, Any], alpha: float) -> StatCell:
    delta = c.get("delta")
    p_adj = c.get("p_adjusted")
    mark = ""
    if p_adj is not None and p_adj < alpha and delta:
        mark = GAIN_MARK if delta > 0 else LOSS_MARK
    ci = (c["ci_low"], c["ci_high"]) if c.get("ci_low") is not None and c.get("ci_high") is not None else None
    ci_text = f"[{format_delta(ci[0], SCALE, DECIMALS)}, {format_delta(ci[1], SCALE, DECIMALS)}]" if ci else ""
    return StatCell(float(c["mean"]), _fmt(c["mean"]), delta, format_delta(delta, SCALE, DECIMALS)
                    if delta is not None else "", mark, ci, ci_text, c.get("p_value"), p_adj,
                    (int(c["wins"]), int(c["ties"]), int(c["losses"])), int(c["n"]))


def _legend(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    baseline, alpha = data["baseline"], data.get("alpha", 0.05)
    detail = (f"{data.get('correction', 'holm')}-adjusted p < {alpha:g}"
              if data.get("correction", "holm") != "none" else f"unadjusted p < {alpha:g}")
    return [(GAIN_MARK, f"significantly better than {baseline} ({detail})"),
            (LOSS_MARK, f"significantly worse than {baseline} ({detail})")]


def _table(table_id: str, title: str, data: Mapping[str, Any], keys: Sequence[tuple[str | None, str]],
           group_labels: Mapping[str | None, str], detailed: bool, notes: Sequence[str] = ()) -> ResultTable:
    """Systems as rows; one column per (dataset or aggregate, metric) of ``keys``."""
    alpha = float(data.get("alpha", 0.05))
    baseline = data["baseline"]
    columns = [TableColumn(f"{ds or ''}/{m}", metric_label(m), group_labels.get(ds, ds or "")) for ds, m in keys]
    wanted = {(ds, m) for ds, m in keys}
    cells: dict[str, dict[str, StatCell]] = {s: {} for s in data["systems"]}
    for c in data["comparisons"]:
        key = (c.get("dataset"), c["metric"])
        if key not in wanted or c["system"] not in cells:
            continue
        column = f"{key[0] or ''}/{key[1]}"
        cells[c["system"]][column] = _stat_cell(c, alpha)
        cells[baseline].setdefault(column, StatCell(float(c["mean_base"]), _fmt(c["mean_base"]),
                                                    n=int(c["n"])))
    _mark_best(cells, [c.key for c in columns])
    rows = [TableRow(s, "baseline" if s == baseline else "system", cells[s]) for s in data["systems"]]
    return ResultTable(table_id, title, columns, rows, _legend(data), list(notes), detailed)


def _mark_best(cells: dict[str, dict[str, StatCell]], keys: Sequence[str]) -> None:
    """Flag the highest shown value of each column (ties all flagged), as table.md bolds it."""
    for key in keys:
        shown = {s: round_display(c[key].value, SCALE, DECIMALS) for s, c in cells.items()
                 if key in c and math.isfinite(c[key].value)}
        if len(shown) < 2:
            continue
        top = max(shown.values())
        for system, value in shown.items():
            if value == top:
                cells[system][key] = replace(cells[system][key], best=True)


def _slug(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    return out or "x"


def result_tables(data: Mapping[str, Any], languages: Mapping[str, str] | None = None,
                  results: Mapping[tuple[str, str], EvaluationResult] | None = None) -> list[ResultTable]:
    """The overview table (as ``table.md``), one detailed table per benchmark and aggregate, and a
    per-language table when the benchmarks' cards name two or more languages."""
    metrics = list(data["metrics"])
    datasets: list[str | None] = list(data.get("datasets") or [None])
    aggregates = list(data.get("aggregates") or {})
    groups: list[str | None] = datasets + aggregates
    labels = {g: (g or "") for g in groups}
    tables = [_table("overview", "All results", data, [(g, m) for g in groups for m in metrics], labels, False,
                     list(data.get("description") or []))]
    for g in groups:
        kind = "aggregate" if g in aggregates else "benchmark"
        members = ", ".join(data["aggregates"][g]) if kind == "aggregate" else ""
        title = f"{g or 'Results'}" + (f" (aggregate of {members})" if members else "")
        tables.append(_table(f"{kind}-{_slug(g or 'all')}", title, data, [(g, m) for m in metrics], labels, True))
    if languages and len(set(languages.values())) > 1:
        tables.append(_language_table(data, languages, results or {}))
    return tables


def _language_table(data: Mapping[str, Any], languages: Mapping[str, str],
                    results: Mapping[tuple[str, str], EvaluationResult]) -> ResultTable:
    """Rows systems, columns (language, metric): a language with one benchmark shows that benchmark's
    comparison (marker, CI); one with several shows the macro mean of their stored scores and its delta."""
    alpha = float(data.get("alpha", 0.05))
    baseline = data["baseline"]
    by_language: dict[str, list[str]] = {}
    for bench, lang in languages.items():
        by_language.setdefault(lang, []).append(bench)
    comparisons = {(c["system"], c.get("dataset"), c["metric"]): c for c in data["comparisons"]}
    columns, cells = [], {s: {} for s in data["systems"]}   # type: ignore[var-annotated]
    pooled = []
    for lang in sorted(by_language):
        benches = by_language[lang]
        for metric in data["metrics"]:
            key = f"{lang}/{metric}"
            columns.append(TableColumn(key, metric_label(metric), language_label(lang)))
            if len(benches) == 1:
                for s in data["systems"]:
                    c = comparisons.get((s, benches[0], metric))
                    if c is not None:
                        cells[s][key] = _stat_cell(c, alpha)
                        cells[baseline].setdefault(key, StatCell(float(c["mean_base"]), _fmt(c["mean_base"])))
                continue
            pooled.append(lang)
            means = {}
            for s in data["systems"]:
                values = [results[(s, b)].aggregate[metric] for b in benches
                          if (s, b) in results and metric in results[(s, b)].aggregate]
                if len(values) == len(benches):
                    means[s] = float(np.mean(values))
            for s, mean in means.items():
                delta = mean - means[baseline] if s != baseline and baseline in means else None
                cells[s][key] = StatCell(mean, _fmt(mean), delta,
                                         format_delta(delta, SCALE, DECIMALS) if delta is not None else "")
    notes = ["Languages from the benchmarks' protocol cards."]
    if pooled:
        notes.append(f"{', '.join(sorted(set(pooled)))}: macro mean over the language's benchmarks, "
                     "delta without a test.")
    _mark_best(cells, [c.key for c in columns])
    rows = [TableRow(s, "baseline" if s == baseline else "system", cells[s]) for s in data["systems"]]
    return ResultTable("languages", "Per language", columns, rows, _legend(data), notes, False)


# ---------------------------------------------------------------------------------------------- per query
RunGroups = dict[str, tuple[np.ndarray, np.ndarray]]
Texts = tuple[Mapping[str, str], Mapping[str, tuple[str, str]], Mapping[str, Mapping[str, int]]]


def _top_docs(run_groups: Mapping[str, tuple[np.ndarray, np.ndarray]] | None, qid: str) -> list[tuple[str, float]]:
    if run_groups is None or qid not in run_groups:
        return []
    docs, scores = run_groups[qid]
    return [(str(d), float(s)) for d, s in zip(docs[:TOP_DOCS].tolist(), scores[:TOP_DOCS].tolist())]


def _run_groups(path: Path | None, wanted: set[str]) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """``{query id: (doc ids, scores)}`` in rank order for the wanted queries of a stored run."""
    if path is None or not path.exists():
        return None

    run = read_run(path)
    return {q: (d, s) for q, d, s in run.groups() if q in wanted}


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"


def per_query_groups(inputs: SuiteInputs, data: Mapping[str, Any],
                     results: Mapping[tuple[str, str], EvaluationResult], metrics: Sequence[str],
                     warnings: list[str]) -> list[PerQueryGroup]:
    """For every non-baseline system, benchmark and metric: the largest wins and losses over the baseline."""
    base = inputs.systems[0]
    groups: list[PerQueryGroup] = []
    for bench in inputs.benchmarks:
        plan: list[tuple[SystemInfo, str, list[tuple[str, float, float]], list[tuple[str, float, float]],
                         tuple[int, int, int]]] = []     # what is shown, before any text is read
        for system in inputs.systems[1:]:
            a, b = results[(base.id, bench.id)], results[(system.id, bench.id)]
            for metric in metrics:
                if metric not in a.per_query or metric not in b.per_query:
                    continue
                va, vb = a.metric(metric), b.metric(metric)
                qids = [q for q in a.query_ids if q in vb]
                deltas = np.array([vb[q] - va[q] for q in qids], dtype=np.float64)
                # largest first; ties broken by query id so the page is the same for the same results
                order = sorted(range(len(qids)), key=lambda i: (-deltas[i], qids[i]))
                best = [i for i in order if deltas[i] > 0][:TOP_QUERIES]
                worst = [i for i in sorted(range(len(qids)), key=lambda i: (deltas[i], qids[i]))
                         if deltas[i] < 0][:TOP_QUERIES]
                counts = (int((deltas > 0).sum()), int((deltas == 0).sum()), int((deltas < 0).sum()))
                plan.append((system, metric, [(qids[i], va[qids[i]], vb[qids[i]]) for i in best],
                             [(qids[i], va[qids[i]], vb[qids[i]]) for i in worst], counts))
        if not plan:
            continue
        shown = {q for _, _, w, lo, _ in plan for q, _, _ in w + lo}
        texts, note = _texts(inputs, bench.id, warnings)
        runs: dict[str, RunGroups | None] = {}
        for sid in [base.id] + [p[0].id for p in plan]:
            if sid not in runs:
                runs[sid] = _run_groups(inputs.run_files.get((sid, bench.id)), shown)
        missing_runs = sorted(s for s, r in runs.items() if r is None)
        replicated = {s.id for s in inputs.systems if len(inputs.result_dirs.get((s.id, bench.id), [])) > 1}
        doc_ids = {d for r in runs.values() if r for q in shown for d, _ in _top_docs(r, q)}
        documents = texts.documents(doc_ids) if texts else {}
        queries = texts.queries if texts else {}
        qrels = texts.qrels if texts else {}

        for system, metric, win_rows, loss_rows, counts in plan:
            group_note = note
            if missing_runs:
                group_note = (group_note + " " if group_note else "") + \
                    f"No stored run for {', '.join(missing_runs)}: retrieved documents not shown."
            averaged = [s.label for s in (base, system) if s.id in replicated]
            if averaged:
                group_note = (group_note + " " if group_note else "") + \
                    f"{' and '.join(averaged)}: per-query values are means over seed replicates; documents are " \
                    "those of the first replicate's run."
            shown_texts = (queries, documents, qrels)
            groups.append(PerQueryGroup(
                f"pq-{_slug(system.id)}-{_slug(bench.id)}-{_slug(metric)}", system.label, bench.label, metric,
                _examples(win_rows, runs[base.id], runs[system.id], shown_texts),
                _examples(loss_rows, runs[base.id], runs[system.id], shown_texts), counts, group_note))
    return groups


def _hits(run: RunGroups | None, qid: str, texts: Texts) -> tuple[DocHit, ...]:
    _, documents, qrels = texts
    judged = qrels.get(qid, {})
    out = []
    for rank, (doc, score) in enumerate(_top_docs(run, qid), start=1):
        title, body = documents.get(doc, ("", ""))
        out.append(DocHit(rank, doc, score, _cut(title), _cut(body), judged.get(doc) if qrels else None))
    return tuple(out)


def _examples(rows: Sequence[tuple[str, float, float]], base_run: RunGroups | None, system_run: RunGroups | None,
              texts: Texts) -> list[QueryExample]:
    return [QueryExample(q, texts[0].get(q, ""), base_v, sys_v, sys_v - base_v, _hits(base_run, q, texts),
                         _hits(system_run, q, texts)) for q, base_v, sys_v in rows]


def _texts(inputs: SuiteInputs, bench: str, warnings: list[str]) -> tuple[BenchmarkTexts | None, str]:
    """The benchmark's texts, or None and the reason (shown on the page and logged as a warning)."""
    if inputs.texts is None:
        return None, "Query and document texts were not loaded."
    try:
        return inputs.texts(bench), ""
    except Exception as exc:  # noqa: BLE001 - the page says why and the numbers still stand
        message = f"texts of {bench} could not be loaded ({type(exc).__name__}: {exc})"
        warnings.append(message)
        return None, message[0].upper() + message[1:] + "."


# ---------------------------------------------------------------------------------------------- the report
def _cells(inputs: SuiteInputs) -> list[CellInfo]:
    out = []
    for cell in inputs.cells:
        m = read_json_object(cell.result_dir / "manifest.json", "result manifest")
        out.append(CellInfo(cell.system, cell.benchmark, cell.command, str(cell.result_dir), cell.cell_dir,
                            str(m.get("created", "")), str(m.get("git_commit") or ""), int(m.get("num_queries", 0))))
    return out


def replicate_spreads(data: Mapping[str, Any], inputs: SuiteInputs,
                      stored: Mapping[tuple[str, str], Sequence[Any]]) -> dict[tuple[str, str, str], float]:
    """``{(system label, dataset or aggregate, metric): sd over seed replicates}`` for systems with several
    replicates: the sample sd of each replicate's score (an aggregate's macro average per replicate), as
    table.md shows ``mean ± sd``."""
    bench_labels = {b.id: b.label for b in inputs.benchmarks}
    aggregates = {name: list(members) for name, members in (data.get("aggregates") or {}).items()}
    out: dict[tuple[str, str, str], float] = {}
    for system in inputs.systems:
        runs = {bench_labels[b]: list(stored[(system.id, b)]) for b in bench_labels}
        if all(len(r) < 2 for r in runs.values()):
            continue
        for metric in data["metrics"]:
            for label, replicate_runs in runs.items():
                if len(replicate_runs) > 1:
                    out[(system.label, label, metric)] = replicate_spread(replicate_means(replicate_runs, metric))[1]
            for name in aggregates:
                try:
                    means = aggregate_replicate_means(runs, metric, aggregates, name)
                except ConfigError:
                    continue
                if len(means) > 1:
                    out[(system.label, name, metric)] = replicate_spread(means)[1]
    return out


def _with_spreads(tables: list[ResultTable], spreads: Mapping[tuple[str, str, str], float]) -> None:
    """Cells of replicated systems read ``mean ± sd`` (the per-language table keeps the mean: its columns
    are languages)."""
    if not spreads:
        return
    for table in tables:
        if table.id == "languages":
            continue
        for row in table.rows:
            for key, cell in list(row.cells.items()):
                dataset, _, metric = key.rpartition("/")
                sd = spreads.get((row.system, dataset, metric))
                if sd is not None and math.isfinite(sd):
                    row.cells[key] = replace(cell, text=f"{cell.text} ± {format_number(sd, SCALE, DECIMALS)}")
    for table in tables:
        if table.id != "languages":
            table.notes.append("± : sample standard deviation over a system's seed replicates; its tests use the "
                               "per-query scores averaged over the replicates.")


def _plots(paths: Sequence[Path]) -> list[Plot]:
    plots, names = [], set()
    for path in paths:
        name = path.name
        k = 2
        while name in names:
            name = f"{path.stem}-{k}{path.suffix}"
            k += 1
        names.add(name)
        plots.append(Plot(path.stem.replace("_", " "), name, path.read_bytes()))
    return plots


def build_report(inputs: SuiteInputs, per_query_metrics: Sequence[str] | None = None,
                 difference_figures: bool = True) -> HtmlReport:
    """Everything the page shows, read from the suite's files (errors name the file and problem)."""
    data = _comparisons(inputs.report_dir)
    summary = read_json_object(inputs.report_dir / SUMMARY_FILE, "suite summary") \
        if (inputs.report_dir / SUMMARY_FILE).exists() else {}
    by_label = {s.label: s for s in inputs.systems}
    unknown = [s for s in data["systems"] if s not in by_label]
    if unknown or data["baseline"] != inputs.systems[0].label:
        raise InputError(inputs.report_dir / COMPARISONS_FILE,
                         f"systems {data['systems']} do not match the suite's variants "
                         f"{[s.label for s in inputs.systems]}; rerun the suite to rewrite its tables")
    stored = {key: [load_result(path) for path in paths] for key, paths in inputs.result_dirs.items()}
    results = {key: runs[0].evaluation if len(runs) == 1 else average_replicates(runs, what=f"{key[0]} on {key[1]}")
               for key, runs in stored.items()}
    cards: dict[str, dict[str, Any]] = {}
    languages: dict[str, str] = {}
    for bench in inputs.benchmarks:
        card = stored[(inputs.systems[0].id, bench.id)][0].card.to_dict()
        cards[bench.label] = card
        lang = (card.get("extra") or {}).get("language")
        if isinstance(lang, str) and lang:
            languages[bench.label] = lang
    by_label_results = {(s.label, b.label): results[(s.id, b.id)] for s in inputs.systems for b in inputs.benchmarks}
    warnings: list[str] = []
    metrics = list(per_query_metrics or data["metrics"])
    plots = _plots(inputs.plots)
    if difference_figures:
        from reports.html.figures import difference_plots  # lazy (start-up speed): imports PIL, matplotlib

        plots += difference_plots(inputs.systems, [b.id for b in inputs.benchmarks], data["metrics"][0], results,
                                  missing=str((data.get("options") or {}).get("missing", "error")))
    if inputs.train_logs:
        from reports.html.figures import training_curve_plot  # lazy (start-up speed): imports PIL, matplotlib

        curves = training_curve_plot(inputs.train_logs)
        if curves is not None:
            plots.append(curves)
    tables = result_tables(data, languages, by_label_results)
    _with_spreads(tables, replicate_spreads(data, inputs, stored))
    report = HtmlReport(
        suite=inputs.suite, scale=inputs.scale, description=inputs.description, baseline=data["baseline"],
        systems=list(data["systems"]), metrics=list(data["metrics"]),
        tables=tables,
        per_query=per_query_groups(inputs, data, results, metrics, warnings),
        cards=cards, cells=_cells(inputs), plots=plots,
        notes=[f"Suite version {summary.get('version', '?')}; test {data.get('test')}, correction "
               f"{data.get('correction')}, alpha {data.get('alpha')}."],
        generated_by=inputs.generated_by, warnings=warnings, settings=list(inputs.settings),
        ci_level=float((data.get("options") or {}).get("ci_level", 0.95)))
    return report


def cards_json(cards: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each card as indented JSON (what the page prints)."""
    return {name: json.dumps(card, indent=2, ensure_ascii=False, sort_keys=False) for name, card in cards.items()}
