"""LaTeX rendering: escaping, booktabs structure, and a real pdflatex compile."""
from __future__ import annotations

import re

import pytest

from reports.latex import escape_latex, render_latex
from reports.table import Cell, Column, Row, Table

NASTY = r"50% & $x$ #1 _a_ {b} ~c^ \\d <e> |f| \"g\" a--b `h` 中"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("&", r"\&"),
        ("%", r"\%"),
        ("$", r"\$"),
        ("#", r"\#"),
        ("_", r"\_"),
        ("{", r"\{"),
        ("}", r"\}"),
        ("~", r"\textasciitilde{}"),
        ("^", r"\textasciicircum{}"),
        ("\\", r"\textbackslash{}"),
        ("\\&", r"\textbackslash{}\&"),
        ("<a|b>", r"\textless{}a\textbar{}b\textgreater{}"),
        ('"q"', r"\texttt{\char34}q\texttt{\char34}"),
        ("a--b---c", "a-{}-b-{}-{}-c"),
        ("x\ny\tz", "x y z"),
        ("nDCG@10", "nDCG@10"),
        ("p ≤ 0.01 †‡", r"p $\leq$ 0.01 \textdagger{}\textdaggerdbl{}"),
        ("α=0.5, τ", r"$\alpha$=0.5, $\tau$"),
        ("Touché Zürich Łódź", "Touché Zürich Łódź"),   # Latin letters pass through
        ("ð", "[U+00F0]"),                             # not in the default OT1 encoding
        ("中文", "[U+4E2D][U+6587]"),
        ("ไทย", "[U+0E44][U+0E17][U+0E22]"),
        ("zero\u200bwidth", "zerowidth"),
    ],
)
def test_escape_latex(text, expected):
    assert escape_latex(text) == expected


def test_escape_latex_keep_mode_keeps_cjk_but_escapes_specials():
    assert escape_latex("中文_1 & 2", unicode="keep") == r"中文\_1 \& 2"
    with pytest.raises(ValueError, match="unicode must be"):
        escape_latex("x", unicode="drop")


def _all_nasty_table() -> Table:
    """Every user-supplied string field holds the nasty string."""
    return Table(
        columns=[Column(NASTY, NASTY, group=NASTY), Column("b", NASTY)],
        rows=[Row(NASTY, {NASTY: Cell(NASTY), "b": Cell(0.5, marks=(NASTY,), note=NASTY)}, group=NASTY),
              Row("other", {NASTY: Cell(0.25), "b": Cell(0.4)})],
        caption=NASTY, legend={NASTY: NASTY}, notes=[NASTY], row_header=NASTY,
    )


def test_every_user_string_goes_through_the_escape_function():
    tex = render_latex(_all_nasty_table())
    escaped = escape_latex(NASTY)
    # caption, legend mark and meaning (3), column group and two column labels (3), row header,
    # row-group header, row label, string cell, marker, table note (6), and the cell note naming
    # the row group, row label and column label before the note text (4)
    assert tex.count(escaped) == 16
    # and nothing of it appears raw
    assert NASTY not in tex and "50% &" not in tex


def test_nasty_strings_compile(compile_latex):
    compile_latex(render_latex(_all_nasty_table()), name="nasty")


def test_structure_headers_rules_and_cells(sample_table):
    tex = render_latex(sample_table)
    lines = tex.splitlines()
    assert lines[0] == r"\begin{table}[t]" and lines[-1] == r"\end{table}"
    assert r"\begin{tabular}{lcccc}" in lines
    assert lines.count(r"\toprule") == 1 and lines.count(r"\bottomrule") == 1
    upper = r" & \multicolumn{2}{c}{SciFact \& co} & \multicolumn{1}{c}{MIRACL\_zh} &  \\"
    assert upper in lines
    assert r"\cmidrule(lr){2-3}\cmidrule(lr){4-4}" in lines
    assert r"System $\downarrow$ & nDCG@10 & R@100 & nDCG@10 & ms/query \\" in lines
    assert r"\multicolumn{5}{l}{\textit{Ours: 50\% \& more}} \\" in lines
    # bold best (ties at the displayed precision), underline second, markers, deltas, note refs
    row = next(line for line in lines if line.startswith("tDRO [U+4E2D]"))
    assert row == (r"tDRO [U+4E2D][U+6587] Touché & \textbf{68.7}\textsuperscript{\textdagger{}} (+1.0) & "
                   r"\underline{93.1}\textsuperscript{\textdagger{}\textdaggerdbl{}} ($-$1.6) & "
                   r"\textbf{24.5} (+0.0) & \underline{5.0}\textsuperscript{[1]} \\")
    row = next(line for line in lines if line.startswith("Avg gains"))
    assert row == r"Avg gains & +1.0 & $-$0.0 & +0.0 & \textendash{} \\"
    # a rule separates the gain row from the data rows above it, and the ungrouped average row
    i = lines.index(row)
    assert lines[i - 1] == r"\midrule" and lines[i + 1] == r"\midrule" and lines[i + 2].startswith("Average &")
    caption = next(line for line in lines if line.startswith(r"\caption{"))
    assert caption.endswith(r"\textsuperscript{\textdagger{}}\,p \textless{} 0.05 vs BM25 (Holm); "
                            r"\textsuperscript{\textdaggerdbl{}}\,p \textless{} 0.01 \& d\_z \textgreater{} 0.2.}")
    assert r"[1]~Ours: 50\% \& more / tDRO [U+4E2D][U+6587] Touché, ms/query: printed 5.1\par}" in tex


def test_column_counts_match_the_tabular_spec(sample_table):
    tex = render_latex(sample_table)
    n = 1 + len(sample_table.columns)
    for line in tex.splitlines():
        if line.endswith(r"\\") and r"\multicolumn{5}" not in line:
            cells = re.split(r"(?<!\\)&", line[:-2])
            spans = sum(int(m) - 1 for m in re.findall(r"\\multicolumn\{(\d+)\}", line))
            assert len(cells) + spans == n, line


def test_bad_label_is_refused():
    table = Table(columns=[Column("a", "A")], rows=[Row("r", {"a": Cell(0.1)})], label="tab:a b")
    with pytest.raises(ValueError, match="LaTeX label"):
        render_latex(table)


def test_sample_table_compiles_with_pdflatex(sample_table, compile_latex):
    log = compile_latex(render_latex(sample_table), name="sample")
    assert "Missing character" not in log


def test_table_without_groups_compiles(compile_latex):
    table = Table(columns=[Column("a", "MRR@10"), Column("b", "R@1")],
                  rows=[Row("x", {"a": Cell(0.5), "b": Cell(-0.25)}), Row("y", {"a": Cell(0.6)})],
                  caption="", notes=[])
    tex = render_latex(table)
    assert r"\multicolumn" not in tex and r"\cmidrule" not in tex and r"\caption" not in tex
    compile_latex(tex, name="plain")
