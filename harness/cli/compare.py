"""``harness compare``: paired significance tests of runs or stored results against a baseline.

Either TREC runs scored against one qrels file (``--qrels Q --run BASE --run A ...``)
or stored result directories (``--result DIR_BASE --result DIR_A ...``, read from
their ``per_query.tsv.gz``; refused when their protocol cards differ).  The first
run/result is the baseline.  Stored results of several datasets (told apart by
their protocol card) are compared per dataset, and ``--aggregate`` adds macro
averages (BEIR, MIRACL over languages, C-MTEB) tested by a stated method.
Output: an aligned table on a terminal (``--format text``), JSON when the output is
a file or a pipe (or ``--format json``), or a Markdown/LaTeX table; every table's legend
names the test, the correction, the family and alpha, and ``--details`` adds one row per
comparison with its p, adjusted p, CI, d_z and wins/ties/losses.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cli._types import non_negative_int, open_fraction, positive_int
from harness.errors import ConfigError
from harness.io import atomic_write, check_new_file
from harness.protocol import assert_comparable
from reports.latex import render_latex
from reports.markdown import render_markdown
from reports.text import render_text

_RUN_SUFFIXES = (".gz", ".trec", ".txt", ".run", ".tsv", ".res")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="paired significance tests (t-test, randomization, bootstrap) of systems against a baseline",
        description="Compare every run (or result directory) with the first one on each metric: mean, delta, "
                    "two-sided paired test, p-value corrected over the family of comparisons, percentile "
                    "bootstrap CI of the mean difference, Cohen's d_z and win/tie/loss counts.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", action="append", type=Path, dest="runs",
                     help="TREC run file (repeat; the first is the baseline); needs --qrels")
    src.add_argument("--result", action="append", type=Path, dest="results",
                     help="stored result directory (repeat; the first is the baseline); results of several "
                          "datasets (by their protocol card) give one column group per dataset")
    p.add_argument("--qrels", type=Path, help="qrels file (TREC or BEIR tsv) for --run")
    p.add_argument("-m", "--metric", action="append", dest="metrics",
                   help="metric (repeatable), e.g. ndcg@10; with --result, default: the metrics all results share")
    p.add_argument("--name", action="append", dest="names",
                   help="display name per run/result, in the same order (default: run file names; for stored "
                        "results, the model each was evaluated with, else the result folder's name)")
    p.add_argument("--test", choices=("ttest", "randomization", "bootstrap"), default="ttest",
                   help="two-sided paired test (default: ttest)")
    p.add_argument("--seed", type=int, default=0, help="seed for randomization/bootstrap (draws shared by all systems "
                                                       "per dataset and metric are derived from it; default 0)")
    p.add_argument("--resamples", type=positive_int, default=10_000,
                   help="Monte Carlo sign flips and bootstrap resamples (default 10000); the test's count is raised "
                        "to 20*m/alpha for a family of m comparisons so that the smallest p 1/(B+1) stays well "
                        "below alpha/m")
    p.add_argument("--max-resamples", type=positive_int, default=2_000_000,
                   help="cap on that raised count; a larger family is refused with the numbers (default 2000000)")
    p.add_argument("--exact-max-n", type=non_negative_int, default=30,
                   help="randomization test: enumerate all sign vectors up to this many non-zero differences")
    p.add_argument("--ci-level", type=open_fraction, default=0.95, help="confidence level of the bootstrap CI")
    p.add_argument("--correction", choices=("holm", "bonferroni", "bh", "none"), default="holm",
                   help="multiple-comparison correction (default: holm)")
    p.add_argument("--aggregate", action="append", default=[],
                   help="--result over several datasets: add a macro average, as NAME=ds1,ds2,..., a grouping "
                        "(beir-13, miracl-16, cmteb-retrieval, ...) or 'all' (repeatable)")
    p.add_argument("--aggregate-method", choices=("pooled", "macro"), default="pooled",
                   help="significance of an average: paired test on all per-query differences pooled over its "
                        "datasets (default) or on the per-dataset means")
    p.add_argument("--family", choices=("all", "metric", "dataset", "system"), default="all",
                   help="comparisons corrected together (default: all comparisons of this table)")
    p.add_argument("--alpha", type=open_fraction, default=0.05, help="significance level for markers (default 0.05)")
    p.add_argument("--missing", choices=("error", "zero"), default="error",
                   help="queries scored for only one system: error (default) or score them as 0")
    p.add_argument("--relevance-threshold", type=int, default=1, help="--run: lowest relevant label (trec_eval -l)")
    p.add_argument("--exclude-self", action="store_true", help="--run: drop documents whose id is the query id")
    p.add_argument("--complete", action="store_true",
                   help="--run: score every judged query, unanswered ones as 0 (trec_eval -c)")
    p.add_argument("--format", choices=("auto", "text", "json", "markdown", "latex"), default="auto",
                   help="auto (default): an aligned text table on a terminal, JSON when writing to a file or pipe")
    p.add_argument("--details", action="store_true",
                   help="text/markdown/latex: add a table of each comparison's p, adjusted p, CI of the delta, d_z "
                        "and wins/ties/losses (JSON always has them)")
    p.add_argument("--caption", default="", help="table caption (markdown/latex)")
    p.add_argument("--label", default="", help="LaTeX \\label")
    p.add_argument("--decimals", type=non_negative_int, default=1, help="decimals of table cells (values x100)")
    p.add_argument("--output", type=Path,
                   help="write here (atomically) instead of stdout; an existing file only with --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.set_defaults(func=run)


def _display_names(count: int, default_names: list[str], names: list[str] | None) -> list[str]:
    if not names:
        return default_names
    if len(names) != count:
        raise ConfigError(f"--name given {len(names)} times for {count} runs/results")
    return list(names)


def _check_unique(names: list[str], where: str = "") -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"two runs/results{where} are both named {name!r}; give each a --name")
        seen.add(name)


def _run_name(path: Path) -> str:
    name = path.name
    while any(name.endswith(s) for s in _RUN_SUFFIXES):
        name = name[: name.rfind(".")]
    return name or path.name


def _evaluate_runs(args: argparse.Namespace) -> tuple[dict, list[str]]:
    from harness.data import read_qrels, read_run  # lazy (start-up speed): imports numpy
    from harness.metrics import evaluate, parse_metrics  # lazy (start-up speed): imports numpy

    if args.qrels is None:
        raise ConfigError("--run needs --qrels")
    if not args.metrics:
        raise ConfigError("--run needs at least one -m/--metric")
    metrics = [str(m) for m in parse_metrics(args.metrics)]
    names = _display_names(len(args.runs), [_run_name(p) for p in args.runs], args.names)
    _check_unique(names)
    qrels = read_qrels(args.qrels)
    results = {}
    for name, path in zip(names, args.runs):
        results[name] = evaluate(qrels, read_run(path, name=name), metrics,
                                 relevance_threshold=args.relevance_threshold, exclude_self=args.exclude_self,
                                 complete=args.complete)
    return results, metrics


def _metric_name(name: str, available: set[str]) -> str:
    if name in available:
        return name
    from harness.metrics import parse_metric  # lazy (start-up speed): imports numpy

    try:
        return str(parse_metric(name))
    except ConfigError:
        return name


def _load_results(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """Stored results grouped by their card's dataset: ``{dataset: {system: EvaluationResult}}``."""
    from harness.store import load_result  # lazy (start-up speed): imports numpy

    if args.qrels is not None:
        raise ConfigError("--qrels is for --run; stored results carry their own per-query values")
    stored = [load_result(d) for d in args.results]
    names = _display_names(len(stored), [s.manifest.get("model") or s.name for s in stored], args.names)
    by_dataset: dict[str | None, dict] = {}
    for name, result in zip(names, stored):
        group = by_dataset.setdefault(result.card.dataset or None, {})
        if name in group:
            raise ConfigError(f"two results for dataset {result.card.dataset!r} are both named {name!r}; "
                              "give each a --name")
        group[name] = result
    if len(by_dataset) > 1 and all(len(group) == 1 for group in by_dataset.values()):
        raise ConfigError("each dataset has a single result (" + ", ".join(map(str, by_dataset)) + "); results are "
                          "grouped by their protocol card's dataset, so give the systems' results on each dataset")
    for group in by_dataset.values():
        base_name, base = next(iter(group.items()))
        for name, other in list(group.items())[1:]:
            assert_comparable(base.card, other.card, what=f"{base_name} ({base.path}) and {name} ({other.path})")
    shared = [m for m in stored[0].evaluation.metrics if all(m in s.evaluation.per_query for s in stored[1:])]
    if args.metrics:
        metrics = list(dict.fromkeys(_metric_name(m, set(shared)) for m in args.metrics))
        for m in metrics:
            lacking = [str(s.path) for s in stored if m not in s.evaluation.per_query]
            if lacking:
                raise ConfigError(f"metric {m!r} has no per-query values in {', '.join(lacking)}")
    elif not shared:
        raise ConfigError("the results share no metric")
    else:
        metrics = shared
    return {ds: {n: r.evaluation for n, r in group.items()} for ds, group in by_dataset.items()}, metrics


