"""CPU thread settings (``--threads`` / ``HARNESS_NUM_THREADS``) applied without importing torch.

Importing torch costs 1.3-1.5 s of CPU and about 230 MB, which commands that run no torch model
(``evaluate``, ``compare``, ``check``, ``table``, ``export``, BM25 ``eval``) must not pay.  So the thread
count goes two ways: into the BLAS/OpenMP environment variables, which numpy, scipy, faiss and torch
read when they start their thread pools (a variable the user set for one library wins), and into
torch's own setter, called right after torch's first import by a one-shot import hook.  If torch is
already imported the setter runs at once.

This module imports neither torch nor numpy: the CLI calls it before building its parser, whose
command modules load numpy.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from harness.errors import ConfigError

# OpenMP (torch, faiss), MKL, OpenBLAS (numpy, scipy), Apple Accelerate, numexpr.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


def set_thread_environment(threads: int) -> None:
    """Set every variable of :data:`THREAD_VARIABLES` not already set to ``threads``.

    A library reads its variable once, when it loads, so this only reaches libraries not yet loaded
    (and child processes)."""
    _check(threads)
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))


def apply_threads(threads: int) -> None:
    """Use ``threads`` CPU threads: the environment of :func:`set_thread_environment`, and
    ``torch.set_num_threads(threads)`` now if torch is loaded, else right after its first import.

    Calling it again replaces a pending setting (the last call wins, as with torch's own setter)."""
    _check(threads)
    set_thread_environment(threads)
    for finder in [f for f in sys.meta_path if isinstance(f, _SetTorchThreads)]:
        sys.meta_path.remove(finder)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(threads)
    else:
        sys.meta_path.insert(0, _SetTorchThreads(threads))


def pending_torch_threads() -> int | None:
    """The thread count waiting for torch's first import, or None if no setting is pending."""
    return next((f.threads for f in sys.meta_path if isinstance(f, _SetTorchThreads)), None)


def _check(threads: int) -> None:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"the number of CPU threads must be a positive integer, got {threads!r}")


class _SetTorchThreads(importlib.abc.MetaPathFinder):
    """An import hook that lets the other finders locate ``torch`` and wraps its loader so that
    ``torch.set_num_threads`` runs as soon as torch's ``__init__`` has finished; it removes itself first,
    so it acts once."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec              # not installed, or a loader we cannot wrap: the import goes on as usual
        run_init = loader.exec_module
        threads = self.threads

        def exec_module(module: ModuleType) -> None:
            run_init(module)
            module.set_num_threads(threads)

        loader.exec_module = exec_module
        return spec
