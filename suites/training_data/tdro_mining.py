"""Hard negatives for tDRO's training sets that carry none, mined with a dense retriever over the set itself.

Paper 000 (Datasets): "BGE-large-en-1.5 is used to mine negatives if the original datasets (several English
datasets) have no negatives provided".  The released recipe (tdro data/HN_mine.md, data/build_train_hn_dp.py)
mines them with ``BAAI/bge-base-en-v1.5`` instead, for the sets in :data:`MINED_SETS`:

* the corpus is every positive (and given negative) passage of the set, each distinct text once;
* queries and passages are encoded with the model's [CLS] vector, L2-normalised (inner product = cosine);
* each query retrieves its top ``topk`` = 100 passages; the candidates are ranks ``depth`` = [2, 100)
  (0-based, the two best skipped) that are not one of the row's positives;
* ``n_sample`` = 16 of them are drawn at random (``random.seed(42)``), all of them when fewer.

Which model is a recipe option of ``tdro`` (``mine_negatives``: the paper's ``BAAI/bge-large-en-v1.5`` or the
code's ``BAAI/bge-base-en-v1.5``; empty: keep the release's rows as they are, the default, since tDRO's
processed files already carry the code's negatives).  :func:`mine_rows` is the algorithm on given vectors
(tested with hand-made ones); :func:`encode_texts` encodes with a harness encoder.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from harness.errors import ConfigError

# tdro data/HN_mine.md: the sets whose negatives the release mined (DATASETS there; names as the recipe's)
MINED_SETS = ("agnews", "altlex", "amazon_review_2018_1m", "cnn_dailymail", "codesearchnet", "eli5_question_answer",
              "gooaq_pairs", "medmcqa", "searchQA_top5_snippets", "sentence-compression", "SimpleWiki", "squad_pairs",
              "stackexchange_duplicate_questions_title-body_title-body", "xsum", "yahoo_answers_title_answer")
PAPER_MODEL = "BAAI/bge-large-en-v1.5"      # paper 000, Datasets
CODE_MODEL = "BAAI/bge-base-en-v1.5"        # tdro data/HN_mine.md
DEPTH = (2, 100)                             # build_train_hn_dp.py hn_mine: depth=[2, 100], topk=100
N_SAMPLE = 16                                # build_train_hn_dp.py hn_mine: n_sample=16
SEED = 42                                    # build_train_hn_dp.py: random.seed(42)


def parse_depth(text: str) -> tuple[int, int]:
    """``"2,100"`` -> (2, 100): the rank range negatives are drawn from (start inclusive, end exclusive)."""
    try:
        start, end = (int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"mine_depth must be two ranks 'start,end', got {text!r}") from None
    if not 0 <= start < end:
        raise ConfigError(f"mine_depth must satisfy 0 <= start < end, got {text!r}")
    return start, end


def corpus_of(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[int]]]:
    """The set's passages (every positive and negative, each distinct text once, in first-seen order) and each
    row's positives as indices into them (build_train_hn_dp.py read_training_sets)."""
    texts: list[str] = []
    index: dict[str, int] = {}
    positives: list[list[int]] = []
    for row in rows:
        own = []
        for i, text in enumerate([*row["pos"], *row.get("neg", [])]):
            if text not in index:
                index[text] = len(texts)
                texts.append(text)
            if i < len(row["pos"]):
                own.append(index[text])
        positives.append(own)
    return texts, positives


def mine_rows(rows: Sequence[dict[str, Any]], query_vectors: np.ndarray, passage_vectors: np.ndarray,
              corpus: Sequence[str], positives: Sequence[Sequence[int]], *, depth: tuple[int, int] = DEPTH,
              n_sample: int = N_SAMPLE, seed: int = SEED) -> list[dict[str, Any]]:
    """``rows`` with ``neg`` replaced by mined negatives (rows are not changed in place).

    ``query_vectors[i]`` and ``passage_vectors[j]`` are normalised embeddings of row ``i``'s query and of
    ``corpus[j]``; ranking is by inner product, ties by corpus order (a stable sort, as faiss' flat index).
    A row whose depth range holds no candidate keeps no negatives (the release asserts there is one)."""
    if len(query_vectors) != len(rows) or len(passage_vectors) != len(corpus):
        raise ConfigError(f"mine_rows: {len(query_vectors)} query vectors for {len(rows)} rows, "
                          f"{len(passage_vectors)} passage vectors for {len(corpus)} passages")
    start, end = depth
    rng = random.Random(seed)
    scores = np.asarray(query_vectors, dtype=np.float64) @ np.asarray(passage_vectors, dtype=np.float64).T
    out = []
    for i, row in enumerate(rows):
        ranks = np.argsort(-scores[i], kind="stable")[:end]
        own = set(positives[i])
        candidates = [int(j) for j in ranks[start:end] if int(j) not in own]
        if len(candidates) > n_sample:
            candidates = rng.sample(candidates, n_sample)
        out.append({**row, "neg": [corpus[j] for j in candidates]})
    return out


def encode_texts(model: str, texts: Sequence[str], max_length: int, batch_size: int = 128) -> np.ndarray:
    """Normalised [CLS] embeddings of ``texts`` with a harness encoder (the release's DenseEncoder pooling)."""
    from harness.encoders.hf import load_encoder  # lazy (start-up speed): imports torch

    encoder = load_encoder(model, pooling="cls", normalize=True, query_max_length=max_length,
                           doc_max_length=max_length, query_prompt="", doc_prompt="")
    return np.asarray(encoder.encode_queries(list(texts), batch_size=batch_size), dtype=np.float32)


def mine_set(rows: Sequence[dict[str, Any]], model: str, *, depth: tuple[int, int] = DEPTH,
             n_sample: int = N_SAMPLE, max_length: int = 512,
             encode: Callable[[str, Sequence[str], int], np.ndarray] | None = None) -> list[dict[str, Any]]:
    """Mine negatives for every row of one set (the whole set is the corpus, as the release); ``encode``
    (model, texts, max length) -> normalised vectors, default :func:`encode_texts`."""
    encode = encode or encode_texts
    corpus, positives = corpus_of(rows)
    queries = encode(model, [r["query"] for r in rows], max_length)
    passages = encode(model, corpus, max_length)
    return mine_rows(rows, queries, passages, corpus, positives, depth=depth, n_sample=n_sample)


__all__ = ["CODE_MODEL", "DEPTH", "MINED_SETS", "N_SAMPLE", "PAPER_MODEL", "corpus_of", "encode_texts", "mine_rows",
           "mine_set", "parse_depth"]
