"""PEG on the synthetic PEG world (the suite's tiny recipe), checked against the planted truth.

* Planted false positives (``is_false_positive`` in truth.json: the labelled positive is an
  unrelated document) must receive w_q < 1 far more often than clean rows, and a lower mean w_q.
* The share of modulated negatives that are *emphasised* (a_n > 1) rises with t over training,
  and the logged t obeys the momentum recurrence.

The measured numbers are printed (run with ``-s``).  About half a minute on one CPU thread.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from harness.ablation.resolve import resolve_data_entry, resolve_model, synthetic_world
    from harness.data.collections import load_training_data
    from harness.synthetic import read_truth
    from harness.train.logs import read_log
    from methods.peg import PEG, read_query_weights

    method = PEG()
    spec = PEG.spec("tiny", model=resolve_model("synthetic:peg/tiny-bert"), batch_size=32, n_hard_negatives=1,
                    use_instructions=False, method_options={"record_query_weights": True})
    ckpt = method.train(spec, load_training_data([resolve_data_entry("synthetic:peg")]), tmp_path_factory.mktemp("peg"))
    truth = read_truth(synthetic_world("peg"))
    rows = read_query_weights(ckpt.workdir / "method" / "query_weights.tsv")
    return rows, truth, read_log(ckpt.workdir / "train_log.jsonl")


def test_planted_false_positives_are_down_weighted(tiny_run):
    rows, truth, _ = tiny_run
    planted = {(name, r["row"]): r["is_false_positive"] for name, dom in truth["domains"].items() for r in dom["train"]}
    fp = np.array([planted[(r["source"], r["row"])] for r in rows])
    w = np.array([r["w"] for r in rows])
    assert 0.15 < fp.mean() < 0.25                                    # 20% of rows are planted
    share_fp, share_clean = float(np.mean(w[fp] < 1)), float(np.mean(w[~fp] < 1))
    print(f"\nw_q < 1: planted false positives {share_fp:.3f} ({int(fp.sum())} query-batches), "
          f"clean rows {share_clean:.3f} ({int((~fp).sum())}); mean w_q {w[fp].mean():.3f} vs {w[~fp].mean():.3f}")
    assert share_fp > 2 * share_clean
    assert w[fp].mean() < w[~fp].mean()


def test_emphasis_grows_with_t_and_t_follows_the_momentum(tiny_run):
    from scipy.stats import spearmanr

    _, _, log = tiny_run
    m = [r["method"] for r in log]
    t = np.array([x["t"] for x in m])
    expected, prev = [], 0.0
    for x in m:
        prev = 0.5 * x["pos_sim"] + 0.5 * prev
        expected.append(prev)
    assert t == pytest.approx(np.array(expected), abs=1e-6)
    mod = np.array([x["modulated_share"] for x in m])
    emph = np.array([x["emphasised_share"] for x in m])
    has = mod > 0
    rho_emph = spearmanr(t[has], emph[has] / mod[has]).statistic
    rho_mod = spearmanr(t, mod).statistic
    print(f"\nsteps with modulated negatives: {int(has.sum())}/{len(t)}; Spearman(t, emphasised/modulated) "
          f"{rho_emph:.3f}; Spearman(t, modulated share) {rho_mod:.3f}; modulated share first/last 10 steps "
          f"{mod[:10].mean():.3f}/{mod[-10:].mean():.3f}; "
          f"t first/last 10 steps {t[:10].mean():.3f}/{t[-10:].mean():.3f}")
    assert rho_emph > 0.5
