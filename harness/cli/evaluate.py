"""``harness evaluate``: score a TREC run file against qrels, exactly as trec_eval does."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from harness.data import read_qrels, read_run
from harness.evaluation_result import EvaluationResult
from harness.metrics import DEFAULT_METRICS, evaluate, parse_metrics

_DESCRIPTION = """\
Score a TREC run file (qid Q0 docid rank score tag) against qrels (TREC
'qid 0 docid rel', or BEIR tsv with a 'query-id corpus-id score' header).
Values equal trec_eval's: documents are ranked by score descending, ties by
document id descending (the rank column is ignored); by default the averages
run over queries that are both judged and in the run (--complete: over every
judged query, missing ones scoring 0, like trec_eval -c).
"""

_METRIC_HELP = (
    "metric to compute; repeat for several. Names: ndcg@k, ndcg, recall@k, p@k, mrr, mrr@k, "
    "map, map@k, success@k, r-prec (trec_eval names such as ndcg_cut_10 or P.10 also work). "
    f"Default: {' '.join(DEFAULT_METRICS)}"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="score a run file against qrels (trec_eval-exact)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--qrels", required=True, help="qrels file (TREC or BEIR tsv; .gz allowed)")
    parser.add_argument("--run", required=True, help="TREC run file (.gz allowed)")
    parser.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC", help=_METRIC_HELP)
    parser.add_argument("--per-query", action="store_true", help="also print every query's values")
    parser.add_argument("--format", choices=("json", "table"), default="json", help="output format (default: json)")
    parser.add_argument("--relevance-threshold", type=int, default=1, metavar="N",
                        help="lowest label counted as relevant, like trec_eval -l (default: 1; nDCG uses raw labels)")
    parser.add_argument("--exclude-self", action="store_true",
                        help="drop retrieved documents whose id equals the query id (ArguAna/Quora protocol)")
    parser.add_argument("--complete", action="store_true",
                        help="average over all judged queries, missing ones scoring 0 (trec_eval -c)")
    parser.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    metrics = parse_metrics(args.metrics or DEFAULT_METRICS)  # fail on bad names before reading files
    qrels = read_qrels(args.qrels)
    run = read_run(args.run)
    result = evaluate(qrels, run, metrics, relevance_threshold=args.relevance_threshold,
                      exclude_self=args.exclude_self, complete=args.complete)
    if args.format == "json":
        write_in_pieces(out, json.dumps(result.to_json(per_query=args.per_query), indent=2) + "\n")
    else:
        write_in_pieces(out, format_table(result, per_query=args.per_query))
    return 0


def write_in_pieces(out: TextIO, text: str, piece: int = 1 << 16) -> None:
    """Write ``text`` in 64 KiB pieces: when the reader of a pipe has gone (``| head``), the next
    piece fails with BrokenPipeError and the command stops (some kernels accept one huge write()
    to a pipe nobody reads, silently)."""
    for start in range(0, len(text), piece):
        out.write(text[start:start + piece])
        out.flush()


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def format_table(result: EvaluationResult, per_query: bool = False, digits: int = 4) -> str:
    """An aligned text table of the values, followed by the protocol options that produced them."""
    names = list(result.per_query)
    rows: list[list[str]] = []
    if per_query:
        header = ["query", *names]
        for i, qid in enumerate(result.query_ids):
            rows.append([qid, *(f"{result.per_query[m][i]:.{digits}f}" for m in names)])
        rows.append(["all", *(f"{result.aggregate[m]:.{digits}f}" for m in names)])
    else:
        header = ["metric", "value"]
        rows = [[m, f"{result.aggregate[m]:.{digits}f}"] for m in names]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    opts = result.options
    missing = opts.get("num_judged_queries_missing_from_run", 0)
    queries = (f"queries: {opts.get('num_queries', len(result.query_ids))} evaluated"
               f" ({missing} judged queries missing from the run {'scored 0' if opts.get('complete') else 'ignored'},"
               f" {opts.get('num_run_queries_without_judgements', 0)} run queries without judgements ignored)")
    options = (f"options: relevance threshold {opts.get('relevance_threshold', 1)},"
               f" exclude self {_yes_no(opts.get('exclude_self', False))}"
               f" ({opts.get('num_self_hits_removed', 0)} removed),"
               f" complete {_yes_no(opts.get('complete', False))}")
    lines += ["", queries, options]
    return "\n".join(line.rstrip() for line in lines) + "\n"
