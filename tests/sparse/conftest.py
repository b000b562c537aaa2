"""Fixtures of the sparse tests: a random sparse world behind a fake encoder."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from sparse_fakes import TableEncoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def random_world():
    """40 documents and 12 queries with random sparse weights over 50 terms (deterministic)."""
    from harness.data import Corpus
    from harness.data.beir import Queries

    rng = np.random.default_rng(3)
    vocab = [f"t{i}" for i in range(50)]

    def row(density: float) -> list[float]:
        w = rng.gamma(1.5, 0.8, size=50) * (rng.random(50) < density)
        return [float(x) for x in np.round(w, 3)]

    docs = {f"doc {i}": row(0.2) for i in range(40)}
    queries = {f"query {i}": row(0.1) for i in range(12)}
    corpus = Corpus([f"d{i}" for i in range(40)], [""] * 40, list(docs))
    qs = Queries([f"q{i}" for i in range(12)], list(queries))
    return TableEncoder({**docs, **queries}, vocab), corpus, qs


MINI_DOCS = {"d1": "p53 mutations drive many human cancers", "d2": "Aspirin lowers the risk of heart attack",
             "d3": "Mitochondria make ATP from glucose", "d4": "The tumor suppressor p53 regulates the cell cycle",
             "d5": "Statins reduce cholesterol in the blood"}
MINI_QUERIES = {"q1": "role of p53 in cancer", "q2": "does aspirin prevent heart attacks", "q3": "how cells make ATP"}
MINI_QRELS = [("q1", "d1"), ("q1", "d4"), ("q2", "d2"), ("q3", "d3")]


@pytest.fixture
def dataset(tmp_path):
    """A 5-document BEIR-layout folder (3 queries, 4 judgements) for end-to-end sparse evaluations."""
    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                                 for k, v in MINI_DOCS.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n"
                                                  for k, v in MINI_QUERIES.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" +
                                               "".join(f"{q}\t{d}\t1\n" for q, d in MINI_QRELS))
    return folder
