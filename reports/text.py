"""Plain-text rendering of a :class:`reports.table.Table` for a terminal: aligned columns, no markup.

Same content as the Markdown and LaTeX renderers (it goes through :func:`reports.table.layout`):
the caption above, the legend, notes and per-cell notes below.  Nothing is escaped (``<`` stays
``<``); bold and underline have no plain-text form and are shown as ``*`` after the value, so the
best value of a column can still be told apart.  Column groups become a first header line.
"""
from __future__ import annotations

from reports.table import BodyRow, FormattedCell, GroupHeader, Table, layout

BEST_MARK = "*"


def _cell(cell: FormattedCell) -> str:
    text = cell.text + "".join(cell.marks)
    if cell.bold:
        text += BEST_MARK
    if cell.delta is not None:
        text += f" ({cell.delta})"
    if cell.note_ref is not None:
        text += f" [{cell.note_ref}]"
    return text


def render_text(table: Table) -> str:
    """An aligned plain-text table: label column left-aligned, value columns right-aligned."""
    lay = layout(table)
    header = [lay.row_header] + [c.label for c in lay.columns]
    groups = [""] * (len(lay.columns) + 1)        # a group's name over the first column it spans
    for span in lay.spans:
        groups[span.start + 1] = span.group or ""
    body: list[list[str] | str] = []
    for item in lay.body:
        if isinstance(item, GroupHeader):
            body.append(item.name)
        elif isinstance(item, BodyRow):
            body.append([item.label] + [_cell(c) for c in item.cells])
    rows = [r for r in body if isinstance(r, list)]
    widths = [max(len(line[i]) for line in [header, groups, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]).rstrip()

    out: list[str] = []
    if lay.caption:
        out += [lay.caption, ""]
    if any(groups[1:]):
        out.append(line(groups))
    out.append(line(header))
    out.append("  ".join("-" * w for w in widths))
    for row in body:
        out.append(f"{row}:" if isinstance(row, str) else line(row))
    below = [f"{mark} {meaning}" for mark, meaning in lay.legend]
    if any(cell.bold for item in lay.body if isinstance(item, BodyRow) for cell in item.cells):
        below.append(f"{BEST_MARK} best in its column")
    below += list(lay.notes)
    below += [f"[{ref}] {text}" for ref, text in lay.cell_notes]
    if below:
        out.append("")
        out += below
    return "\n".join(out) + "\n"
