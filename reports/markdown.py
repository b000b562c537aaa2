"""GitHub-flavoured Markdown rendering of a :class:`reports.table.Table`, same content as LaTeX.

GitHub tables have one header row, so a column group and its metric are combined into one
header (``SciFact nDCG@10``).  Row groups become a row with the group name in italics in the
first column and empty cells elsewhere.  Bold is ``**x**``, underline ``<u>x</u>``, markers
and per-cell note references are ``<sup>`` superscripts.  The caption is a paragraph above
the table; the marker legend, the notes and the per-cell notes are paragraphs below it.
Every user string goes through :func:`escape_markdown`.
"""
from __future__ import annotations

import re

from reports.table import BodyRow, FormattedCell, GroupHeader, Table, layout

_ESCAPED = {
    "\\": "\\\\",
    "|": "\\|",
    "*": "\\*",
    "_": "\\_",
    "`": "\\`",
    "[": "\\[",
    "]": "\\]",
    "~": "\\~",
    "$": "\\$",
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
    "\n": " ",
    "\r": " ",
    "\t": " ",
}
_LINE_START = re.compile(r"^(\s*)(?:([-+#=>])|(\d+)([.)]))")


def _escape_line_start(match: re.Match) -> str:
    indent, symbol, number, period = match.groups()
    return indent + ("\\" + symbol if symbol else number + "\\" + period)


def escape_markdown(text: str, paragraph: bool = False) -> str:
    """Escape one user string for GitHub Markdown (inside a table cell, or a paragraph).

    In a paragraph, a leading ``-``, ``+``, ``#``, ``>``, ``=`` or ``1.`` is escaped too, so a
    note is never turned into a list, heading or quote.
    """
    escaped = "".join(_ESCAPED.get(ch, ch) for ch in str(text))
    if paragraph:
        escaped = _LINE_START.sub(_escape_line_start, escaped, count=1)
    return escaped


def _cell(cell: FormattedCell) -> str:
    text = cell.text if cell.numeric else escape_markdown(cell.text)
    if cell.bold:
        text = f"**{text}**"
    if cell.underline:
        text = f"<u>{text}</u>"
    if cell.marks:
        text += "<sup>" + "".join(escape_markdown(m) for m in cell.marks) + "</sup>"
    if cell.delta is not None:
        text += f" ({cell.delta})"
    if cell.note_ref is not None:
        text += f"<sup>\\[{cell.note_ref}\\]</sup>"
    return text


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(table: Table) -> str:
    """A GitHub Markdown table with caption above and legend/notes below."""
    lay = layout(table)
    out: list[str] = []
    if lay.label:
        out.append(f'<a id="{escape_markdown(lay.label)}"></a>')
        out.append("")
    if lay.caption:
        out.append(escape_markdown(lay.caption, paragraph=True))
        out.append("")
    header = [escape_markdown(lay.row_header)]
    for column in lay.columns:
        combined = f"{column.group} {column.label}" if column.group and column.label else (column.group or column.label)
        header.append(escape_markdown(combined))
    out.append(_row(header))
    out.append(_row([":---"] + [":---:"] * len(lay.columns)))
    for item in lay.body:
        if isinstance(item, GroupHeader):
            out.append(_row([f"*{escape_markdown(item.name)}*"] + [""] * len(lay.columns)))
        elif isinstance(item, BodyRow):
            out.append(_row([escape_markdown(item.label)] + [_cell(c) for c in item.cells]))
    below: list[str] = []
    if lay.legend:
        below.append("; ".join(f"<sup>{escape_markdown(m)}</sup> {escape_markdown(meaning)}"
                               for m, meaning in lay.legend) + ".")
    below += [escape_markdown(note, paragraph=True) for note in lay.notes]
    below += [f"\\[{ref}\\] {escape_markdown(text)}" for ref, text in lay.cell_notes]
    for paragraph in below:
        out.append("")
        out.append(paragraph)
    return "\n".join(out) + "\n"
