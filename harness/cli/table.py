"""``harness table``: regenerate tables.

``harness table paper <id> [--table N] [--format latex|markdown] [--verify]`` regenerates a seed
paper's transcribed tables (reports/papers) with every derived cell recomputed from the printed
base numbers; ``--verify`` reports each derived value that disagrees with its print (a report,
exit status 0; a malformed table file exits 2).  ``harness table paper --list`` lists the papers.

``harness table suite <suite> [--scale S] [--results-root DIR] [--layout NAME] --format latex|markdown``
renders a finished suite's stored results in a layout declared in the suite file's ``table:``
section (harness/ablation/layout.py); ``--figure STEM`` also writes the layout's figure (a weights layout: a bar chart)
(``STEM.png`` and ``STEM.pdf``); ``--list`` names the suite's layouts.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from harness.errors import ConfigError
from harness.io import atomic_write_text, check_new_file
from harness.io.results_layout import TABLE_MD
from reports.latex import render_latex
from reports.markdown import render_markdown


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("table", help="regenerate tables (the seed papers' published tables)",
                       description="Regenerate tables as LaTeX or GitHub Markdown.")
    kinds = p.add_subparsers(dest="table_kind", metavar="KIND")
    kinds.required = True
    paper = kinds.add_parser(
        "paper", help="a seed paper's transcribed tables, derived cells recomputed",
        description="Regenerate a seed paper's tables from reports/papers/<id>/table<k>.yaml: base numbers as "
                    "printed, derived cells (averages, deltas, gains) recomputed. --verify lists every derived "
                    "value that disagrees with the printed one beyond rounding, and every extraction gap.",
    )
    paper.add_argument("paper", nargs="?", help="paper id (000) or short name (tdro)")
    paper.add_argument("--table", type=int, default=None, metavar="N", help="only table N (default: all)")
    paper.add_argument("--format", choices=("latex", "markdown"), default=None,
                       help="output format (default: markdown, or none with --verify)")
    paper.add_argument("--verify", action="store_true", help="report derived values that disagree with the paper")
    paper.add_argument("--output", type=Path, default=None,
                       help="write the tables to this file instead of stdout (an existing file: only with --overwrite)")
    paper.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    paper.add_argument("--list", action="store_true", help="list the transcribed papers and their tables")
    paper.set_defaults(func=run_paper)

    suite = kinds.add_parser(
        "suite", help="a finished ablation suite's results in a layout declared in its suite file",
        description="Render a finished suite's stored results (per-query scores, comparisons recomputed for the "
                    "table's cells with the suite's statistics settings) in a layout from the suite file's "
                    "'table:' section, e.g. paper 000's Table 5 for the tdro suite.",
    )
    suite.add_argument("suite", help="suite name (suites/ablations/<name>.yaml) or path to a suite file")
    suite.add_argument("--scale", default="tiny", help="the scale the suite ran at (default: tiny)")
    suite.add_argument("--results-root", type=Path, default=Path("results"), help="the suite's results directory")
    suite.add_argument("--layout", default=None, help="layout name (default: the suite's default layout)")
    suite.add_argument("--format", choices=("latex", "markdown"), default="markdown")
    suite.add_argument("--output", type=Path, default=None,
                       help="write the table to this file instead of stdout (an existing file: only with --overwrite)")
    suite.add_argument("--figure", type=Path, default=None, metavar="STEM",
                       help="weights layouts: also write a bar chart to STEM.png and STEM.pdf (existing ones: only "
                            "with --overwrite)")
    suite.add_argument("--overwrite", action="store_true", help="replace an existing --output file or figure")
    suite.add_argument("--list", action="store_true", help="list the suite's layouts")
    suite.add_argument("--html", action="store_true",
                       help="write the suite's HTML report to <results-root>/suites/<suite>/<scale>/html instead")
    suite.set_defaults(func=run_suite_table)


def _list() -> str:
    from reports.papers import list_papers, table_numbers  # lazy (start-up speed): imports yaml

    lines = []
    for paper in list_papers():
        numbers = ", ".join(map(str, table_numbers(paper))) or "none"
        lines.append(f"{paper.id}  {paper.short_name:<16} tables {numbers:<14} {paper.title}")
    return "\n".join(lines) + "\n"


def verify_report(specs) -> str:
    """The plain-text verify report for some tables (what ``--verify`` prints)."""
    from reports.papers import count_checked, verify  # lazy (start-up speed): imports yaml

    out = []
    for spec in specs:
        findings = verify(spec)
        counts = Counter(f.kind for f in findings)
        out.append(f"{spec.ref}: {count_checked(spec)} printed derived values checked; "
                   f"{counts['mismatch']} mismatch, {counts['rounding']} rounding, {counts['gap']} gap, "
                   f"{counts['unrecomputable']} unrecomputable")
        labels = {r.id: r.label for r in spec.rows}
        for f in findings:
            where = labels[f.row] if labels[f.row] == f.row else f"{labels[f.row]} [{f.row}]"
            out.append(f"  {f.kind:<14} {where} / {f.column} ({f.part}): {f.message}")
    return "\n".join(out) + "\n"


def run_paper(args: argparse.Namespace) -> int:
    from reports.papers import load_tables, to_table  # lazy (start-up speed): imports yaml

    if args.list:
        sys.stdout.write(_list())
        return 0
    if not args.paper:
        raise ConfigError("name a paper (id or short name), or use --list")
    if args.output is not None:
        check_new_file(args.output, args.overwrite)
    specs = load_tables(args.paper, args.table)
    fmt = args.format or (None if args.verify else "markdown")
    if fmt is not None:
        parts = []
        for spec in specs:
            title = f"Paper {spec.paper.id} ({spec.paper.short_name}), Table {spec.number}"
            if fmt == "latex":
                parts.append(f"% {title}\n" + render_latex(to_table(spec)))
            else:
                parts.append(f"### {title}\n\n" + render_markdown(to_table(spec)))
        text = "\n".join(parts)
        if args.output is not None:
            atomic_write_text(args.output, text)
        else:
            sys.stdout.write(text)
            if args.verify:
                sys.stdout.write("\n")
    if args.verify:
        sys.stdout.write(verify_report(specs))
    return 0


def run_suite_table(args: argparse.Namespace) -> int:
    from harness.ablation import load_suite  # lazy (start-up speed): imports numpy

    # lazy (start-up speed): imports numpy
    from harness.ablation.layout import layout_figure, layout_names, render_layout
    from harness.ablation.paths import report_dir  # lazy (start-up speed): imports numpy
    from reports.plots import save_figure  # lazy (start-up speed): imports PIL, matplotlib, numpy

    suite = load_suite(args.suite)
    if args.list:
        names, default = layout_names(suite)
        for name in names:
            print(f"{name}{' (default)' if name == default else ''}")
        if not names:
            # Say so rather than print nothing: without layouts there is only the suite's own table.
            where = report_dir(args.results_root, suite.name, args.scale) / TABLE_MD
            print(f"suite {suite.name!r} declares no table layouts (no 'table:' section with 'layouts' in its "
                  f"file), so `harness table suite {suite.name}` has nothing to render and refuses; its table "
                  f"is the one `harness run {suite.name} --scale {args.scale}` prints and writes to {where}")
        return 0
    if args.html:
        from harness.ablation.html_report import write_cli_html  # lazy (start-up speed): imports numpy

        print(f"HTML report: {write_cli_html(suite, args.scale, args.results_root)}", file=sys.stderr)
        return 0
    outputs = [args.output] if args.output is not None else []
    if args.figure is not None:
        outputs += [args.figure.with_name(f"{args.figure.name}.{fmt}") for fmt in ("png", "pdf")]
    for output in outputs:      # before rendering anything
        check_new_file(output, args.overwrite)
    table = render_layout(suite, args.scale, args.results_root, args.layout)
    text = render_latex(table) if args.format == "latex" else render_markdown(table)
    if args.output is not None:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)
    if args.figure is not None:
        paths = save_figure(layout_figure(suite, args.scale, args.results_root, args.layout), args.figure)
        print("figure: " + ", ".join(map(str, paths)), file=sys.stderr)
    return 0
