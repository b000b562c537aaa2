"""The statistics behind a comparison table, one row per comparison (``harness compare --details``).

The summary table (:func:`reports.comparison.comparison_table`) shows means, deltas and markers;
this one adds what a reader checks before trusting a marker: the raw p-value, the corrected one,
the bootstrap CI of the mean difference, Cohen's d_z and the per-query wins/ties/losses.
p-values print with three significant digits (``%.3g``), as in the HTML report.
"""
from __future__ import annotations

import math

from harness.stats.compare import Comparison
from harness.stats.correction import CORRECTION_NAMES
from harness.stats.suite import ComparisonReport
from reports.comparison import metric_label
from reports.table import MISSING, Cell, Column, Row, Table, format_number


def format_p(p: float) -> str:
    """A p-value with three significant digits (``0.0123``, ``1e-05``); NaN as a dash."""
    return MISSING if p is None or math.isnan(p) else f"{p:.3g}"


def _ci(c: Comparison, scale: float, decimals: int) -> str:
    if math.isnan(c.ci_low) or math.isnan(c.ci_high):
        return MISSING
    low, high = (format_number(v, scale, decimals, signed=True) for v in (c.ci_low, c.ci_high))
    return f"[{low}, {high}]"


def details_table(report: ComparisonReport, *, decimals: int = 1, scale: float = 100.0,
                  dataset_labels: dict[str, str] | None = None) -> Table:
    """One row per (dataset or aggregate, metric, system): base and system means, delta, CI, p, adjusted p,
    d_z and W/T/L, grouped by dataset when there are several."""
    labels = dataset_labels or {}
    grouped = len(report.datasets) + len(report.aggregates) > 1 or report.datasets[:1] != [None]
    adjusted = "adj. p" if report.correction == "none" else f"{CORRECTION_NAMES[report.correction]} p"
    columns = [Column("metric", "Metric"), Column("base", "Baseline"), Column("mean", "Mean"),
               Column("delta", "Δ"), Column("ci", f"{report.options.ci_level:.0%} CI of Δ"), Column("p", "p"),
               Column("p_adj", adjusted), Column("d", "d_z"), Column("wtl", "W/T/L"), Column("n", "n")]
    rows = []
    for c in report.comparisons:
        group = c.dataset or (f"{c.aggregate} average" if c.aggregate else None)
        rows.append(Row(c.system, {
            "metric": Cell(metric_label(c.metric)),
            "base": Cell(c.mean_base), "mean": Cell(c.mean),
            "delta": Cell(format_number(c.delta, scale, decimals, signed=True)),
            "ci": Cell(_ci(c, scale, decimals)), "p": Cell(format_p(c.p_value)), "p_adj": Cell(format_p(c.p_adjusted)),
            "d": Cell(MISSING if math.isnan(c.effect_size) else f"{c.effect_size:.2f}"),
            "wtl": Cell(f"{c.wins}/{c.ties}/{c.losses}"), "n": Cell(str(c.n)),
        }, group=labels.get(group, group) if grouped and group else None))
    return Table(columns=columns, rows=rows, decimals=decimals, scale=scale, bold_best=False, row_header="System",
                 caption=f"Statistics of each comparison with {report.baseline} (values x{scale:g}; the test and "
                         "correction are stated under the summary table)")
