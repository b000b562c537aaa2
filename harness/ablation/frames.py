"""A finished suite as a pandas DataFrame: every cell's scores with the suite's comparisons.

Aggregate rows (``per_query=False``), one per (variant, benchmark or aggregate, metric)::

    variant, label, benchmark, kind, metric, value, n_queries, delta, ci_low, ci_high, p, p_adjusted, significant

Rows are the suite's systems (``variant`` is the system id: a declared variant, or one point of its
sweep); a system with seed replicates is their per-query mean, as the tables compare it.  ``value`` is
the stored score (``metrics.json``; for an aggregate, the mean the suite's comparison reports),
``delta`` the difference to the baseline's value, and ``ci_low``/``ci_high``/``p``/``p_adjusted``/
``significant`` the suite's comparison from ``comparisons.json`` (the numbers behind ``table.md``'s
cells; empty for the baseline and for metrics the suite did not compare).

Per-query rows (``per_query=True``), one per (variant, benchmark, query, metric)::

    variant, label, benchmark, query_id, metric, value, delta

with ``delta`` the query's difference to the baseline's value for the same query (empty on the
baseline's own rows, as in the aggregate rows).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.ablation.axes import FinishedSuite, baseline_system, suite_systems
from harness.ablation.paths import report_dir
from harness.ablation.spec import AblationSuite, load_suite, parse_suite
from harness.errors import HarnessError, InputError
from harness.evaluation_result import EvaluationResult
from harness.io.readers import read_json_object
from harness.io.results_layout import COMPARISONS_FILE, RESOLVED_SUITE_FILE
from harness.store import StoredResult

if TYPE_CHECKING:
    import pandas as pd

AGGREGATE_COLUMNS = ["variant", "label", "benchmark", "kind", "metric", "value", "n_queries", "delta", "ci_low",
                     "ci_high", "p", "p_adjusted", "significant"]
PER_QUERY_COLUMNS = ["variant", "label", "benchmark", "query_id", "metric", "value", "delta"]


def _comparisons(suite: AblationSuite, scale: str, results_root: str | Path) -> dict[str, Any]:
    path = report_dir(results_root, suite.name, scale) / COMPARISONS_FILE
    data = read_json_object(path, "suite comparisons")
    if not isinstance(data.get("comparisons"), list):
        raise InputError(path, "'comparisons' must be a list; rerun the suite to rewrite it")
    return data


def suite_from_results(folder: str | Path) -> tuple[AblationSuite, str, Path] | None:
    """A suite's report folder (``<results root>/suites/<suite>/<scale>``, holding the resolved suite that
    ``harness run`` writes) -> (the suite, its scale, the results root); None for anything else.

    The suite file of that name is used when it still reads as the run recorded it; otherwise the suite
    is rebuilt from the recorded copy, so a results folder stays readable after its file changed."""
    folder = Path(folder)
    lock = folder / RESOLVED_SUITE_FILE
    if not folder.is_dir() or not lock.is_file():
        return None
    data = read_json_object(lock, "resolved suite")
    raw, scale = data.get("suite"), data.get("scale")
    if not isinstance(raw, dict) or not isinstance(scale, str):
        raise InputError(lock, "expected 'suite' (the suite file's content) and 'scale'; rerun the suite to rewrite it")
    try:
        current = load_suite(str(raw.get("name")))
    except HarnessError:
        current = None
    same = current is not None and json.loads(json.dumps(current.raw, default=str)) == raw
    suite = current if same and current is not None else parse_suite(raw, lock)
    return suite, scale, folder.parents[2]


def suite_frame(suite: AblationSuite | str | Path, scale: str = "tiny", results_root: str | Path = "results",
                per_query: bool = False) -> pd.DataFrame:
    """The finished suite ``suite`` (an :class:`AblationSuite`, a suite name, a suite file, or its report folder
    ``<results root>/suites/<suite>/<scale>``, which also gives the scale and results root) at ``scale`` under
    ``results_root`` as a long DataFrame (columns in the module docstring).  A suite that has not
    finished is a ConfigError naming the command that finishes it."""
    import pandas as pd

    if not isinstance(suite, AblationSuite):
        found = suite_from_results(suite)
        if found:
            suite, scale, results_root = found
        else:
            suite = load_suite(suite)
    finished = FinishedSuite(suite, scale, results_root)       # refuses an unfinished suite, naming the command
    cfg = suite.scale(scale)
    base_system = baseline_system(suite)
    ordered = [base_system] + [s for s in suite_systems(suite) if s.id != base_system.id]
    # a system's result: its run, or the per-query mean over its seed replicates (what the tables compare)
    stored: dict[tuple[str, str], EvaluationResult] = {
        (v.id, b.id): _evaluation(finished.evaluation(v, b.id)) for v in ordered for b in cfg.benchmarks}
    base = base_system.id
    if per_query:
        frames = []
        for v in ordered:
            for b in cfg.benchmarks:
                ev, ref = stored[(v.id, b.id)], stored[(base, b.id)]
                frame = ev.to_frame(per_query=True)
                deltas = []
                for metric in ev.per_query:
                    if v.id != base and metric in ref.per_query:
                        ref_values = ref.metric(metric)
                        deltas.append(np.array([value - ref_values[q] if q in ref_values else np.nan
                                                for q, value in zip(ev.query_ids, ev.per_query[metric].tolist())]))
                    else:
                        deltas.append(np.full(len(ev.query_ids), np.nan))
                frame["delta"] = np.concatenate(deltas) if deltas else np.zeros(0)
                frame.insert(0, "benchmark", b.id)
                frame.insert(0, "label", v.label)
                frame.insert(0, "variant", v.id)
                frames.append(frame[PER_QUERY_COLUMNS])
        return pd.concat(frames, ignore_index=True)

    data = _comparisons(suite, scale, results_root)
    alpha = float(data.get("alpha", 0.05))
    bench_labels = {b.id: b.label for b in cfg.benchmarks}
    by_key = {(c["system"], c.get("dataset"), c["metric"]): c for c in data["comparisons"]}
    rows: list[dict[str, Any]] = []

    def comparison_fields(c: dict[str, Any] | None) -> dict[str, Any]:
        if c is None:
            return {"ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "p_adjusted": np.nan, "significant": None}
        p_adj = c.get("p_adjusted")
        return {"ci_low": _num(c.get("ci_low")), "ci_high": _num(c.get("ci_high")), "p": _num(c.get("p_value")),
                "p_adjusted": _num(p_adj), "significant": bool(p_adj is not None and p_adj < alpha)}

    for v in ordered:
        for b in cfg.benchmarks:
            result, ref = stored[(v.id, b.id)], stored[(base, b.id)]
            for metric, value in result.aggregate.items():
                c = by_key.get((v.label, bench_labels[b.id], metric)) if v.id != base else None
                delta = value - ref.aggregate[metric] if v.id != base and metric in ref.aggregate else np.nan
                rows.append({"variant": v.id, "label": v.label, "benchmark": b.id, "kind": "benchmark",
                             "metric": metric, "value": value, "n_queries": len(result.query_ids), "delta": delta,
                             **comparison_fields(c)})
        for name in data.get("aggregates") or {}:
            for metric in data.get("metrics", []):
                c = next((by_key[k] for k in by_key if k[1] == name and k[2] == metric), None)
                if c is None:
                    continue
                mine = by_key.get((v.label, name, metric))
                value = float(mine["mean"]) if mine else float(c["mean_base"])
                rows.append({"variant": v.id, "label": v.label, "benchmark": name, "kind": "aggregate",
                             "metric": metric, "value": value, "n_queries": int(c["n"]),
                             "delta": float(mine["delta"]) if mine else np.nan, **comparison_fields(mine)})
    frame = pd.DataFrame(rows, columns=AGGREGATE_COLUMNS)
    frame["significant"] = frame["significant"].astype("boolean")
    return frame


def _evaluation(value: StoredResult | EvaluationResult) -> EvaluationResult:
    return value.evaluation if isinstance(value, StoredResult) else value


def _num(value: Any) -> float:
    return float(value) if value is not None else float("nan")
