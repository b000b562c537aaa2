"""Discovery of the transcribed papers and their tables (``reports/papers/<paper-id>/``)."""
from __future__ import annotations

import re
from pathlib import Path

from harness.errors import ConfigError
from reports.papers.schema import PaperSpec, TableSpec, load_paper_spec, load_table_spec

PAPERS_ROOT = Path(__file__).resolve().parent
_TABLE_FILE = re.compile(r"^table(\d+)\.yaml$")


def list_papers(root: Path | None = None) -> list[PaperSpec]:
    """Every paper folder (one with a ``paper.yaml``) under ``root`` (default: this folder), sorted by id."""
    root = PAPERS_ROOT if root is None else root
    return [load_paper_spec(d) for d in sorted(root.iterdir()) if (d / "paper.yaml").is_file()]


def find_paper(ref: str, root: Path | None = None) -> PaperSpec:
    """A paper by id (``000``, or ``0``) or short name (``tdro``), case-insensitive."""
    papers = list_papers(root)
    wanted = ref.strip().lower()
    for paper in papers:
        if wanted in (paper.id.lower(), paper.short_name) or (wanted.isdigit() and paper.id.isdigit()
                                                              and int(wanted) == int(paper.id)):
            return paper
    known = ", ".join(f"{p.id} ({p.short_name})" for p in papers) or "none"
    raise ConfigError(f"unknown paper {ref!r}; transcribed papers: {known}")


def table_numbers(paper: PaperSpec) -> list[int]:
    found = [int(m.group(1)) for f in paper.directory.iterdir() if (m := _TABLE_FILE.match(f.name))]
    return sorted(found)


def load_tables(ref: str, number: int | None = None, root: Path | None = None) -> list[TableSpec]:
    """The tables of one paper (all, or table ``number``), parsed and validated."""
    paper = find_paper(ref, root)
    numbers = table_numbers(paper)
    if number is not None:
        if number not in numbers:
            raise ConfigError(f"paper {paper.id} ({paper.short_name}) has no transcribed table {number}; "
                              f"transcribed: {', '.join(map(str, numbers)) or 'none'}")
        numbers = [number]
    return [load_table_spec(paper.directory / f"table{n}.yaml", paper) for n in numbers]
