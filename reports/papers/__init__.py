"""The seed papers' tables as data: declarative YAML files, recomputed derived cells, verify.

Layout and schema: ``reports/papers/README.md``.  Public API::

    from reports.papers import load_tables, verify, to_table
    for spec in load_tables("tdro"):            # or "000"; number=3 for one table
        print(render_markdown(to_table(spec)))
        for finding in verify(spec):
            print(finding.kind, finding.message)
"""
from reports.papers.catalog import PAPERS_ROOT, find_paper, list_papers, load_tables, table_numbers
from reports.papers.engine import FINDING_KINDS, Finding, Recomputer, count_checked, to_table, verify
from reports.papers.schema import PaperSpec, Printed, TableSpec, load_table_spec, parse_printed

__all__ = [
    "FINDING_KINDS",
    "PAPERS_ROOT",
    "Finding",
    "PaperSpec",
    "Printed",
    "Recomputer",
    "TableSpec",
    "count_checked",
    "find_paper",
    "list_papers",
    "load_table_spec",
    "load_tables",
    "parse_printed",
    "table_numbers",
    "to_table",
    "verify",
]
