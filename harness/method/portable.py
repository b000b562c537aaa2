"""Run keys that do not depend on where the data lies: machine paths written as their root's placeholder.

A suite writes data paths with placeholders (``{shared}/scifact/corpus.jsonl``, ``{tdro_data}/...``,
``synthetic:peg/truth.json``) and the runner resolves them to real paths before a method sees them
(``harness.ablation.resolve``).  A run's content key must not hold those real paths: the same suite on
another machine, from another clone or with another cache folder would get other keys and could not reuse
stored runs and scores.  :func:`portable_paths` writes every path under a data root back as
``{<root>}/<path relative to it>``; :func:`harness.method.train_run_config` keys runs by that form, while
the method keeps the real paths.

The roots (:func:`data_roots`) are those the placeholders stand for: ``{shared}`` (``$HARNESS_SHARED_DATA``,
else ``../shared/data`` beside the repository), ``{cache}`` (``$HARNESS_CACHE``, else
``~/.cache/retrieval-harness``: synthetic worlds and tiny models) and every ``{<name>}`` whose variable
``HARNESS_<NAME>`` holds an absolute folder.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

# The repository's parent: the default real-data root is ../shared/data beside the repository.
_REPO_ROOT = Path(__file__).resolve().parents[2]
_VARIABLE = re.compile(r"HARNESS_([A-Z][A-Z0-9_]*)")


def shared_root() -> Path:
    """The real-data root ``{shared}`` stands for: ``$HARNESS_SHARED_DATA`` or ``../shared/data`` beside the
    repository."""
    given = os.environ.get("HARNESS_SHARED_DATA")
    return Path(given) if given else _REPO_ROOT.parent / "shared" / "data"


def data_roots() -> dict[str, str]:
    """Placeholder name -> the absolute folder it stands for here (``{"shared": "/data/shared", ...}``)."""
    from harness.synthetic.writer import resolve_cache_root  # lazy (start-up speed of harness.method)

    roots = {"shared": str(shared_root()), "cache": str(resolve_cache_root())}
    for variable, value in sorted(os.environ.items()):
        match = _VARIABLE.fullmatch(variable)
        if match and variable not in ("HARNESS_SHARED_DATA", "HARNESS_CACHE"):
            roots.setdefault(match.group(1).lower(), value)
    # Only absolute folders below the file system's top: "/" or a setting like "cuda" is no data root.
    return {name: root.rstrip("/\\") for name, root in roots.items()
            if Path(root).is_absolute() and Path(root) != Path(Path(root).anchor)}


def portable_paths(value: Any) -> Any:
    """``value`` (JSON-like: mappings, lists, strings) with every path under a data root written as
    ``{<root>}/<relative path>``, wherever it stands in a string (``index:/data/shared/x.tsv`` ->
    ``index:{shared}/x.tsv``; several in ``a.bin,b.bin``).  A root matches whole folder names only
    (``/data/shared`` not in ``/data/shared2``), the deepest root first.  Other values are unchanged."""
    roots = data_roots()
    if not roots:
        return value
    # A root starts a string or follows a non-path character (":" "," "=" space), and ends at "/" or such a
    # character; the longest first, so a root nested in another (a cache inside the data folder) wins.
    alternatives = "|".join(re.escape(root) for root in sorted(roots.values(), key=len, reverse=True))
    pattern = re.compile(rf"(?<![^\s:,;=])({alternatives})(/+|(?=[\s:,;=]|$))")
    names: dict[str, str] = {}
    for name, root in roots.items():      # two names of one folder: {shared}, {cache}, then the first by name
        names.setdefault(root, name)

    def replace(text: str) -> str:
        return pattern.sub(lambda m: "{" + names[m.group(1)] + "}" + ("/" if m.group(2) else ""), text)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return replace(item)
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return item

    return walk(value)
