"""``harness export``: stored results as a CSV or Parquet table (long format, one row per metric).

``harness export suite NAME [--scale S] [--results-root DIR]`` exports a finished suite: every
cell's scores with the suite's comparisons (delta, CI, p, corrected p, significance), or with
``--per-query`` every query's value and its difference to the baseline
(:func:`harness.ablation.frames.suite_frame`).  ``harness export results DIR`` exports every stored
result under a folder (:func:`harness.frames.results_frame`).  ``--output FILE`` is written
atomically (a killed export leaves no partial file; an existing file is replaced only with
``--overwrite``); CSV goes to stdout without it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import ConfigError
from harness.io import atomic_write, check_new_file

FORMATS = ("csv", "parquet")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="output format (default: from the --output suffix, else csv)")
    p.add_argument("--per-query", action="store_true", help="one row per query and metric (default: aggregates)")
    p.add_argument("--output", "-o", type=Path, default=None,
                   help="file to write (atomically); CSV goes to stdout without it, Parquet needs it; an existing "
                        "file is refused without --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export stored results (a finished suite or a results folder) to CSV/Parquet",
                       description="Export stored results as a long table: one row per (system, benchmark, "
                                   "metric), or per query with --per-query.")
    kinds = p.add_subparsers(dest="export_kind", metavar="KIND")
    kinds.required = True
    suite = kinds.add_parser("suite", help="a finished ablation suite, with its comparisons",
                             description="Export a finished suite: columns variant, label, benchmark, kind, metric, "
                                         "value, n_queries, delta, ci_low, ci_high, p, p_adjusted, significant "
                                         "(--per-query: variant, label, benchmark, query_id, metric, value, delta).")
    suite.add_argument("suite", help="suite name (suites/ablations/<name>.yaml), path to a suite file, or the suite's "
                                     "report folder (results/suites/<suite>/<scale>: gives the scale and root too)")
    suite.add_argument("--scale", default="tiny", help="the scale the suite ran at (default: tiny)")
    suite.add_argument("--results-root", type=Path, default=Path("results"), help="the suite's results directory")
    _common(suite)
    suite.set_defaults(func=run_export)
    results = kinds.add_parser("results", help="every stored result under a folder",
                               description="Export every stored result directory under a folder: columns result, "
                                           "dataset, split, model, card, metric, value, n_queries (--per-query: "
                                           "query_id instead of n_queries).")
    results.add_argument("folder", type=Path, help="a result directory, or a folder holding result directories")
    _common(results)
    results.set_defaults(func=run_export)


def output_format(fmt: str | None, output: Path | None) -> str:
    """The format asked for, or the one the output suffix names, else CSV; a mismatch is refused."""
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    by_suffix = {"csv": "csv", "parquet": "parquet", "pq": "parquet"}.get(suffix)
    if fmt is None:
        fmt = by_suffix or "csv"
    elif by_suffix is not None and by_suffix != fmt:
        raise ConfigError(f"--format {fmt} but --output {output} ends in .{suffix}; make them agree")
    if fmt == "parquet" and output is None:
        raise ConfigError("--format parquet needs --output FILE (Parquet is binary; not written to a terminal)")
    return fmt


def write_frame(frame, fmt: str, output: Path | None) -> None:
    """Write ``frame`` as CSV or Parquet to ``output`` atomically (CSV to stdout when ``output`` is None)."""
    if output is None:
        frame.to_csv(sys.stdout, index=False, lineterminator="\n")
        return
    if fmt == "csv":
        with atomic_write(output, "w") as handle:
            frame.to_csv(handle, index=False, lineterminator="\n")
    else:
        with atomic_write(output, "wb") as handle:
            frame.to_parquet(handle, index=False)


def run_export(args: argparse.Namespace) -> int:
    fmt = output_format(args.format, args.output)
    if args.output is not None:
        check_new_file(args.output, args.overwrite)     # before reading any result
    if args.export_kind == "suite":
        from harness.ablation.frames import suite_frame  # lazy (start-up speed): imports numpy

        frame = suite_frame(args.suite, args.scale, args.results_root, per_query=args.per_query)
    else:
        from harness.frames import results_frame  # lazy (start-up speed): imports numpy

        frame = results_frame(args.folder, per_query=args.per_query)
    write_frame(frame, fmt, args.output)
    if args.output is not None:
        print(f"{len(frame)} rows -> {args.output}", file=sys.stderr)
    return 0
