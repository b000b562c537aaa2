"""A comparison report as a table of the shared table model (``reports.table``).

One row per system (the baseline first), one column per metric, grouped by
dataset (and aggregate) when there are several.  A cell shows the system's mean
with its delta to the baseline, e.g. ``48.7 (+2.9)``, and a marker when the
corrected p-value is below alpha: ``†`` for a significant gain, ``‡`` for a
significant loss.  The legend and notes name the test, the correction, the
family, alpha and the interval method, so a table never travels without them.
"""
from __future__ import annotations

import re

from harness.stats.compare import TEST_NAMES
from harness.stats.correction import CORRECTION_NAMES
from harness.stats.suite import ComparisonReport
from reports.table import Cell, Column, Row, Table

GAIN_MARK = "†"
LOSS_MARK = "‡"
_METRIC_NAMES = {"ndcg": "nDCG", "ndcg_cut": "nDCG", "recall": "R", "p": "P", "precision": "P", "mrr": "MRR",
                 "recip_rank": "MRR", "map": "MAP", "map_cut": "MAP", "success": "Success", "acc": "Acc",
                 "hit": "Hit", "r_cap": "R_cap"}


def metric_label(metric: str) -> str:
    """Display name of a metric id: ``ndcg@10`` -> ``nDCG@10``, ``recall@100`` -> ``R@100``."""
    match = re.fullmatch(r"([A-Za-z_]+)(?:[@_.](\d+))?", metric)
    if not match:
        return metric
    name = _METRIC_NAMES.get(match.group(1).lower(), match.group(1))
    return f"{name}@{match.group(2)}" if match.group(2) else name


def _column_key(dataset: str | None, metric: str) -> str:
    return f"{dataset}/{metric}" if dataset else metric


def comparison_table(report: ComparisonReport, *, caption: str = "", label: str = "", decimals: int = 1,
                     scale: float = 100.0, dataset_labels: dict[str, str] | None = None) -> Table:
    """Build the :class:`reports.table.Table` of a :class:`ComparisonReport`."""
    dataset_labels = dataset_labels or {}
    groups: list[str | None] = list(report.datasets) + list(report.aggregates)
    grouped = len(groups) > 1 or groups[0] is not None
    compared = {(c.dataset, c.metric) for c in report.comparisons}   # a dataset may lack a metric (no qrels)
    columns = [Column(_column_key(ds, m), metric_label(m),
                      group=dataset_labels.get(ds, ds) if grouped and ds is not None else None)
               for ds in groups for m in report.metrics if (ds, m) in compared]
    alpha = report.alpha
    base_cells: dict[str, Cell] = {}
    rows: list[Row] = []
    for system in report.systems[1:]:
        cells: dict[str, Cell] = {}
        for c in report.comparisons:
            if c.system != system:
                continue
            key = _column_key(c.dataset, c.metric)
            marks: tuple[str, ...] = ()
            if c.significant(alpha):
                marks = (GAIN_MARK,) if c.delta > 0 else (LOSS_MARK,) if c.delta < 0 else ()
            cells[key] = Cell(c.mean, delta=c.delta, marks=marks)
            base_cells.setdefault(key, Cell(c.mean_base))
        rows.append(Row(system, cells))
    rows.insert(0, Row(report.baseline, base_cells, kind="baseline"))
    sizes = "/".join(str(s) for s in sorted({c.family_size for c in report.comparisons}))
    p_text = ("unadjusted p" if report.correction == "none"
              else f"{CORRECTION_NAMES[report.correction]}-adjusted p over {sizes} comparisons")
    detail = f"{p_text} < {alpha:g}, {TEST_NAMES[report.options.test]}"
    # A marker is explained only when a cell carries it (no legend for a table with nothing marked).
    used = {mark for row in rows for cell in row.cells.values() for mark in cell.marks}
    legend = {}
    if GAIN_MARK in used:
        legend[GAIN_MARK] = f"significantly better than {report.baseline} ({detail})"
    if LOSS_MARK in used:
        legend[LOSS_MARK] = f"significantly worse than {report.baseline} ({detail})"
    if not caption:
        caption = f"Systems compared with {report.baseline}; deltas in parentheses."
    return Table(columns=columns, rows=rows, caption=caption, label=label, legend=legend,
                 notes=report.describe(), decimals=decimals, scale=scale, row_header="System")
