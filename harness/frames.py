"""Stored results as pandas DataFrames (long format: one row per metric, or per query and metric).

``result_frame(path)`` reads one result directory (:mod:`harness.store`), ``results_frame(folder)``
every result directory under a folder; :func:`harness.ablation.frames.suite_frame` adds the
comparisons of a finished suite.  ``harness export`` writes these frames as CSV or Parquet.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import ConfigError
from harness.store import MANIFEST_FILE, is_result_dir, load_result

if TYPE_CHECKING:
    import pandas as pd


def result_frame(path: str | Path, per_query: bool = False) -> pd.DataFrame:
    """One stored result: columns ``result, dataset, split, model, card, metric, value, n_queries``
    (aggregates), or ``result, dataset, split, model, card, query_id, metric, value`` (``per_query``).
    ``result`` is the result's name, ``model`` the model it was evaluated with, ``card`` its protocol
    card's fingerprint (results with equal cards are comparable)."""
    stored = load_result(path)
    frame = stored.evaluation.to_frame(per_query)
    for column, value in reversed((("result", stored.name), ("dataset", stored.card.dataset),
                                   ("split", stored.card.split),
                                   ("model", stored.manifest.get("model")), ("card", stored.card.fingerprint()))):
        frame.insert(0, column, value)
    return frame


def find_results(folder: str | Path) -> list[Path]:
    """Every complete result directory under ``folder`` (itself included), sorted; hidden and temporary
    folders (``.name.tmp`` of an interrupted write) are skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such results folder")
    found = [folder] if is_result_dir(folder) else []
    for manifest in sorted(folder.rglob(MANIFEST_FILE)):
        directory = manifest.parent
        if directory == folder or any(part.startswith(".") for part in directory.relative_to(folder).parts):
            continue
        if is_result_dir(directory):
            found.append(directory)
    return found


def results_frame(folder: str | Path, per_query: bool = False) -> pd.DataFrame:
    """Every result under ``folder`` in one frame; ``result`` is each result's path relative to ``folder``."""
    import pandas as pd

    folder = Path(folder)
    paths = find_results(folder)
    if not paths:
        raise ConfigError(f"{folder}: holds no stored result (a folder with per_query.tsv.gz, metrics.json and "
                          "manifest.json written by harness evaluate/run)")
    frames = []
    for path in paths:
        frame = result_frame(path, per_query)
        frame["result"] = path.relative_to(folder).as_posix() if path != folder else path.name
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
