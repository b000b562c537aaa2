"""Stored-score regression checks: one test item per entry of ``suites/expected/*.yaml``.

Run with ``pytest -m regression`` (the items are also marked ``slow``, so the
default run leaves them out: each runs a real evaluation).  Environment:

* ``HARNESS_EXPECTED_DIR``: expectation folder (default ``suites/expected``);
* ``HARNESS_RESULTS_ROOT``: where ``{out}`` directories go (default ``results/regression``);
* ``HARNESS_CHECK_REUSE=1``: reuse complete result directories instead of re-running;
* ``HARNESS_SHARED_DATA``: the real-data root for ``{shared}`` (default ``../shared/data``);
* ``HARNESS_ACCEPT_IMPROVED=1``: let IMPROVED entries pass with a warning.

An item fails on FAIL and ERROR, and on IMPROVED (better than recorded beyond the
tolerance) unless accepted: an improvement is news to look at and re-record,
never something to pass silently.  The failure message is the status table.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from harness.regression import (
    IMPROVED,
    OK,
    OKISH,
    check_entry,
    default_shared_root,
    expected_dir,
    format_results,
    load_all,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPECTED_DIR = Path(os.environ.get("HARNESS_EXPECTED_DIR") or expected_dir())
RESULTS_ROOT = Path(os.environ.get("HARNESS_RESULTS_ROOT") or REPO_ROOT / "results" / "regression")
REUSE = os.environ.get("HARNESS_CHECK_REUSE") == "1"
ACCEPT_IMPROVED = os.environ.get("HARNESS_ACCEPT_IMPROVED") == "1"
ENTRIES = load_all(EXPECTED_DIR)


@pytest.mark.regression
@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[e.key for e in ENTRIES])
def test_expected_score(entry):
    result = check_entry(entry, results_root=RESULTS_ROOT, shared=default_shared_root(), reuse=REUSE)
    table = format_results([result], accept_improved=ACCEPT_IMPROVED)
    if result.status == IMPROVED and ACCEPT_IMPROVED:
        warnings.warn(f"improved beyond tolerance (accepted):\n{table}", stacklevel=1)
        return
    assert result.status in (OK, OKISH), "\n" + table