def _aggregates(specs: list[str], datasets: list[str]) -> dict[str, list[str]]:
    """``--aggregate`` values: ``NAME=ds1,ds2``, a grouping such as ``beir-13``, or ``all``."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, members = spec.partition("=")
        if sep:
            out[name] = [m.strip() for m in members.split(",") if m.strip()]
        elif spec == "all":
            out["Avg"] = list(datasets)
        else:
            from suites.groupings import group  # lazy (start-up speed): imports numpy

            out[spec] = list(group(spec))
    return out


def run(args: argparse.Namespace) -> int:
    from harness.stats import StatsOptions, compare_suite  # lazy (start-up speed): imports numpy, scipy
    from harness.stats.suite import SuiteResults  # lazy (start-up speed): imports numpy, scipy

    if len(args.runs or args.results) < 2:
        raise ConfigError("give the baseline and at least one more run/result to compare")
    if args.output:
        check_new_file(args.output, args.overwrite)      # before any scoring
    if args.runs:
        runs, metrics = _evaluate_runs(args)
        results: SuiteResults = {None: runs}
        if args.aggregate:
            raise ConfigError("--aggregate needs stored results of several datasets (--result)")
    else:
        results, metrics = _load_results(args)
    options = StatsOptions(test=args.test, resamples=args.resamples, seed=args.seed, ci_level=args.ci_level,
                           exact_max_n=args.exact_max_n, missing=args.missing,
                           max_resamples=max(args.max_resamples, args.resamples))
    datasets = [d for d in results if d is not None]
    report = compare_suite(results, metrics, aggregates=_aggregates(args.aggregate, datasets),
                           aggregate_method=args.aggregate_method, options=options, correction=args.correction,
                           alpha=args.alpha, family=args.family)
    fmt = args.format
    if fmt == "auto":
        fmt = "text" if args.output is None and sys.stdout.isatty() else "json"
    if fmt == "json":
        text = json.dumps(report.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    else:
        from reports.comparison import comparison_table  # lazy (start-up speed): imports numpy, scipy
        from reports.comparison_details import details_table  # lazy (start-up speed): imports numpy, scipy

        render = {"text": render_text, "markdown": render_markdown, "latex": render_latex}[fmt]
        tables = [comparison_table(report, caption=args.caption, label=args.label, decimals=args.decimals)]
        if args.details:
            tables.append(details_table(report, decimals=args.decimals))
        text = "\n".join(render(table).rstrip("\n") + "\n" for table in tables)
    if args.output:
        with atomic_write(args.output) as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0
