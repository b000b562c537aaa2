"""Rows that share their query text are one query for mining (methods/mining/rows.py): each row avoids
and is thresholded by the positives of all of them (SciFact train's queries 89 and 90 are one claim
with two and one judged documents; sentence-transformers' miner groups by text the same way)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.data.beir import Corpus
from harness.data.training import TrainingRow
from harness.encoders.base import Encoder
from harness.retrieval.pool import CandidatePool, DenseSource
from methods.mining.rows import MiningSettings, mine_rows, query_positives

# cosine of each passage with both queries (the queries share one vector)
COS = {"P1": 0.9, "N1": 0.7, "P2": 0.6, "N2": 0.5, "N3": 0.3}


class PlanarEncoder(Encoder):
    """Queries are e1; passage t is (c, sqrt(1 - c^2), 0) with c = COS[t]: its cosine with any query is c."""

    similarity = "cos"

    def identity(self):
        return {"encoder": "planar", "cos": COS}

    def encode_docs(self, texts, *, batch_size=None, progress=True):
        return np.array([[COS[t], math.sqrt(1 - COS[t] ** 2), 0.0] for t in texts], dtype=np.float32)

    def encode_queries(self, texts, *, batch_size=None, progress=True):
        return np.tile(np.array([1.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))


def test_query_positives_unite_rows_with_the_same_text():
    rows = [TrainingRow("q", ["a", "b"], [], {}), TrainingRow("other", ["a"], [], {}),
            TrainingRow(" q ", ["c", "a"], [], {})]
    assert query_positives(rows) == [["a", "b", "c"], ["a"], ["a", "b", "c"]]


def test_rows_sharing_a_query_avoid_and_are_thresholded_by_all_its_positives(tmp_path):
    names = list(COS)
    corpus = Corpus(names, [""] * len(names), names)
    rows = [TrainingRow("q", ["P1", "P2"], [], {}), TrainingRow("q", ["P1"], [], {}),
            TrainingRow("another q", ["P1"], [], {})]
    out = tmp_path / "m.jsonl"
    mine_rows(rows, lambda c: CandidatePool([DenseSource(PlanarEncoder(), "p")], c, depth=4, cache_dir=tmp_path),
              out, MiningSettings(strategy="perc_pos", percent=0.9, k=4), corpus=corpus)
    mined = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    prov = [json.loads(x) for x in (tmp_path / "m.provenance.jsonl").read_text(encoding="utf-8").splitlines()]
    # "q": positives P1 (0.9) and P2 (0.6) for both rows; threshold 0.6 - 0.06 = 0.54 keeps N2 and N3
    for i in (0, 1):
        assert mined[i]["pos"] == rows[i].pos                  # the row's own positives are written
        assert mined[i]["neg"] == ["N2", "N3"]
        assert prov[i]["positive_scores"] == pytest.approx([0.9, 0.6], abs=1e-6)
        assert prov[i]["threshold"] == pytest.approx(0.54, abs=1e-6)
        assert prov[i]["positives_removed"] == 2 and prov[i]["removed"]["threshold"] == 1   # N1
    # another text: only P1 is its positive, threshold 0.81; P2 is a legitimate negative there
    assert mined[2]["neg"] == ["N1", "P2", "N2", "N3"]
    assert prov[2]["threshold"] == pytest.approx(0.81, abs=1e-6)


def test_generated_fills_avoid_the_positives_of_rows_with_the_same_query(tmp_path):
    from methods.mining.fill import Generation
    from methods.mining.generate import StandInGenerator

    names = list(COS)
    corpus = Corpus(names, [""] * len(names), names)
    rows = [TrainingRow("q", ["P1", "P2"], [], {}), TrainingRow("q", ["P1"], [], {})]
    out = tmp_path / "m.jsonl"
    mine_rows(rows, lambda c: CandidatePool([DenseSource(PlanarEncoder(), "p")], c, depth=4, cache_dir=tmp_path),
              out, MiningSettings(strategy="perc_pos", percent=0.9, k=4), corpus=corpus,
              generation=Generation(StandInGenerator()))
    mined = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    # the generated query scores like the original (the encoder ignores query text): of its candidates
    # N1 is eligible, P2 (row 0's positive, the same query's) is not, N2 and N3 are taken already
    assert [m["neg"] for m in mined] == [["N2", "N3", "N1"], ["N2", "N3", "N1"]]


@pytest.mark.parametrize("mode,shown", [("off", False), ("on", True)])
def test_the_mining_bar_follows_the_progress_setting(tmp_path, capsys, monkeypatch, mode, shown):
    """The bar of a suite's mining stage obeys --no-progress / HARNESS_PROGRESS (it was drawn into redirected
    logs of `harness run --no-progress`)."""
    from harness.progress import PROGRESS_ENV

    monkeypatch.setenv(PROGRESS_ENV, mode)
    names = list(COS)
    corpus = Corpus(names, [""] * len(names), names)
    mine_rows([TrainingRow("q", ["P1"], [], {})],
              lambda c: CandidatePool([DenseSource(PlanarEncoder(), "p")], c, depth=4, cache_dir=tmp_path),
              tmp_path / "m.jsonl", MiningSettings(strategy="perc_pos", percent=0.9, k=4), corpus=corpus,
              progress=True)
    assert ("mining:" in capsys.readouterr().err) == shown
