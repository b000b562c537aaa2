"""Shared helpers of the regression-check tests: real result directories and expectation files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result

CARD = ProtocolCard(dataset="scifact", metrics=("ndcg@10", "recall@100"))
RECORDED = {"by": "Test <t@example.org>", "at": "2025-01-01T00:00:00+00:00", "commit": "0" * 40}
COMMAND = ["eval", "--model", "bm25", "--dataset-dir", "{shared}/scifact", "--out", "{out}"]


def make_result(directory: Path, card: ProtocolCard = CARD, **aggregate: float) -> Path:
    """A real result directory whose aggregates are the given values (two queries, symmetric)."""
    per_query = {m: np.array([v - 0.1, v + 0.1]) for m, v in aggregate.items()}
    evaluation = EvaluationResult(["q1", "q2"], per_query, aggregate=dict(aggregate))
    return write_result(directory, run=None, evaluation=evaluation, card=card)


def write_expectations(directory: Path, suite: str, entries: list[dict]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    full = [{"command": COMMAND, "recorded": RECORDED, **e} for e in entries]
    path = directory / f"{suite}.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "entries": full}, sort_keys=False))
    return path
