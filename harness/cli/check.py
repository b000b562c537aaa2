"""``harness check``: regression checks against stored scores, and recording new expectations.

``harness check [--suite S] [--id ID] [--results-root DIR] [--reuse] [--accept-improved]``
runs the command of every matching entry in ``suites/expected/*.yaml`` (or reuses
its complete result directory with ``--reuse``), prints a status table and exits 1
on FAIL or ERROR, and on IMPROVED unless ``--accept-improved``.

``harness check record --suite S --id ID --result DIR --command "eval ... --out {out}"``
stores the metrics of DIR as the expectation, with who (git user), when and the
git commit.
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from harness.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="regression checks against stored expected scores (and `check record` to store one)",
        description="Run (or reuse) the command of each expected-score entry and compare its metrics: OK (equal at "
                    "4 decimals), OKish (within tolerance), IMPROVED (better beyond tolerance; a failure unless "
                    "--accept-improved), FAIL (worse beyond tolerance or protocol card changed), ERROR.",
    )
    p.add_argument("--suite", help="only entries of this suite (file suites/expected/SUITE.yaml)")
    p.add_argument("--id", dest="entry_id", help="only the entry with this id")
    p.add_argument("--results-root", type=Path, default=Path("results") / "regression",
                   help="where {out} directories go: ROOT/SUITE/ID (default results/regression)")
    p.add_argument("--reuse", action="store_true", help="reuse complete existing result directories instead of "
                                                         "running their commands")
    p.add_argument("--accept-improved", action="store_true",
                   help="exit 0 even if some entries improved beyond tolerance (they are still printed)")
    p.add_argument("--shared", type=Path, default=None,
                   help="real-data root substituted for {shared} (default $HARNESS_SHARED_DATA or ../shared/data)")
    p.add_argument("--expected-dir", type=Path, default=None, help="expectation folder (default suites/expected)")
    p.set_defaults(func=run_checks)

    actions = p.add_subparsers(dest="check_action", metavar="ACTION")
    r = actions.add_parser("record", help="store a result's metrics as an expected-score entry",
                           description="Store the metrics of a result directory as the expectation SUITE/ID, "
                                       "recording the git user, the time and the git commit.")
    r.add_argument("--suite", required=True, help="suite name (file suites/expected/SUITE.yaml)")
    r.add_argument("--id", dest="entry_id", required=True, help="entry id within the suite")
    r.add_argument("--result", type=Path, required=True, help="result directory holding the numbers to store")
    r.add_argument("--command", dest="record_command",
                   help="the harness command producing the result, as one shell-quoted string with {out} "
                        "(and {shared}), e.g. \"eval --model bm25 --dataset-dir {shared}/scifact --out {out}\"; "
                        "default when replacing: the entry's current command")
    r.add_argument("-m", "--metric", action="append", dest="metrics",
                   help="metric to store (repeatable; default: all metrics of the result)")
    r.add_argument("--result-path", default=None, help="result directory relative to {out}, if not {out} itself")
    r.add_argument("--tolerance", action="append", default=[], metavar="METRIC=TOL",
                   help="per-entry tolerance override (repeatable); prefer the central policy")
    r.add_argument("--note", default=None, help="free-text note stored with the entry")
    r.add_argument("--replace", action="store_true", help="overwrite an existing entry with this id")
    r.add_argument("--expected-dir", type=Path, default=None, help="expectation folder (default suites/expected)")
    r.set_defaults(func=run_record)


def run_checks(args: argparse.Namespace) -> int:
    # lazy (start-up speed): imports numpy, yaml
    from harness.regression import check_entries, exit_status, expected_dir, format_results, load_all

    entries = load_all(args.expected_dir, suite=args.suite, ident=args.entry_id)
    if not entries:
        what = " ".join(f"{k}={v}" for k, v in (("suite", args.suite), ("id", args.entry_id)) if v)
        if what:  # a filter that matches nothing is a typo, not a pass
            raise ConfigError(f"no expected-score entries matching {what}")
        print(f"no expected-score entries in {args.expected_dir or expected_dir()}; nothing to check")
        return 0
    results = check_entries(entries, results_root=args.results_root, shared=args.shared, reuse=args.reuse)
    print(format_results(results, accept_improved=args.accept_improved))
    return exit_status(results, accept_improved=args.accept_improved)


def _tolerances(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        metric, sep, value = item.partition("=")
        try:
            out[metric] = float(value)
        except ValueError:
            sep = ""
        if not sep or not metric or out[metric] < 0:
            raise ConfigError(f"--tolerance must look like ndcg@10=0.005, got {item!r}")
    return out


def run_record(args: argparse.Namespace) -> int:
    from harness.regression import record  # lazy (start-up speed): imports numpy, yaml

    command = shlex.split(args.record_command) if args.record_command else None
    if command and command[0] == "harness":
        command = command[1:]
    entry = record(suite=args.suite, ident=args.entry_id, result_dir=args.result, command=command,
                   metrics=args.metrics, result=args.result_path, tolerance=_tolerances(args.tolerance),
                   note=args.note, replace=args.replace, directory=args.expected_dir)
    values = ", ".join(f"{m}={v:.4f}" for m, v in entry.metrics.items())
    print(f"recorded {entry.key} in {entry.source}: {values} "
          f"(by {entry.recorded['by']} at {entry.recorded['at']}, commit {entry.recorded['commit']})")
    return 0
