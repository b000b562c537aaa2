"""Reports: the shared table model with LaTeX/Markdown renderers, plots, and the seed papers' tables as data.

Public API::

    from reports import Cell, Column, Row, Table, render_latex, render_markdown

Plots live in :mod:`reports.plots` (imported on demand: matplotlib is slow to import), the
seed papers' tables in :mod:`reports.papers` (see reports/papers/README.md).
"""
from reports.latex import escape_latex, render_latex
from reports.markdown import escape_markdown, render_markdown
from reports.table import Cell, Column, Row, Table, format_delta, format_number, round_display

__all__ = [
    "Cell",
    "Column",
    "Row",
    "Table",
    "escape_latex",
    "escape_markdown",
    "format_delta",
    "format_number",
    "render_latex",
    "render_markdown",
    "round_display",
]
