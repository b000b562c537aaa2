"""``harness run-cell KEY --suite S --scale X``: run one unit of a suite grid (a dependency run, a training
cell or an evaluation cell) by its key, as listed by ``harness run S --emit-cells``.

Any scheduler can drive a suite with it: run the emitted commands in the order of their waves (a unit
whose dependencies are not finished trains them first, under the same claims), then ``harness run S``
builds the table from the stored results without compute."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run-cell",
        help="run one cell of a suite (dependency, training or evaluation) by key",
        description="Run the unit KEY of SUITE at --scale (keys from `harness run SUITE --emit-cells`; a unique "
                    "prefix of 8+ characters is enough). Finished units are not redone; a unit another process "
                    "holds is waited for and reused.",
    )
    p.add_argument("key", help="content key of a dependency, training cell or evaluation cell")
    p.add_argument("--suite", required=True, help="suite name or path to a suite file")
    p.add_argument("--scale", default="tiny")
    p.add_argument("--results-root", type=Path, default=Path("results"), help="shared results directory")
    p.add_argument("--cache-dir", type=Path, default=None, help="embedding/index cache")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.ablation.executors import find_unit, run_unit  # lazy (start-up speed): imports numpy
    from harness.ablation.runner import SuiteRun  # lazy (start-up speed): imports numpy
    from harness.ablation.validate import load_validated  # lazy (start-up speed): imports numpy

    suite = load_validated(args.suite, args.scale)
    runner = SuiteRun(suite, args.scale, args.results_root, args.cache_dir, progress=not args.no_progress)
    unit = find_unit(runner, args.key)
    state = "already done" if unit.done else "running"
    print(f"{unit.kind} {unit.label} ({unit.key}): {state}", file=sys.stderr)
    start = time.perf_counter()
    run_unit(runner, unit)
    print(f"{unit.kind} {unit.label} ({unit.key}): done in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0
