"""``harness.results`` is the public DataFrame API: the functions tested in tests/reports/test_export_frames.py."""
from __future__ import annotations

import harness.results as api
from harness.ablation.frames import suite_frame
from harness.evaluation_result import EvaluationResult
from harness.frames import result_frame, results_frame


def test_the_results_api_exposes_the_frame_functions_and_the_result_type():
    assert (api.suite_frame, api.result_frame, api.results_frame) == (suite_frame, result_frame, results_frame)
    assert api.EvaluationResult is EvaluationResult
    frame = EvaluationResult(["q1", "q2"], {"ndcg@10": [0.5, 1.0]}).to_frame(per_query=True)
    assert sorted(frame["value"]) == [0.5, 1.0]
