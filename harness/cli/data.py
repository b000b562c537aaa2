"""``harness data``: dataset statistics under a suite's protocol, and verified downloads.

``harness data stats --suite SUITE --dataset-dir DIR [--option KEY=VALUE] [--format json|table]``
prints what the suite's ``stats()`` counts (documents, queries, judged pairs, queries without
judgements, mean relevant documents per query, ...) and the protocol card.  Load options are
parsed by the suite's declared option schema; nothing here knows a particular suite.

``harness data download --suite S --dataset D [--cache DIR] [--base-url URL]`` fetches
a dataset from its official location, verifies its checksum and caches it atomically
(see :mod:`suites.download`).  Only a folder carrying the harness's download record counts as
cached; any other folder at ``<cache>/<suite>/<dataset>`` is an error naming it, never used or
deleted (``--force`` included).

``harness data build --list`` lists the papers' training-data recipes; ``harness data build RECIPE --out DIR
[--sources DIR] [--option KEY=VALUE] [--dry-run] [--offline]`` fetches a recipe's sources, verifies them and
writes the training folder with its ``build.json`` (see :mod:`harness.data.builders`).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from harness.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="dataset statistics and downloads",
                       description="Inspect benchmark data under a suite's protocol, or download it.")
    actions = p.add_subparsers(dest="data_command", metavar="ACTION")
    actions.required = True

    s = actions.add_parser("stats", help="counts and protocol card of a dataset folder under a suite",
                           description="Load DIR under SUITE's protocol and print its counts and protocol card.")
    s.add_argument("--suite", default="beir", help=suite_help("default: beir"))
    s.add_argument("--dataset-dir", required=True, type=Path, help="dataset folder (BEIR layout or release format)")
    s.add_argument("--dataset", default=None, help="dataset/task/language name within the suite")
    s.add_argument("--split", default=None, help="qrels split (default: the only one, else the suite's)")
    s.add_argument("--language", default=None, help="language code (shortcut for --option language=CODE)")
    s.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a load option the suite declares (repeatable), e.g. --option gallery=sub200k for "
                        "DuReader; `harness list suites --options` shows every suite's options")
    s.add_argument("--format", choices=("json", "table"), default="table")
    s.set_defaults(func=run_stats)

    d = actions.add_parser("download", help="download, verify and cache a benchmark dataset",
                           description="Fetch a dataset from its official public location (or --base-url), verify "
                                       "its checksum and cache it atomically; prints the cached folder.")
    d.add_argument("--suite", required=True, help="beir, miracl, mkqa, cmteb or dureader (the suites with "
                                                  "official downloads)")
    d.add_argument("--dataset", default=None, help="BEIR name, MIRACL language, C-MTEB task")
    d.add_argument("--cache", type=Path, default=None, help="cache root (default: $HARNESS_DATA or "
                                                            "~/.cache/retrieval-harness/data)")
    d.add_argument("--base-url", default=None, help="mirror replacing the official host")
    d.add_argument("--with-corpus", action="store_true", help="MIRACL: also the passage corpus; MKQA: BEIR's NQ corpus")
    d.add_argument("--force", action="store_true",
                   help="download again even if cached, replacing the cached folder (only one the harness downloaded "
                        "that holds nothing else; anything else there is refused, never deleted)")
    d.set_defaults(func=run_download)

    b = actions.add_parser("build", help="build a paper's training data from its public sources",
                           description="Fetch a recipe's sources (hub datasets, release files), verify them and "
                                       "write a training folder (<subset>.jsonl, domains.json, build.json) "
                                       "atomically; an interrupted build resumes without redoing finished subsets.")
    b.add_argument("recipe", nargs="?", help="recipe name (see --list)")
    b.add_argument("--list", action="store_true", help="list the recipes, their papers and sources")
    b.add_argument("--out", type=Path, default=None, help="output training folder")
    b.add_argument("--sources", type=Path, default=None,
                   help="folder of the source files (default: $HARNESS_DATA/training-sources/<recipe>, "
                        "else ~/.cache/retrieval-harness/data/training-sources/<recipe>)")
    b.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a recipe option (repeatable); --list shows each recipe's options")
    b.add_argument("--dry-run", action="store_true", help="print what would be fetched and produced; build nothing")
    b.add_argument("--offline", action="store_true",
                   help="never download (also with HARNESS_OFFLINE=1 or HF_HUB_OFFLINE=1): a missing source is an "
                        "error naming where to place it")
    b.set_defaults(func=run_build)


def suite_help(default: str) -> str:
    """``--suite`` help built from the suite registry (built-ins and installed plug-ins)."""
    from harness.benchmark import list_suites  # lazy (start-up speed): imports numpy

    return f"benchmark suite: {', '.join(list_suites())}, or package.module:Class ({default})"


def parse_option_items(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings -> {key: value}; the suite's option schema converts the values."""
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option expects KEY=VALUE, got {item!r}")
        options[key.strip().replace("-", "_")] = value
    return options


