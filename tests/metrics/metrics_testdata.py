"""Random tie-heavy runs and graded qrels, and pytrec_eval as the reference implementation."""
from __future__ import annotations

import numpy as np

from harness.metrics import Metric

# Ids whose string order differs from numeric order, with mixed case and non-ASCII
# characters (trec_eval compares UTF-8 bytes, i.e. code points).
DOC_POOL = (
    [str(i) for i in (1, 2, 9, 10, 11, 19, 100, 101, 999, 1000)]
    + [f"d{i}" for i in (0, 1, 2, 3, 5, 8, 10, 12, 20, 33, 100, 250)]
    + ["D1", "D10", "Z", "a", "zz", "é1", "é10", "ü", "Ωmega", "doc-7", "doc_7", "doc.7", "x" * 30]
)
QUERY_POOL = [f"q{i}" for i in range(40)] + ["1", "10", "2", "d1", "D10"]


def random_case(seed: int, *, n_queries: int = 40, max_docs: int = 30):
    """Return ``(qrels rows, run rows)`` as ``(qids, docids, values)`` array triples.

    Scores take few distinct values (many ties); labels range over -2..3; some
    queries are only in the run, some only in the qrels, some have no relevant
    document, and some retrieve themselves (doc id == query id).  Every judged
    query keeps a label >= 0; trec_eval mishandles queries whose labels are all
    below 0: trec_eval's behaviour is undefined for them (it reads relevance-level
    counts left over from the previous query, and has been seen to hang or crash).
    """
    rng = np.random.default_rng(seed)
    queries = rng.choice(QUERY_POOL, size=n_queries, replace=False)
    qrels_rows: list[tuple[str, str, int]] = []
    run_rows: list[tuple[str, str, float]] = []
    for qid in queries:
        pool = np.array(DOC_POOL + [qid]) if qid not in DOC_POOL else np.array(DOC_POOL)
        in_run = rng.random() < 0.85
        in_qrels = rng.random() < 0.85 or not in_run
        retrieved = rng.choice(pool, size=int(rng.integers(1, max_docs + 1)), replace=False) if in_run else []
        if in_run:
            scores = np.round(rng.integers(-3, 8, size=len(retrieved)) / 10.0, 1)
            run_rows += [(qid, d, float(s)) for d, s in zip(retrieved, scores)]
        if in_qrels:
            judged_retrieved = [d for d in retrieved if rng.random() < 0.5]
            extra = rng.choice(pool, size=int(rng.integers(0, 6)), replace=False)
            docs = list(dict.fromkeys(judged_retrieved + list(extra))) or [str(pool[0])]
            style = rng.random()
            if style < 0.2:       # nothing relevant
                labels = rng.choice([-2, -1, 0], size=len(docs))
            else:
                labels = rng.choice([-2, -1, 0, 0, 1, 1, 2, 3], size=len(docs))
            labels[int(np.argmax(labels))] = max(int(labels.max()), 0)
            qrels_rows += [(qid, d, int(r)) for d, r in zip(docs, labels)]
    return _columns(qrels_rows), _columns(run_rows)


def _columns(rows):
    return tuple(np.array(col) for col in zip(*rows))


def to_dicts(qids, docids, values, cast):
    out: dict[str, dict] = {}
    for q, d, v in zip(qids.tolist(), docids.tolist(), values.tolist()):
        out.setdefault(q, {})[d] = cast(v)
    return out


def trec_order(docs: dict[str, float]) -> list[str]:
    """trec_eval's ranking: score descending, then document id descending."""
    return [d for d, _ in sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def pytrec_reference(qrels: dict, run: dict, metric: Metric, relevance_threshold: int = 1) -> dict[str, float]:
    """Per-query values of ``metric`` computed by pytrec_eval (trec_eval's C code)."""
    import pytrec_eval

    if metric.name == "mrr" and metric.cutoff is not None:
        run = {q: {d: docs[d] for d in trec_order(docs)[: metric.cutoff]} for q, docs in run.items()}
        measure, key = "recip_rank", "recip_rank"
    else:
        key = metric.trec_eval_name
        measure = key if metric.cutoff is None else f"{key.rsplit('_', 1)[0]}.{metric.cutoff}"
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {measure}, relevance_level=relevance_threshold)
    return {q: values[key] for q, values in evaluator.evaluate(run).items()}
