"""``coco-dr``: MS MARCO passage training rows with BM25 warm-up negatives (paper 001, COCO-DR).

Paper 001, section 4 (implementation details): "Following Xiong et al. (2021), the model is first
trained using BM25 negatives and then on self-negatives from the DR model".  The released warm-up
(OpenMatch/COCO-DR warmup/commands/run_bm25_warmup.sh) trains on MS MARCO's ``triples.train.small.tsv``,
whose negatives are drawn from the BM25 top-1000 candidates of each training query.  This recipe
rebuilds those negatives with the harness's own BM25 (:mod:`harness.retrieval.bm25`, Lucene) over the
collection: for each judged training query, its top ``k`` passages minus its judged positives form the
pool, and ``negatives`` of them are drawn uniformly with a per-query seed (kept in rank order).

Sources: the MS MARCO passage release (``collectionandqueries.tar.gz``: ``collection.tsv``
``pid<TAB>passage``, ``queries.train.tsv`` ``qid<TAB>query``, ``qrels.train.tsv``
``qid<TAB>0<TAB>pid<TAB>rel``), extracted from the archive kept in the sources folder.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from harness.data.beir import Corpus, Queries
from harness.data.builders import (
    BuildContext,
    DataRecipe,
    RecipeOption,
    Source,
    SubsetResult,
    iter_tsv,
    register_recipe,
)
from harness.errors import ConfigError, InputError
from harness.retrieval.bm25 import BM25Index

# The URL COCO-DR downloads from (warmup/commands/data_download.sh).
MSMARCO_ARCHIVE_URL = "https://msmarco.blob.core.windows.net/msmarcoranking/collectionandqueries.tar.gz"
ARCHIVE = "collectionandqueries.tar.gz"
LICENCE = "MS MARCO terms: non-commercial research use"
FILES = ("collection.tsv", "queries.train.tsv", "qrels.train.tsv")
SEARCH_CHUNK = 10_000        # queries per BM25 search call (bounds the run held in memory)


@register_recipe("coco-dr")
class CocoDrRecipe(DataRecipe):
    """MS MARCO passage train with BM25 warm-up negatives (harness BM25: top-k minus positives)."""

    paper = "001 COCO-DR (Combating Distribution Shifts in Zero-Shot Dense Retrieval)"
    description = "MS MARCO passage train queries with positives and BM25 warm-up negatives"
    options = {
        "k": RecipeOption(1000, "BM25 depth: negatives come from each query's top k minus its positives",
                          "MS MARCO passage top1000 BM25 candidates, from which triples.train.small (read by "
                          "COCO-DR warmup/commands/run_bm25_warmup.sh) draws its negatives", int),
        "negatives": RecipeOption(30, "BM25 negatives kept per query (drawn uniformly from the pool)",
                                  "not fixed by paper 001 or its code (triples.train.small pairs each query with "
                                  "many BM25 negatives, about 40M triples); chosen to keep rows practical", int),
        "seed": RecipeOption(13, "seed of the per-query negative draw", "", int),
        "max_queries": RecipeOption(0, "build only the first N judged training queries, in qrels order (0: all)",
                                    "", int),
        "bm25_k1": RecipeOption(0.9, "BM25 k1", "harness.retrieval.bm25 default (Anserini's)", float),
        "bm25_b": RecipeOption(0.4, "BM25 b", "harness.retrieval.bm25 default (Anserini's)", float),
    }

    def check_options(self, options: dict[str, Any]) -> None:
        if options["k"] < 1 or options["negatives"] < 1:
            raise ConfigError("coco-dr: k and negatives must be >= 1")
        if options["max_queries"] < 0:
            raise ConfigError("coco-dr: max_queries must be >= 0")

    def sources(self, options: dict[str, Any]) -> list[Source]:
        return [Source(f, url=MSMARCO_ARCHIVE_URL, archive=ARCHIVE, licence=LICENCE) for f in FILES]

    def subsets(self, options: dict[str, Any]) -> list[str]:
        return ["msmarco"]

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        opts = ctx.options
        collection = ctx.path("collection.tsv")
        passages: dict[str, str] = {}
        for line, (pid, text) in iter_tsv(collection, 2):
            if pid in passages:
                raise InputError(collection, f"passage id {pid!r} appears twice", line)
            passages[pid] = text
        queries_file = ctx.path("queries.train.tsv")
        query_text = {qid: text for _line, (qid, text) in iter_tsv(queries_file, 2)}
        qrels_file = ctx.path("qrels.train.tsv")
        positives: dict[str, list[str]] = {}
        for line, (qid, _zero, pid, rel) in iter_tsv(qrels_file, 4):
            if not rel.strip().lstrip("-").isdigit():
                raise InputError(qrels_file, f"relevance {rel!r} is not an integer", line)
            if qid not in query_text:
                raise InputError(qrels_file, f"query {qid!r} is not in {queries_file.name}", line)
            if pid not in passages:
                raise InputError(qrels_file, f"passage {pid!r} is not in {collection.name}", line)
            if int(rel) > 0 and pid not in positives.setdefault(qid, []):
                positives[qid].append(pid)
        qids = [q for q, pos in positives.items() if pos]
        if opts["max_queries"]:
            qids = qids[: opts["max_queries"]]
        corpus = Corpus(list(passages), [""] * len(passages), list(passages.values()), source=str(collection))
        stats: dict[str, Any] = {"queries": len(qids), "passages": len(passages), "queries_without_pool": 0,
                                 "negatives_total": 0}

        def rows() -> Iterator[dict[str, Any]]:
            index = BM25Index.build(corpus, language="en")
            key = index.meta.get("key", {})
            stats["bm25"] = {"k1": opts["bm25_k1"], "b": opts["bm25_b"], "ties": "trec_eval",
                             **{name: key.get(name) for name in ("language", "analyzer", "lucene", "pyserini")}}
            try:
                # Searched in chunks: a run of all ~500k training queries at depth 1000 would not fit in memory.
                for start in range(0, len(qids), SEARCH_CHUNK):
                    chunk = qids[start:start + SEARCH_CHUNK]
                    run = index.search(Queries(chunk, [query_text[q] for q in chunk]), k=opts["k"],
                                       k1=opts["bm25_k1"], b=opts["bm25_b"])
                    ranked = {qid: [str(d) for d in docs] for qid, docs, _scores in run.groups()}
                    for qid in chunk:
                        yield self._row(qid, ranked.get(qid, []), positives[qid], query_text, passages, opts, stats)
            finally:
                index.close()

        metadata = {"language": "en", "task": "retrieval"}
        return SubsetResult(rows(), metadata, stats)

    @staticmethod
    def _row(qid: str, ranked: list[str], positives: list[str], query_text: dict[str, str],
             passages: dict[str, str], opts: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
        """One training row: the query, its positives, and ``negatives`` drawn from the top k minus positives
        (the positives are removed after the search, so the pool holds k minus at most |positives| passages)."""
        judged = set(positives)
        pool = [d for d in ranked if d not in judged]
        if not pool:
            stats["queries_without_pool"] += 1
        rng = random.Random(f"{opts['seed']}:{qid}")
        chosen = sorted(rng.sample(range(len(pool)), min(opts["negatives"], len(pool))))
        neg_ids = [pool[i] for i in chosen]
        stats["negatives_total"] += len(neg_ids)
        return {"query": query_text[qid], "pos": [passages[p] for p in positives],
                "neg": [passages[d] for d in neg_ids], "language": "en", "query_id": qid,
                "pos_ids": positives, "neg_ids": neg_ids}
