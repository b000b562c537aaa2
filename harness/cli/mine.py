"""``harness mine``: mine hard negatives for training rows (paper 004, METHODS.md 5.1-5.2).

Reads a ``{"query","pos","neg"}`` jsonl file, retrieves the top ``--depth`` candidates per query
from one or more retrievers (``--retriever minilm --retriever bm25 ...``; several are fused by
``--fusion``: mean of cosines, or rrf/combsum/combmnz/ranx:<method>:<norm> via ranx), removes the
positives, optionally removes the candidates an LLM judge votes false negatives (``--judge``,
``--filter-mode``; votes cached under the cache root), selects at most ``--k`` negatives with
``--strategy`` and writes the mined rows to
``--out`` with ``<stem>.provenance.jsonl`` and ``<stem>.report.json`` beside it.  ``--generate``
fills pools that hold fewer than ``--k`` with candidates retrieved for LLM-written queries (summary
of the positive, then a query from it; the judge filters the additions; texts cached).  A killed run
resumes where it stopped; the same inputs give byte-identical files.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from harness.cli._types import non_negative_int, positive_int


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def register(subparsers) -> None:
    from methods.mining.judge_spec import JUDGE_SPECS  # lazy (start-up speed): imports numpy
    from methods.mining.selection import STRATEGIES  # lazy (start-up speed): imports numpy
    from methods.mining.votes import FILTER_MODES  # lazy (start-up speed): imports numpy

    p = subparsers.add_parser("mine", help="mine hard negatives for training rows",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="training rows (.jsonl or .jsonl.gz)")
    p.add_argument("--out", required=True, help="mined rows (.jsonl); sidecars are written beside it")
    p.add_argument("--corpus", help="BEIR corpus.jsonl to search (default: every passage of the rows)")
    p.add_argument("--retriever", action="append", metavar="MODEL",
                   help="dense model (alias, folder, hub id) or 'bm25'; repeatable (default: minilm)")
    p.add_argument("--fusion", default="mean", help="how several retrievers combine (default: mean of cosines)")
    p.add_argument("--language", default="en", help="BM25 analyzer language (default en)")
    p.add_argument("--depth", type=positive_int, default=40, help="candidates per query (default 40)")
    p.add_argument("--strategy", default="perc_pos", choices=STRATEGIES, help="selection (default perc_pos)")
    p.add_argument("--k", type=positive_int, default=30, help="negatives kept per query (default 30)")
    p.add_argument("--shift", type=non_negative_int, default=10, help="ranks skipped by shifted strategies")
    p.add_argument("--window", type=positive_int, help="end rank of shifted_random's window (default: depth)")
    p.add_argument("--threshold", type=_fraction, default=0.6, help="abs: keep scores <= this (default 0.6)")
    p.add_argument("--margin", type=_fraction, default=0.15, help="margin_pos: margin below the positive")
    p.add_argument("--percent", type=_fraction, default=0.9, help="perc_pos: fraction p in (0, 1] (default 0.9)")
    p.add_argument("--pos-agg", default="min", choices=("min", "max"), help="several positives: min or max score")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random rank window")
    p.add_argument("--judge", default="none", metavar="SPEC",
                   help=f"false-negative judge: {JUDGE_SPECS} (default none)")
    p.add_argument("--filter-mode", default="keep_zero", choices=tuple(FILTER_MODES),
                   help="keep_zero: keep only candidates voted 0 (released code, default); "
                        "drop_two: drop only those voted 2 (paper)")
    p.add_argument("--judge-mode", choices=("generate", "score"),
                   help="transformers judge: sample text (default) or score the next token over 0/1/2")
    p.add_argument("--judge-batch-size", type=positive_int, default=16, help="triples per judge call batch")
    p.add_argument("--judge-max-tokens", type=positive_int, help="tokens a judge may answer with (default 8)")
    p.add_argument("--judge-rate", type=_fraction, help="openai judge: at most this many requests per second")
    p.add_argument("--judge-workers", type=positive_int, help="openai judge: parallel requests (default 4)")
    p.add_argument("--generate", default="none", metavar="SPEC",
                   help="negative generation for under-full pools: none | stand-in | transformers:<model> | "
                        "openai:<base url>#<model> | vllm:<model> (default none)")
    p.add_argument("--generate-max-tokens", type=positive_int, default=256,
                   help="tokens a generated summary or query may have (default 256)")
    p.add_argument("--chunk-size", type=positive_int, default=2048, help="queries searched at a time")
    p.add_argument("--batch-size", type=positive_int, help="encoder batch size")
    p.add_argument("--cache-dir", help="cache root (default $HARNESS_CACHE or ~/.cache/retrieval-harness)")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from harness.data.beir import read_corpus  # lazy (start-up speed): imports numpy
    from harness.data.training import read_training_rows  # lazy (start-up speed): imports numpy
    from harness.encoders.cache import cache_root  # lazy (start-up speed): imports numpy
    from harness.retrieval.pool import CandidatePool, named_sources  # lazy (start-up speed): imports numpy
    from methods.mining.judge_cache import VoteCache  # lazy (start-up speed): imports numpy
    from methods.mining.judge_filter import JudgeFilter  # lazy (start-up speed): imports numpy
    from methods.mining.judge_spec import make_judge  # lazy (start-up speed): imports numpy
    from methods.mining.rows import MiningSettings, mine_rows  # lazy (start-up speed): imports numpy

    settings = MiningSettings(strategy=args.strategy, k=args.k, shift=args.shift, window=args.window,
                              threshold=args.threshold, margin=args.margin, percent=args.percent,
                              pos_agg=args.pos_agg, seed=args.seed)
    rows = read_training_rows(args.data)
    judge = make_judge(args.judge, mode=args.judge_mode, max_new_tokens=args.judge_max_tokens,
                       max_tokens=args.judge_max_tokens, batch_size=args.judge_batch_size, rate=args.judge_rate,
                       workers=args.judge_workers)
    flt = None if judge is None else JudgeFilter(judge, args.filter_mode, VoteCache(cache_root(args.cache_dir)),
                                                 batch_size=args.judge_batch_size)
    generation = None
    if args.generate != "none":
        from methods.mining.fill import Generation  # lazy (start-up speed): imports numpy
        from methods.mining.generate import TextCache, make_generator  # lazy (start-up speed): imports numpy

        gen_opts = {k: v for k, v in (("rate", args.judge_rate), ("workers", args.judge_workers)) if v is not None}
        generation = Generation(make_generator(args.generate, max_new_tokens=args.generate_max_tokens,
                                               batch_size=args.judge_batch_size, **gen_opts),
                                TextCache(cache_root(args.cache_dir)), batch_size=args.judge_batch_size)
    corpus = read_corpus(args.corpus) if args.corpus else None
    sources = named_sources(args.retriever or ["minilm"], args.language)

    def factory(c):
        return CandidatePool(sources, c, depth=args.depth, fusion=args.fusion, cache_dir=args.cache_dir,
                             chunk_size=args.chunk_size, batch_size=args.batch_size, progress=False)

    report = mine_rows(rows, factory, args.out, settings, corpus=corpus, progress=not args.no_progress,
                       overwrite=args.overwrite, judge_filter=flt, generation=generation)
    print(json.dumps(report["report"], indent=2))
    message = report["report"].get("filter", {}).get("message")
    if message:
        print(f"warning: {message}", file=sys.stderr)
    return 0
