"""A static, self-contained HTML report of a finished ablation suite.

:func:`build_report` reads what the suite run stored (``comparisons.json``, each cell's per-query
values and run, the protocol cards) from the locations a :class:`SuiteInputs` names, and
:func:`write_html` writes ``index.html`` (sortable, filterable tables with markers and intervals,
per-benchmark and per-language breakdowns, plots, the largest per-query wins and losses with the
query and the top documents, the cards, the command of each cell) plus ``assets/``.
The application layer (``harness.ablation.html_report``) fills :class:`SuiteInputs`.
"""
from reports.html.build import build_report
from reports.html.model import BenchmarkInfo, BenchmarkTexts, CellSource, HtmlReport, SuiteInputs, SystemInfo
from reports.html.render import is_report_dir, render_html, write_html

__all__ = ["BenchmarkInfo", "BenchmarkTexts", "CellSource", "HtmlReport", "SuiteInputs", "SystemInfo", "build_report",
           "is_report_dir", "render_html", "write_html"]
