"""LaTeX rendering of a :class:`reports.table.Table`: booktabs, escaped, compiles with pdflatex.

Every user string (labels, headers, caption, legend, notes, string cells, markers) goes
through :func:`escape_latex`; nothing is concatenated unescaped.  The output is a complete
``table`` float that needs only ``\\usepackage{booktabs}`` in the preamble (``multirow`` is
not required, but harmless).

Unicode policy (pdflatex with its default UTF-8 input encoding and OT1 fonts):

* LaTeX specials ``& % $ # _ { } ~ ^ \\`` and ``< > | " `` are escaped to commands that print
  the character itself; ``--`` is kept from becoming an en dash.
* Common symbols map to commands: † ‡ § ¶ • … – — and math symbols (≤ ≥ ± × − → ↑ ↓ ∗ ♭ ♮ ♯,
  Greek letters, ✓ as √, ✗ as ×).
* Latin letters with diacritics (Latin-1 Supplement and Latin Extended-A) pass through, except
  the few the default OT1 encoding cannot typeset (ð þ đ ą ę ħ į ŋ ŧ ų ...).
* Everything else pdflatex cannot typeset out of the box (CJK, Thai, Arabic, Devanagari,
  emoji, ...) is written as a visible code such as ``[U+4E2D]`` with ``unicode="escape"``
  (the default), so the table always compiles and nothing is silently dropped.  With
  ``unicode="keep"`` such characters are emitted verbatim, for xelatex/lualatex with a font
  that has them (e.g. ``xeCJK``); the LaTeX specials are escaped either way.
"""
from __future__ import annotations

import re
import unicodedata

from reports.table import BodyRow, FormattedCell, GroupHeader, Layout, Rule, Table, layout

_SPECIALS = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    '"': r"\texttt{\char34}",
    "`": r"\`{}",
    "\n": " ",
    "\r": " ",
    "\t": " ",
}

_SYMBOLS = {
    "†": r"\textdagger{}",
    "‡": r"\textdaggerdbl{}",
    "§": r"\S{}",
    "¶": r"\P{}",
    "•": r"\textbullet{}",
    "…": r"\ldots{}",
    "–": r"\textendash{}",
    "—": r"\textemdash{}",
    "‘": "`",
    "’": "'",
    "“": "``",
    "”": "''",
    "«": r"$\ll$",
    "»": r"$\gg$",
    "\u00a0": "~",
    "\u00ad": "",
    "−": "$-$",
    "±": r"$\pm$",
    "×": r"$\times$",
    "÷": r"$\div$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "≠": r"$\neq$",
    "≈": r"$\approx$",
    "∼": r"$\sim$",
    "→": r"$\rightarrow$",
    "←": r"$\leftarrow$",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "∗": r"$\ast$",
    "⋆": r"$\star$",
    "♭": r"$\flat$",
    "♮": r"$\natural$",
    "♯": r"$\sharp$",
    "°": r"$^{\circ}$",
    "µ": r"$\mu$",
    "·": r"$\cdot$",
    "∞": r"$\infty$",
    "√": r"$\surd$",
    "✓": r"$\surd$",
    "✔": r"$\surd$",
    "✗": r"$\times$",
    "✘": r"$\times$",
    "¹": r"$^{1}$",
    "²": r"$^{2}$",
    "³": r"$^{3}$",
}

_GREEK = {
    "α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon", "ϵ": "epsilon", "ζ": "zeta",
    "η": "eta", "θ": "theta", "ι": "iota", "κ": "kappa", "λ": "lambda", "μ": "mu", "ν": "nu", "ξ": "xi",
    "π": "pi", "ρ": "rho", "σ": "sigma", "ς": "varsigma", "τ": "tau", "υ": "upsilon", "φ": "phi",
    "ϕ": "phi", "χ": "chi", "ψ": "psi", "ω": "omega", "Γ": "Gamma", "Δ": "Delta", "Θ": "Theta",
    "Λ": "Lambda", "Ξ": "Xi", "Π": "Pi", "Σ": "Sigma", "Υ": "Upsilon", "Φ": "Phi", "Ψ": "Psi", "Ω": "Omega",
}
_SYMBOLS.update({ch: f"$\\{name}$" for ch, name in _GREEK.items()})

# Latin letters the default OT1 font encoding cannot typeset (they need T1 or other encodings).
_OT1_MISSING = set("ÐÞðþĄąĐđĘęĦħĮįĸĿŀŉŊŋŦŧŲųſ")


def _pdflatex_can_typeset(ch: str) -> bool:
    code = ord(ch)
    if 0x20 <= code < 0x7F:
        return True
    if 0xC0 <= code <= 0x17F and ch not in _OT1_MISSING and unicodedata.category(ch).startswith("L"):
        return True
    return False


