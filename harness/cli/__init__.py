"""The ``harness`` command line.

Each subcommand lives in its own module in this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to the function
that runs it.  Modules are discovered automatically, so adding a command means
adding one file.

Exit statuses and messages: an error the harness raises on purpose (bad input, bad
config) prints one line ``harness <cmd>: error: <file>:<line>: <problem>`` and exits
with 2; any other exception prints one line naming its type and exits with 1.  Neither
shows a traceback unless ``--debug`` is given.  When stdout is a pipe that closes early
(``harness evaluate ... | head``) the command stops quietly with status 141 (128 +
SIGPIPE), what a shell reports for other tools killed by the broken pipe, so that
``set -o pipefail`` scripts see the same for every tool.
"""
from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import pkgutil
import sys
import traceback

from harness.cli._types import positive_int
from harness.encoders.threads import apply_threads, set_thread_environment
from harness.errors import ConfigError, HarnessError
from harness.progress import PROGRESS_ENV

log = logging.getLogger("harness")

EXIT_BROKEN_PIPE = 141      # 128 + SIGPIPE, as the shell reports `yes | head`


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Train, ablate and statistically compare text retrievers.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="warnings and errors only, and no progress bars (the result still prints)")
    parser.add_argument("--progress", action="store_true",
                        help="progress bars even when stderr is not a terminal (default: on a terminal only)")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (default: one line naming file, line and problem)")
    parser.add_argument("--threads", type=positive_int, default=None,
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


def setup_logging(verbosity: int, quiet: bool = False) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    # Our own progress messages are useful at the default level (not with --quiet).
    logging.getLogger("harness").setLevel(logging.WARNING if quiet else min(level, logging.INFO))


def _set_progress(args: argparse.Namespace) -> None:
    """--quiet and ``run --no-progress`` turn bars off, --progress forces them on; the choice goes into the
    environment (harness.progress), so worker processes follow it."""
    if args.quiet or getattr(args, "no_progress", False):
        os.environ[PROGRESS_ENV] = "off"
    elif args.progress:
        os.environ[PROGRESS_ENV] = "on"


def _quiet_libraries() -> None:
    """Library progress bars (weight loading/saving) drown our own; our bars stay on."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        # transformers reads the variable once, on import: main() called in-process after an import (tests,
        # notebooks) turns its weight-loading bar off as a fresh CLI process does
        hf_logging.disable_progress_bar()


def _threads_setting(threads: int | None) -> int | None:
    """``--threads``, else ``$HARNESS_NUM_THREADS``, else None (the libraries' defaults)."""
    if threads is None and os.environ.get("HARNESS_NUM_THREADS"):
        try:
            threads = positive_int(os.environ["HARNESS_NUM_THREADS"])
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"HARNESS_NUM_THREADS: {exc}") from None
    return threads


def _early_threads(argv: list[str]) -> int | None:
    """The thread setting read from the options before the command, before the parser is built: its
    command modules load numpy, whose BLAS reads the thread environment once, when it loads.  Anything
    unreadable is left to the parser and :func:`_set_threads` to report."""
    given = None
    tokens = iter(argv)
    for token in tokens:
        if token == "--" or not token.startswith("-"):
            break                                   # the command: its options are not ours
        name, has_value, value = token.partition("=")
        if len(name) > 2 and "--threads".startswith(name):     # argparse accepts unique prefixes
            given = value if has_value else next(tokens, None)
    try:
        return _threads_setting(None if given is None else positive_int(given))
    except (argparse.ArgumentTypeError, ConfigError):
        return None


def _set_threads(threads: int | None) -> None:
    """Apply the thread setting without importing torch: the BLAS/OpenMP environment now, torch's
    setter on torch's first import (commands that run no torch model never import it)."""
    threads = _threads_setting(threads)
    if threads:
        apply_threads(threads)


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    early = _early_threads(sys.argv[1:] if argv is None else argv)
    if early:
        set_thread_environment(early)
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    progress_before = os.environ.get(PROGRESS_ENV)
    _set_progress(args)
    prefix = f"harness {args.command}"
    try:
        return _run_command(args, prefix)
    finally:
        # main() called in-process (tests, notebooks): the next command starts from the caller's setting
        if progress_before is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = progress_before


def _run_command(args: argparse.Namespace, prefix: str) -> int:
    try:
        _set_threads(args.threads)
        if sys.stderr.isatty():
            # log lines printed above the bars instead of through them
            from tqdm.contrib.logging import logging_redirect_tqdm  # lazy (start-up speed): imports tqdm

            with logging_redirect_tqdm(loggers=[logging.getLogger()]):
                result = args.func(args)
        else:
            result = args.func(args)
        sys.stdout.flush()                  # a closed pipe fails here, inside the handler, not at exit
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except HarnessError as exc:
        _report(prefix, f"error: {exc}", args.debug)
        return 2
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last resort: one line instead of a traceback
        detail = str(exc).splitlines()[0] if str(exc) else ""
        hint = "" if args.debug else " (run with --debug for the traceback)"
        _report(prefix, f"error: unexpected {type(exc).__name__}{': ' + detail if detail else ''}{hint}", args.debug)
        return 1
    return int(result or 0)


def _report(prefix: str, message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    print(f"{prefix}: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    """The reader of our stdout has gone: point stdout at devnull so that the interpreter's
    final flush does not raise again (the recipe of Python's signal module docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass                                # stdout is not a real file (captured in tests)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
