"""Fixtures for the reports tests: a pdflatex compiler (the seed papers' text: ``papers_dir`` in tests/conftest.py)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from reports.table import Cell, Column, Row, Table

PREAMBLE = "\\documentclass{article}\n\\usepackage{booktabs,multirow}\n"


@pytest.fixture(scope="session")
def compile_latex(tmp_path_factory):
    """``compile_latex(body) -> log text``: compile a minimal document around ``body`` with pdflatex.

    Fails (never skips) when pdflatex is missing: the dev set-up installs it.
    """
    exe = shutil.which("pdflatex")
    if exe is None:
        pytest.fail("pdflatex not found on PATH: the LaTeX tests need TeX "
                    "(`bash scripts/setup.sh --dev` installs texlive-latex-base/-recommended/-extra)")

    def compile_(body: str, name: str = "doc", preamble: str = PREAMBLE) -> str:
        workdir = tmp_path_factory.mktemp("latex")
        source = workdir / f"{name}.tex"
        source.write_text(preamble + "\\begin{document}\n" + body + "\n\\end{document}\n", encoding="utf-8")
        proc = subprocess.run(
            [exe, "-interaction=nonstopmode", "-halt-on-error", source.name],
            cwd=workdir, capture_output=True, text=True, timeout=300,
        )
        log_path = workdir / f"{name}.log"
        log = log_path.read_text(encoding="latin-1") if log_path.exists() else proc.stdout
        if proc.returncode != 0 or not (workdir / f"{name}.pdf").exists():
            errors = [line for line in log.splitlines() if line.startswith("!")]
            pytest.fail(f"pdflatex failed (exit {proc.returncode}) on {source}:\n" + "\n".join(errors[:10])
                        + "\n--- log tail ---\n" + log[-3000:])
        return log

    return compile_


NASTY = r"50% & $x$ #1 _a_ {b} ~c^ \d <e> |f| \"g\" a--b `h`"


def _sample_table() -> Table:
    columns = [
        Column("scifact/ndcg@10", "nDCG@10", group="SciFact & co"),
        Column("scifact/recall@100", "R@100", group="SciFact & co"),
        Column("miracl/ndcg@10", "nDCG@10", group="MIRACL_zh"),
        Column("latency", "ms/query", higher_is_better=False),
    ]
    rows = [
        Row("BM25", {"scifact/ndcg@10": Cell(0.665), "scifact/recall@100": Cell(0.908),
                     "miracl/ndcg@10": Cell(0.180), "latency": Cell(0.021)}, group="Baselines", kind="baseline"),
        Row("Contriever_v2 #1", {"scifact/ndcg@10": Cell(0.677), "scifact/recall@100": Cell(0.947),
                                 "miracl/ndcg@10": Cell(None), "latency": Cell(0.055)}, group="Baselines"),
        Row("tDRO 中文 Touché", {"scifact/ndcg@10": Cell(0.6871, delta=0.0101, marks=("†",)),
                               "scifact/recall@100": Cell(0.931, delta=-0.016, marks=("†", "‡")),
                               "miracl/ndcg@10": Cell(0.245, delta=0.0), "latency": Cell(0.050, note="printed 5.1")},
            group="Ours: 50% & more"),
        Row("tDRO (reweight)", {"scifact/ndcg@10": Cell(0.6869), "scifact/recall@100": Cell(0.929),
                                "miracl/ndcg@10": Cell(0.2449), "latency": Cell("n/a")},
            group="Ours: 50% & more"),
        Row("Avg gains", {"scifact/ndcg@10": Cell(0.0101), "scifact/recall@100": Cell(-0.0004),
                          "miracl/ndcg@10": Cell(0.0)}, group="Ours: 50% & more", kind="gain"),
        Row("Average", {"scifact/ndcg@10": Cell(0.679), "miracl/ndcg@10": Cell(0.223)}, kind="average"),
    ]
    return Table(
        columns=columns,
        rows=rows,
        caption=f"nDCG@10 ≤ 1; {NASTY}",
        label="tab:sample",
        legend={"†": "p < 0.05 vs BM25 (Holm)", "‡": "p < 0.01 & d_z > 0.2"},
        notes=["Holm correction over 4 comparisons; 95% CI by paired bootstrap.", "- starts with a dash"],
        underline_second=True,
        row_header="System ↓",
    )


@pytest.fixture
def sample_table() -> Table:
    """A table with every feature (groups, deltas, markers, notes, gain/average rows) and nasty strings."""
    return _sample_table()
