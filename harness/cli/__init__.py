"""The ``harness`` command line.

Each subcommand lives in its own module in this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to the function
that runs it.  Modules are discovered automatically, so adding a command means
adding one file.  Errors the harness raises on purpose (bad input, bad config)
print one clear line on stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys

from harness.errors import HarnessError

log = logging.getLogger("harness")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Train, ablate and statistically compare text retrievers.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: $HARNESS_NUM_THREADS or torch's default); 1 is "
                             "fastest for tiny models and on a machine shared with other jobs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    # Our own progress messages are useful at the default level.
    logging.getLogger("harness").setLevel(min(level, logging.INFO))


def _quiet_libraries() -> None:
    """Library progress bars (weight loading/saving) drown our own; our bars stay on."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _set_threads(threads: int | None) -> None:
    threads = threads or (int(os.environ["HARNESS_NUM_THREADS"]) if os.environ.get("HARNESS_NUM_THREADS") else None)
    if threads:
        import torch

        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    _set_threads(args.threads)
    try:
        result = args.func(args)
    except HarnessError as exc:
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"harness {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
