"""Multiple-comparison correction against statsmodels and hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest
from optional_extras import require_extra

from harness.stats import adjust_pvalues

multipletests = require_extra("statsmodels.stats.multitest").multipletests

STATSMODELS = {"bonferroni": "bonferroni", "holm": "holm", "bh": "fdr_bh"}


@pytest.mark.parametrize("method", sorted(STATSMODELS))
@pytest.mark.parametrize("m", [1, 2, 5, 12, 100])
def test_equals_statsmodels_on_random_pvalues(method, m):
    rng = np.random.default_rng(m)
    for _ in range(8):  # statsmodels' holm takes ~50 ms a call
        p = rng.random(m) ** 3           # many small p-values, as in real tables
        ours = adjust_pvalues(p, method)
        ref = multipletests(p, method=STATSMODELS[method])[1]
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-15)


@pytest.mark.parametrize("method", sorted(STATSMODELS))
def test_equals_statsmodels_with_ties_and_extremes(method):
    p = np.array([0.01, 0.04, 0.01, 1.0, 0.0, 0.04, 0.5, 0.03])
    np.testing.assert_allclose(adjust_pvalues(p, method), multipletests(p, method=STATSMODELS[method])[1],
                               rtol=0, atol=1e-15)


def test_hand_values():
    p = [0.01, 0.04, 0.03]
    np.testing.assert_allclose(adjust_pvalues(p, "bonferroni"), [0.03, 0.12, 0.09])
    # Holm: sorted 0.01*3, 0.03*2, 0.04*1 -> running max 0.03, 0.06, 0.06
    np.testing.assert_allclose(adjust_pvalues(p, "holm"), [0.03, 0.06, 0.06])
    # BH: sorted 0.01*3/1, 0.03*3/2, 0.04*3/3 -> running min from the top 0.03, 0.04, 0.04
    np.testing.assert_allclose(adjust_pvalues(p, "bh"), [0.03, 0.04, 0.04])
    np.testing.assert_array_equal(adjust_pvalues(p, "none"), p)


def test_bad_input():
    with pytest.raises(ValueError, match="unknown correction"):
        adjust_pvalues([0.1], "sidak-ish")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust_pvalues([0.1, float("nan")], "holm")
    assert len(adjust_pvalues([], "holm")) == 0
