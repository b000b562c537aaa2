"""Markdown rendering: a valid GitHub table (parsed back), the same content as LaTeX, escaping."""
from __future__ import annotations

import re

import pytest

from reports.markdown import escape_markdown, render_markdown
from reports.table import Cell, Column, Row, Table

_PIPE = re.compile(r"(?<!\\)\|")


def parse_markdown_table(text: str) -> tuple[list[str], list[str], list[list[str]]]:
    """(header, alignment row, body rows) of the single GFM table in ``text``; checks the shape."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) >= 2, "no table"
    block_start = text.splitlines().index(lines[0])
    block = text.splitlines()[block_start:block_start + len(lines)]
    assert block == lines, "table lines must be contiguous"
    rows = []
    for line in lines:
        assert line.startswith("| ") and line.endswith(" |"), line
        rows.append([cell.strip() for cell in _PIPE.split(line)[1:-1]])
    header, align, body = rows[0], rows[1], rows[2:]
    assert all(re.fullmatch(r":?-{3,}:?", a) for a in align)
    assert {len(r) for r in rows} == {len(header)}, "inconsistent column counts"
    return header, align, body


def test_markdown_is_a_valid_table_with_the_same_content(sample_table):
    md = render_markdown(sample_table)
    header, align, body = parse_markdown_table(md)
    assert header == ["System ↓", "SciFact &amp; co nDCG@10", "SciFact &amp; co R@100", "MIRACL\\_zh nDCG@10",
                      "ms/query"]
    assert align == [":---", ":---:", ":---:", ":---:", ":---:"]
    labels = [r[0] for r in body]
    assert labels == ["*Baselines*", "BM25", "Contriever\\_v2 #1", "*Ours: 50% &amp; more*", "tDRO 中文 Touché",
                      "tDRO (reweight)", "Avg gains", "Average"]
    by_label = {r[0]: r[1:] for r in body}
    assert by_label["*Baselines*"] == ["", "", "", ""]
    assert by_label["BM25"] == ["66.5", "90.8", "<u>18.0</u>", "**2.1**"]
    assert by_label["Contriever\\_v2 #1"] == ["<u>67.7</u>", "**94.7**", "–", "5.5"]
    assert by_label["tDRO 中文 Touché"] == ["**68.7**<sup>†</sup> (+1.0)", "<u>93.1</u><sup>†‡</sup> (-1.6)",
                                           "**24.5** (+0.0)", "<u>5.0</u><sup>\\[1\\]</sup>"]
    assert by_label["tDRO (reweight)"] == ["**68.7**", "92.9", "**24.5**", "n/a"]
    assert by_label["Avg gains"] == ["+1.0", "-0.0", "+0.0", "–"]
    assert by_label["Average"] == ["67.9", "–", "22.3", "–"]
    after = md[md.index("| Average"):].split("\n", 1)[1]
    paragraphs = after.strip().split("\n\n")
    assert paragraphs == [
        "<sup>†</sup> p &lt; 0.05 vs BM25 (Holm); <sup>‡</sup> p &lt; 0.01 &amp; d\\_z &gt; 0.2.",
        "Holm correction over 4 comparisons; 95% CI by paired bootstrap.",
        "\\- starts with a dash",
        "\\[1\\] Ours: 50% &amp; more / tDRO 中文 Touché, ms/query: printed 5.1",
    ]
    assert md.startswith('<a id="tab:sample"></a>\n\n'
                         'nDCG@10 ≤ 1; 50% &amp; \\$x\\$ #1 \\_a\\_ {b} \\~c^ \\\\d &lt;e&gt; \\|f\\| ')


def test_markdown_and_latex_agree_on_bold_and_underline(sample_table):
    from reports.latex import render_latex

    md = render_markdown(sample_table)
    tex = render_latex(sample_table)
    assert md.count("**") // 2 == tex.count(r"\textbf{")
    assert md.count("<u>") == tex.count(r"\underline{")


@pytest.mark.parametrize(
    ("text", "paragraph", "expected"),
    [
        ("a|b", False, "a\\|b"),
        ("*x* _y_ `z` [l](u)", False, "\\*x\\* \\_y\\_ \\`z\\` \\[l\\](u)"),
        ("<b>&", False, "&lt;b&gt;&amp;"),
        ("$x$ ~y~", False, "\\$x\\$ \\~y\\~"),
        ("back\\slash", False, "back\\\\slash"),
        ("line\nbreak", False, "line break"),
        ("- item", True, "\\- item"),
        ("1. item", True, "1\\. item"),
        ("# head", True, "\\# head"),
        ("- item", False, "- item"),
    ],
)
def test_escape_markdown(text, paragraph, expected):
    assert escape_markdown(text, paragraph=paragraph) == expected


def test_pipes_in_cells_do_not_break_the_table():
    table = Table(columns=[Column("a|b", "x|y", group="g|h")],
                  rows=[Row("r|s", {"a|b": Cell("p|q")}), Row("t", {"a|b": Cell(0.1)})])
    header, _, body = parse_markdown_table(render_markdown(table))
    assert header == ["", "g\\|h x\\|y"]
    assert body == [["r\\|s", "p\\|q"], ["t", "10.0"]]
