"""``harness run SUITE``: run (or resume) an ablation suite and print its table."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from harness.cli._types import positive_int
from harness.method.stages import flatten_stages, is_built
from harness.train.stages import Stage


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard expects i/n (e.g. 1/4), got {text!r}") from None
    return i, n


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run an ablation suite (train, evaluate, compare, table); resumes after interruption",
        description="Expand SUITE at --scale into cells keyed by a content hash of their full config, train "
                    "and evaluate each (cached: finished cells are never redone), then compare every variant "
                    "with the baseline (paired tests, corrected) and print the table.",
    )
    p.add_argument("suite", nargs="?", help="suite name (suites/ablations/<name>.yaml) or path to a suite file")
    p.add_argument("--scale", default="tiny", help="tiny (synthetic, seconds), small (real data, minutes), "
                   "paper (the papers' GPU configurations; use --dry-run here)")
    p.add_argument("--results-root", type=Path, default=Path("results"), help="shared results directory")
    p.add_argument("--cache-dir", type=Path, default=None, help="embedding/index cache")
    p.add_argument("--shard", type=_shard, default=(1, 1),
                   help="run only shard i of n (machines share the results root)")
    p.add_argument("--only", action="append", default=None, help="run only this variant (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (cells, status, compute estimate); load no weights")
    p.add_argument("--format", choices=("markdown", "latex", "json"), default="markdown")
    p.add_argument("--strict-provenance", action="store_true",
                   help="refuse to run (exit 2) when a number-changing setting of any cell or stage rests only "
                        "on a harness default, listing each with its value; meant for --scale paper")
    p.add_argument("--list", action="store_true", help="list the suites shipped with the project")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    grid = p.add_argument_group("running the grid elsewhere (harness/ablation/executors.py)")
    grid.add_argument("--executor", choices=("local", "submitit", "ray"), default=None,
                      help="run cells, dependencies and evaluations as separate jobs, wave by wave: local "
                           "(subprocesses), submitit (Slurm job arrays; local subprocesses without Slurm; extra "
                           "'cluster') or ray (extra 'ray'); default: in this process")
    grid.add_argument("--workers", type=positive_int, default=1, help="jobs at a time (Slurm: array parallelism)")
    grid.add_argument("--emit-cells", action="store_true",
                      help="print the grid as JSON (keys, dependencies, kind, command, GPU-hour estimates) for "
                           "any scheduler to run with `harness run-cell`; runs nothing")
    grid.add_argument("--executor-folder", type=Path, default=None,
                      help="submitit's job logs (default: <results-root>/submitit/<suite>/<scale>)")
    grid.add_argument("--timeout-min", type=positive_int, default=24 * 60, help="per-job time limit (submitit)")
    grid.add_argument("--gpus-per-job", type=int, default=1, help="GPUs per job on Slurm or Ray")
    grid.add_argument("--slurm-partition", default=None, help="Slurm partition of the jobs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.ablation import list_suite_files, load_suite, run_suite  # lazy (start-up speed): imports numpy

    if args.list or not args.suite:
        for name, path in list_suite_files().items():
            suite = load_suite(path)
            first_line = suite.description.splitlines()[0] if suite.description else ""
            print(f"{name:<14} scales: {', '.join(suite.scales):<20} {first_line}")
        return 0
    from harness.ablation.validate import load_validated  # lazy (start-up speed): imports numpy

    # The whole plan (file, variants, options, metrics, benchmarks, data, models) is checked before any
    # compute; every problem is reported at once (exit 2).
    suite = load_validated(args.suite, args.scale, dry_run=args.dry_run)
    if args.strict_provenance and _strict_provenance_fails(suite, args.scale):
        return 2
    if args.dry_run:
        return _dry_run(suite, args)
    if args.emit_cells or args.executor:
        return _grid(suite, args)
    outcome = run_suite(suite, args.scale, args.results_root, shard=args.shard, only=args.only,
                        cache_dir=args.cache_dir, progress=not args.no_progress, validate=False)
    if not outcome.main_process:
        print(f"suite {suite.name} ({args.scale}): training done; {outcome.pending[0]}", file=sys.stderr)
        return 0
    return _print_outcome(suite, args, outcome)


def _strict_provenance_fails(suite, scale: str) -> bool:
    """``--strict-provenance``: print every number-changing setting that rests only on a harness default."""
    # lazy (start-up speed): imports numpy
    from harness.ablation.provenance import provenance_counts, resolved_settings, strict_provenance_problems

    settings = resolved_settings(suite, scale)
    problems = strict_provenance_problems(settings)
    if not problems:
        return False
    counts = provenance_counts(settings)
    print(f"suite {suite.name} scale {scale}: {len(problems)} of {counts['total']} resolved settings change numbers "
          "and rest only on a harness default (set them in the suite file, or give their source in the method's "
          "recipe):", file=sys.stderr)
    for s in problems:
        print(f"  {s.line()}", file=sys.stderr)
    return True


def _grid(suite, args) -> int:
    """``--emit-cells`` (print the units) or ``--executor`` (run them as jobs, then build the table here)."""
    # lazy (start-up speed): imports numpy
    from harness.ablation.executors import GridOptions, build_units, emit_cells, run_grid, suite_argument
    from harness.ablation.runner import SuiteRun, select_cells  # lazy (start-up speed): imports numpy

    runner = SuiteRun(suite, args.scale, args.results_root, args.cache_dir, progress=not args.no_progress)
    units = build_units(runner, select_cells(runner, args.shard, args.only))
    suite_arg = suite_argument(args.suite)
    if args.emit_cells:
        print(json.dumps(emit_cells(runner, units, suite_arg), indent=2, ensure_ascii=False))
        return 0
    options = GridOptions(suite_arg, args.scale, args.results_root.resolve(),
                          args.cache_dir.resolve() if args.cache_dir else None, workers=args.workers,
                          folder=args.executor_folder, timeout_min=args.timeout_min,
                          gpus_per_job=args.gpus_per_job, slurm_partition=args.slurm_partition)
    run_grid(runner, units, args.executor, options, progress=lambda m: print(m, file=sys.stderr))
    return _print_outcome(suite, args, runner.report(), runner)


def _print_outcome(suite, args, outcome, runner=None) -> int:
    if not outcome.complete:
        print(f"suite {suite.name} ({args.scale}): {len(outcome.pending)} cell(s) still pending "
              f"(other shards or --only): {', '.join(outcome.pending[:6])}", file=sys.stderr)
        return 0
    if runner is not None:
        runner.write_json_lock()
    if args.format == "json":
        print(json.dumps(outcome.summary, indent=2, ensure_ascii=False))
    else:
        print(outcome.markdown if args.format == "markdown" else outcome.latex)
    print(f"tables and summary in {outcome.report_dir}", file=sys.stderr)
    return 0


def _dry_run(suite, args) -> int:
    """Print the plan: text, or with ``--format json`` one JSON object (cells, dependencies, benchmarks)."""
    from harness.ablation.paths import train_cell_dir  # lazy (start-up speed): imports numpy
    from harness.ablation.resolve import resolve_data_entry, unresolved  # lazy (start-up speed): imports numpy
    from harness.ablation.runner import SuiteRun  # lazy (start-up speed): imports numpy
    from harness.method import get_method  # lazy (start-up speed): imports numpy
    from harness.train.plan import estimate_gpu_hours  # lazy (start-up speed): imports numpy

    lines: list[str] = []
    cfg = suite.scale(args.scale)
    # Keys need the data fingerprint (hashing the data files, no weights loaded); only data behind an
    # unset placeholder (a paper scale planned elsewhere) goes without, and its keys are marked so.
    entries = [resolve_data_entry(e) for e in cfg.data]
    has_data = not any(unresolved(e) for e in entries)
    runner = SuiteRun(suite, args.scale, args.results_root, args.cache_dir, load_data=has_data)
    plan: dict = {"suite": suite.name, "version": suite.version, "scale": args.scale, "baseline": suite.baseline,
                  "metrics": list(suite.metrics), "training_data": [str(d) for d in cfg.data],
                  "data_available": has_data, "cells": [], "benchmarks": []}
    lines.append(f"suite {suite.name} v{suite.version} at scale {args.scale}: {len(runner.train_cells)} training "
                 f"cells x {len(cfg.benchmarks)} benchmarks; baseline {suite.baseline}; metrics "
                 f"{', '.join(suite.metrics)}")
    lines.append(f"training data: {', '.join(map(str, cfg.data))}"
                 + ("" if has_data
                    else " (not available here: keys marked * leave the data out and differ from a real run's)"))
    total_hours = 0.0
    seen = {cell.key: cell.variant.id for cell in runner.train_cells}
    counted: set[str] = set()
    for cell in runner.train_cells:
        status = "done" if runner.is_trained(cell) else "pending"
        mark = "" if has_data or not cell.trains else "*"
        entry: dict = {"variant": cell.variant.id, "method": cell.method, "key": cell.key, "status": status,
                       "key_without_data": bool(mark), "dependencies": []}
        plan["cells"].append(entry)
        line = f"  {cell.variant.id:<24} method={cell.method:<10} key={cell.key}{mark} [{status}]"
        if cell.trains:
            method = get_method(cell.method)
            line += _describe(cell.train_spec)
            entry["train"] = _describe_dict(cell.train_spec)
            if cell.steps:
                line += f" checkpoints={','.join(map(str, cell.steps))}"
                entry["checkpoints"] = list(cell.steps)
            estimate = estimate_gpu_hours(cell.train_spec, method)
            if estimate is not None and cell.key not in counted:
                total_hours += estimate
                line += f" ~{estimate:.1f} GPU-h"
                entry["gpu_hours"] = round(estimate, 3)
            counted.add(cell.key)
            lines.append(line)
            notes = method.plan_notes(cell.train_spec)     # work besides training (mining, judge calls)
            lines.extend(f"    {note}" for note in notes)
            if notes:
                entry["notes"] = notes
            # Runs the method trains first (e.g. tDRO's reference and stage 1), each counted once.
            for planned in flatten_stages(method, cell.train_spec, cell.data_fingerprint):
                dep, key = planned.stage, planned.key
                if key in seen:
                    lines.append(f"    <- {dep.label}: key={key}, shared with {seen[key]}")
                    entry["dependencies"].append({"label": dep.label, "key": key, "shared_with": seen[key]})
                    continue
                seen[key] = f"{cell.variant.id}/{dep.label}"
                if not isinstance(dep, Stage):      # data work before training (e.g. mining)
                    built = is_built(get_method(planned.owner), dep, cell.data_fingerprint,
                                     runner.root / "cells" / "train")
                    lines.append(f"    <- {dep.label}: data stage of {planned.owner} key={key} "
                                 f"[{'done' if built else 'pending'}]")
                    entry["dependencies"].append({"label": dep.label, "stage": dep.name, "key": key,
                                                  "status": "done" if built else "pending"})
                    continue
                done = (train_cell_dir(runner.root, key) / "done.json").exists()
                dep_line = f"    <- {dep.label}: method={dep.method} key={key} [{'done' if done else 'pending'}]"
                dep_line += _describe(dep.spec)
                dep_entry: dict = {"label": dep.label, "method": dep.method, "key": key,
                                   "status": "done" if done else "pending", "train": _describe_dict(dep.spec)}
                estimate = estimate_gpu_hours(dep.spec, get_method(dep.method), dep.frozen_forwards)
                if estimate is not None:
                    total_hours += estimate
                    dep_line += f" ~{estimate:.1f} GPU-h"
                    dep_entry["gpu_hours"] = round(estimate, 3)
                entry["dependencies"].append(dep_entry)
                lines.append(dep_line)
        else:
            lines.append(line)
    lines.extend(_settings_plan(suite, args.scale, plan))
    for b in cfg.benchmarks:
        # the metrics the benchmark's card is asked for: those its options name (its protocol's, kept as they are:
        # harness.ablation.benchmarks.load_benchmark_ref), else the suite's besides the protocol's own
        named = [str(m) for m in (b.options.get("metrics") or [])]
        metrics = named or list(suite.metrics)
        shown = ",".join(metrics) + ("" if named else " (+ the protocol's own)")
        lines.append(f"  benchmark {b.id:<20} suite={b.suite:<10} {b.dataset_dir} metrics={shown}")
        plan["benchmarks"].append({"id": b.id, "suite": b.suite, "dataset_dir": str(b.dataset_dir),
                                   "options": {k: v for k, v in b.options.items()}, "metrics": metrics,
                                   "protocol_metrics_added": not named})
    if has_data and not cfg.dry_run_only:
        # Evaluation keys need the benchmarks' protocol cards: load the data (no model).
        stored = sum(runner.is_evaluated(c) for c in runner.eval_cells)
        plan["evaluations"] = {"stored": stored, "total": len(runner.eval_cells)}
        lines.append(f"evaluations: {stored} of {len(runner.eval_cells)} stored"
                     + ("" if stored < len(runner.eval_cells) else " (the table can be rebuilt without compute)"))
    if total_hours:
        plan["estimated_gpu_hours"] = round(total_hours, 3)
        lines.append(f"estimated training compute: {total_hours:.1f} GPU-hours "
                     "(H100-class, 40% MFU; see harness/train/plan.py)")
    if args.format == "json":
        print(json.dumps(plan, indent=2, ensure_ascii=False, default=str))
    else:
        print("\n".join(lines))
    return 0


def _settings_plan(suite, scale: str, plan: dict) -> list[str]:
    """The dry run's settings: what differs from the baseline (``plan["settings"]``) and every resolved setting
    of every cell and stage with its source and that source's kind (``plan["provenance"]``); the text lines."""
    # lazy (start-up speed): imports numpy
    from harness.ablation.provenance import (
        SOURCE_KINDS,
        diff_lines,
        provenance_counts,
        resolved_settings,
        settings_diff,
        strict_provenance_problems,
    )

    diffs = settings_diff(suite, scale)
    lines = diff_lines(suite, scale, diffs)
    plan["settings"] = [dataclasses.asdict(d) for d in diffs]
    resolved = resolved_settings(suite, scale)
    counts = provenance_counts(resolved)
    plan["provenance"] = {"counts": counts, "harness_defaults": len(strict_provenance_problems(resolved)),
                          "settings": [dataclasses.asdict(s) for s in resolved]}
    lines.append(f"provenance of the {counts['total']} resolved settings (cells and stages): "
                 + ", ".join(f"{kind} {counts[kind]}" for kind in SOURCE_KINDS)
                 + f"; {plan['provenance']['harness_defaults']} change numbers on a harness default alone "
                 "(--strict-provenance lists them; --format json lists every setting)")
    return lines


def _describe_dict(s) -> dict:
    return {"model": s.model, "steps": s.steps, "batch_size": s.batch_size, "grad_accum": s.grad_accum,
            "n_hard_negatives": s.n_hard_negatives, "sampling": s.sampling, "lr": s.lr,
            "query_max_length": s.query_max_length, "doc_max_length": s.doc_max_length, "lora": s.lora is not None}


def _describe(s) -> str:
    return (f" model={s.model} steps={s.steps} batch={s.batch_size} grad_accum={s.grad_accum} "
            f"hard_negatives={s.n_hard_negatives} sampling={s.sampling} lr={s.lr} "
            f"lengths={s.query_max_length}/{s.doc_max_length}{' lora' if s.lora is not None else ''}")
