"""The results API: stored evaluations and finished suites as pandas DataFrames.

::

    from harness.results import suite_frame, result_frame, results_frame

    suite_frame("quickstart", scale="tiny", results_root="results")          # one row per cell and metric
    suite_frame("quickstart", per_query=True)                                 # ... per query, with deltas
    result_frame("results/beir/scifact/minilm")                              # one stored evaluation
    results_frame("results/")                                                 # every stored evaluation below

``suite_frame`` carries the suite's comparisons (delta, CI, p, adjusted p, significance, seed
replicates averaged as in the tables); ``harness export`` writes the same frames as CSV or Parquet.
This module wires the engine's stored results (:mod:`harness.frames`) and the suite runner's
(:mod:`harness.ablation.frames`) together, so it belongs to the application layer; the per-query
result type itself is :class:`harness.evaluation_result.EvaluationResult` (re-exported here).
"""
from __future__ import annotations

from harness.ablation.frames import suite_frame
from harness.evaluation_result import EvaluationResult
from harness.frames import find_results, result_frame, results_frame

__all__ = ["EvaluationResult", "find_results", "result_frame", "results_frame", "suite_frame"]
