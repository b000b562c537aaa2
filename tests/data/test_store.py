"""Results store and atomic writes: complete or absent, never half-written."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.data import Run
from harness.errors import ProtocolMismatchError
from harness.evaluation_result import EvaluationResult
from harness.io import atomic_dir, atomic_write
from harness.protocol import ProtocolCard, assert_comparable
from harness.store import load_result, write_result


def _result():
    run = Run.from_arrays(["q1", "q1", "q2"], ["a", "b", "a"], [0.9, 0.1, 0.5])
    ev = EvaluationResult(["q1", "q2"], {"ndcg@10": np.array([1.0, 0.5]), "recall@100": np.array([1.0, 1.0])})
    return run, ev


def test_result_round_trip(tmp_path):
    run, ev = _result()
    card = ProtocolCard(dataset="toy", metrics=("ndcg@10", "recall@100"), exclude_self=True)
    write_result(tmp_path / "r", run=run, evaluation=ev, card=card, manifest={"model": "m"})
    stored = load_result(tmp_path / "r")
    assert stored.metrics == {"ndcg@10": 0.75, "recall@100": 1.0}
    assert stored.evaluation.metric("ndcg@10") == {"q1": 1.0, "q2": 0.5}
    assert stored.card == card and stored.manifest["model"] == "m"
    assert stored.manifest["versions"]["numpy"] and "git_commit" in stored.manifest
    assert stored.run().to_dict() == run.to_dict()
    assert json.loads((tmp_path / "r" / "metrics.json").read_text()) == stored.metrics


def test_failed_write_leaves_nothing(tmp_path):
    run, ev = _result()
    target = tmp_path / "r"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "partial.txt").write_text("x")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):   # allow_nan=False: NaN metrics never reach disk
        write_result(target, run=run, evaluation=EvaluationResult(["q"], {"m": np.array([np.nan])}),
                     card=ProtocolCard())
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(KeyError):
        with atomic_write(path) as handle:
            handle.write("new")
            raise KeyError("boom")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_protocol_mismatch_names_fields():
    a = ProtocolCard(dataset="scifact", split="test", exclude_self=False)
    b = a.with_(split="dev", exclude_self=True, metrics=("ndcg@10",))
    with pytest.raises(ProtocolMismatchError) as info:
        assert_comparable(a, b)
    message = str(info.value)
    assert "exclude_self: False vs True" in message and "split: 'test' vs 'dev'" in message
    assert "metrics" not in message                      # compared on shared metrics
    assert_comparable(a, a.with_(notes="free text"))     # notes never block a comparison