def escape_latex(text: str, unicode: str = "escape") -> str:
    """Escape one user string for LaTeX text mode (the single escape function of this module).

    ``unicode="escape"`` writes characters pdflatex cannot typeset as ``[U+XXXX]``;
    ``unicode="keep"`` leaves them for xelatex/lualatex.
    """
    if unicode not in ("escape", "keep"):
        raise ValueError(f"unicode must be 'escape' or 'keep', got {unicode!r}")
    text = str(text)
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch in _SPECIALS:
            out.append(_SPECIALS[ch])
        elif ch == "-":
            # "--" and "---" would become dashes; keep every hyphen a hyphen.
            out.append("-{}" if i + 1 < len(text) and text[i + 1] == "-" else "-")
        elif ch in _SYMBOLS:
            out.append(_SYMBOLS[ch])
        elif _pdflatex_can_typeset(ch):
            out.append(ch)
        elif unicodedata.category(ch).startswith("C"):
            out.append(" " if ch.isspace() else "")  # control and format characters carry no glyph
        elif unicode == "keep":
            out.append(ch)
        else:
            out.append(f"[U+{ord(ch):04X}]")
    return "".join(out)


_LABEL_RE = re.compile(r"^[A-Za-z0-9:._/+-]+$")


def _number(text: str) -> str:
    """A formatted number (ASCII from reports.table): typeset the minus sign."""
    return "$-$" + text[1:] if text.startswith("-") else text


def _cell(cell: FormattedCell, unicode: str) -> str:
    text = _number(cell.text) if cell.numeric else escape_latex(cell.text, unicode)
    if cell.bold:
        text = rf"\textbf{{{text}}}"
    if cell.underline:
        text = rf"\underline{{{text}}}"
    if cell.marks:
        text += r"\textsuperscript{" + "".join(escape_latex(m, unicode) for m in cell.marks) + "}"
    if cell.delta is not None:
        text += f" ({_number(cell.delta)})"
    if cell.note_ref is not None:
        text += rf"\textsuperscript{{[{cell.note_ref}]}}"
    return text


def _caption(lay: Layout, unicode: str) -> str:
    parts = [escape_latex(lay.caption, unicode)] if lay.caption else []
    legend = "; ".join(
        rf"\textsuperscript{{{escape_latex(mark, unicode)}}}\,{escape_latex(meaning, unicode)}"
        for mark, meaning in lay.legend
    )
    if legend:
        parts.append(legend + ".")
    return " ".join(parts)


def render_latex(table: Table, unicode: str = "escape") -> str:
    """A booktabs ``table`` float: caption with the marker legend, label, multi-level header,
    grouped rows, notes (table notes and per-cell notes) under the tabular."""
    lay = layout(table)
    if lay.label and not _LABEL_RE.match(lay.label):
        raise ValueError(f"LaTeX label {lay.label!r} may only contain letters, digits and : . _ / + -")
    n = len(lay.columns)
    lines = [r"\begin{table}[t]", r"\centering"]
    caption = _caption(lay, unicode)
    if caption:
        lines.append(rf"\caption{{{caption}}}")
    if lay.label:
        lines.append(rf"\label{{{lay.label}}}")
    lines.append(r"\begin{tabular}{l" + "c" * n + "}")
    lines.append(r"\toprule")
    stub = escape_latex(lay.row_header, unicode)
    if lay.has_groups:
        upper = [""]
        rules = []
        for span in lay.spans:
            name = escape_latex(span.group, unicode) if span.group is not None else ""
            upper.append(rf"\multicolumn{{{span.span}}}{{c}}{{{name}}}" if span.group is not None else "")
            if span.group is not None:
                rules.append(rf"\cmidrule(lr){{{span.start + 2}-{span.start + span.span + 1}}}")
        lines.append(" & ".join(upper) + r" \\")
        lines.append("".join(rules))
    lower = [stub] + [escape_latex(c.label, unicode) for c in lay.columns]
    lines.append(" & ".join(lower) + r" \\")
    lines.append(r"\midrule")
    for item in lay.body:
        if isinstance(item, Rule):
            lines.append(r"\midrule")
        elif isinstance(item, GroupHeader):
            lines.append(rf"\multicolumn{{{n + 1}}}{{l}}{{\textit{{{escape_latex(item.name, unicode)}}}}} \\")
        elif isinstance(item, BodyRow):
            cells = [escape_latex(item.label, unicode)] + [_cell(c, unicode) for c in item.cells]
            lines.append(" & ".join(cells) + r" \\")
    lines.append(r"\bottomrule")
    lines.append(r"\end{tabular}")
    footer = [escape_latex(note, unicode) for note in lay.notes]
    footer += [rf"[{ref}]~{escape_latex(text, unicode)}" for ref, text in lay.cell_notes]
    if footer:
        lines.append(r"\par\smallskip")
        lines.append(r"{\footnotesize " + r"\par ".join(footer) + r"\par}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
