"""Shared by the paper-table tests: which tables are transcribed, and small readers of specs and paper text."""
from __future__ import annotations

from pathlib import Path

from reports.papers import TableSpec, load_tables

# paper id -> (short name, text extraction in the seed papers folder)
PAPERS = {
    "000": ("tdro", "000_ada95d63021a91bc.txt"),
    "001": ("coco-dr", "001_6e9515faa31bebcf.txt"),
    "002": ("peg", "002_9264c86fc6f3336c.txt"),
    "003": ("mistral-splade", "003_be88b668fe32bd02.txt"),
    "004": ("bdumdr", "004_ad9c3a6cb422de10.txt"),
}
# paper id -> the table numbers transcribed under reports/papers/<id>/
TRANSCRIBED = {"000": [1, 3, 4, 5, 7, 8, 9, 10, 11], "001": [1, 2, 3, 6, 7], "002": [1, 2, 3, 4], "003": [1, 2],
               "004": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16]}
ALL_TABLES = [(paper, n) for paper, numbers in TRANSCRIBED.items() for n in numbers]


def table_spec(paper: str, number: int) -> TableSpec:
    (spec,) = load_tables(paper, number)
    return spec


def paper_lines(papers_dir: Path, paper: str) -> list[str]:
    """The lines of a paper's text extraction (line k of the file is item k - 1)."""
    return (papers_dir / PAPERS[paper][1]).read_text(encoding="utf-8").splitlines()


def paper_text(papers_dir: Path, paper: str) -> str:
    return (papers_dir / PAPERS[paper][1]).read_text(encoding="utf-8")


def printed_cells(row) -> list[str]:
    """A transcribed row's cells as the paper prints them, gaps (cells the extraction lost) left out."""
    return [c.text for c in row.cells if c.kind != "gap"]


def pipe_cells(line: str) -> list[str]:
    """The printed cells of one Markdown-style extraction line (``| a | b |``), empty cells dropped."""
    return [c.strip() for c in line.strip().strip("|").split("|") if c.strip()]


def row_values(spec: TableSpec, row_id: str) -> dict[str, float | str | None]:
    """One row's values keyed by column key."""
    row = spec.row(row_id)
    return {c.key: cell.value for c, cell in zip(spec.columns, row.cells)}


def column_values(spec: TableSpec, key: str) -> dict[str, float | str | None]:
    """One column's values keyed by row label (Touché spelled Touche, as another table prints it)."""
    j = [c.key for c in spec.columns].index(key)
    return {r.label.replace("Touché", "Touche"): r.cells[j].value for r in spec.rows}