def stats_report(args: argparse.Namespace) -> dict[str, Any]:
    from harness.benchmark import get_suite  # lazy (start-up speed): imports numpy

    suite = get_suite(args.suite)
    raw = parse_option_items(args.option)
    if args.language is not None:
        raw["language"] = args.language
    options = {**suite.stats_options, **suite.parse_options(raw)}
    loaded = suite.load(args.dataset_dir, dataset=args.dataset, split=args.split, **options)
    return {"suite": args.suite, "dataset": loaded.name, "path": str(args.dataset_dir), "split": loaded.dataset.split,
            "counts": suite.stats(loaded), "card": loaded.card.to_dict()}


def run_stats(args: argparse.Namespace) -> int:
    report = stats_report(args)
    if args.format == "json":
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    print(f"{report['suite']} / {report['dataset']}  ({report['path']}, split {report['split']})")
    _print_block("counts", report["counts"])
    card = dict(report["card"])
    extra = card.pop("extra", {})
    _print_block("protocol card", card)
    if extra:
        _print_block("card extra", extra)
    return 0


def _print_block(title: str, values: dict[str, Any]) -> None:
    print(f"{title}:")
    width = max((len(k) for k in values), default=0)
    for key, value in values.items():
        shown = "-" if value is None else (", ".join(map(str, value)) if isinstance(value, (list, tuple)) else value)
        print(f"  {key:<{width}}  {shown}")


def run_download(args: argparse.Namespace) -> int:
    from suites.download import download_dataset  # lazy (start-up speed): imports numpy

    path = download_dataset(args.suite, args.dataset, cache=args.cache, base_url=args.base_url, force=args.force,
                            with_corpus=args.with_corpus)
    print(path)
    return 0


def _sources_dir(args: argparse.Namespace) -> Path:
    if args.sources is not None:
        return args.sources
    root = Path(os.environ.get("HARNESS_DATA", Path.home() / ".cache" / "retrieval-harness" / "data"))
    return root / "training-sources" / args.recipe


def run_build(args: argparse.Namespace) -> int:
    from harness.data import builders  # lazy (start-up speed): the registry imports the recipes

    if args.list:
        for name in builders.list_recipes():
            recipe = builders.get_recipe(name)
            defaults = recipe.parse_options({})
            print(f"{name}  (paper {recipe.paper})")
            print(f"  {recipe.description}")
            files = recipe.sources(defaults)
            shown = ", ".join(s.file for s in files[:4]) + (f", ... ({len(files)} files)" if len(files) > 4 else "")
            print(f"  sources: {shown}")
            for opt_name, opt in recipe.options.items():
                where = f"  [{opt.source}]" if opt.source else ""
                print(f"  --option {opt_name}={opt.default!s}: {opt.help}{where}")
        return 0
    if not args.recipe:
        raise ConfigError("harness data build: name a recipe (or --list)")
    recipe = builders.get_recipe(args.recipe)
    options = recipe.parse_options(parse_option_items(args.option))
    sources = _sources_dir(args)
    if args.dry_run:
        plan = builders.plan(recipe, options, sources)
        print(f"recipe {plan['recipe']} (paper {plan['paper']})")
        _print_block("options", plan["options"])
        print(f"sources ({sources}):")
        for src in plan["sources"]:
            print(f"  {src['file']}  " + ("present" if src["present"] else f"fetch from {src['origin']}"))
        for path, exists in plan["inputs"].items():
            print(f"input {path}  " + ("present" if exists else "MISSING"))
        out = args.out if args.out is not None else Path("<--out>")
        print(f"produces in {out}: " + ", ".join(plan["subsets"]) + ", domains.json, build.json")
        if plan["expected"]:
            _print_block("expected", plan["expected"])
        return 0
    if args.out is None:
        raise ConfigError("harness data build: --out DIR is required (or --dry-run / --list)")
    report = builders.build(recipe, args.out, sources, options, offline=True if args.offline else None, log=print)
    totals = report.manifest["totals"]
    state = "up to date" if report.up_to_date else f"built {len(report.built)}, kept {len(report.reused)} subset(s)"
    print(f"{report.out}: {totals['rows']} rows, {totals['bytes']} bytes, languages "
          f"{', '.join(f'{k} {v}' for k, v in totals['languages'].items()) or '-'} ({state})")
    return 0
