"""Table layouts read a finished suite's files (summary.json, weights.json, run.json) as checked inputs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.ablation.layout import read_summary, suite_weights
from harness.ablation.paths import SUMMARY_FILE, report_dir, train_cell_dir
from harness.errors import InputError
from harness.train.spec import TrainSpec

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"
KEYS = {"uniform": "k-uniform", "hn-only": "k-hn"}


def _finished(root: Path) -> Path:
    """A results root with the summary a finished ``mini`` suite writes (no training needed)."""
    summary = report_dir(root, "mini", "tiny") / SUMMARY_FILE
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"suite": "mini", "cells": [{"variant": v, "key": k} for v, k in KEYS.items()]},
                                  indent=2), encoding="utf-8")
    return summary


def test_weights_are_read_from_the_method_or_the_run_record(tmp_path):
    _finished(tmp_path)
    learned = train_cell_dir(tmp_path, KEYS["uniform"]) / "method" / "weights.json"
    learned.parent.mkdir(parents=True)
    learned.write_text('{"msmarco": 0.75, "nq": 0.25}', encoding="utf-8")
    record = train_cell_dir(tmp_path, KEYS["hn-only"]) / "run.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"data": [{"name": "a"}, {"name": "b"}, {"name": "c", "rows": 4}]}), encoding="utf-8")
    weights = suite_weights(load_suite(MINI), "tiny", tmp_path, ["uniform", "hn-only"])
    assert weights == {"uniform": {"msmarco": 0.75, "nq": 0.25}, "hn-only": {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}}


@pytest.mark.parametrize("text, line, problem", [
    ('{\n  "cells": [\n    {"variant": "uniform", "key": "k"}\n  ]\n', 5, "malformed JSON"),   # no closing brace
    ('{"cells": [{"variant": "uniform"}]}', None, "'cells' must be a list of {variant, key} objects"),
    ('[]', 1, "expected a JSON object, got list"),
])
def test_a_broken_summary_names_file_and_line(tmp_path, text, line, problem):
    summary = _finished(tmp_path)
    summary.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_summary(load_suite(MINI), "tiny", tmp_path)
    assert (info.value.path, info.value.line) == (str(summary), line)
    assert problem in info.value.problem


@pytest.mark.parametrize("file, text, problem", [
    ("method/weights.json", '{"msmarco": "high"}', "weight of 'msmarco' must be a finite number, got 'high'"),
    ("method/weights.json", b'{"caf\xe9": 1.0}', "not valid UTF-8: byte 0xe9"),
    ("run.json", '{"data": []}', "'data' must be a non-empty list"),
])
def test_broken_weights_or_run_record(tmp_path, file, text, problem):
    _finished(tmp_path)
    path = train_cell_dir(tmp_path, KEYS["uniform"]) / file
    path.parent.mkdir(parents=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError) as info:
        suite_weights(load_suite(MINI), "tiny", tmp_path, ["uniform"])
    assert info.value.path == str(path) and problem in info.value.problem


def test_train_cells_carry_their_train_spec():
    cells = expand_train_cells(load_suite(MINI), "tiny", load_data=False)
    assert all(isinstance(c.spec, TrainSpec) for c in cells)
    assert [c.spec.steps for c in cells] == [16, 16]
    assert cells[1].spec.in_batch_negatives is False and cells[0].spec.in_batch_negatives is True
