"""``harness train``: train a method into a checkpoint folder (resuming if it holds one).

The spec is built in layers: the method's preset for ``--scale`` < ``--config`` file
(YAML/JSON mapping of TrainSpec fields) < ``--set key=value`` < the explicit flags
(``--model``, ``--steps``, ``--batch-size``).  ``--dry-run`` prints the plan (model,
steps, batch, datasets and weights, a compute estimate) without loading weights.
Multi-GPU: ``accelerate launch -m harness train ...`` or ``torchrun -m harness train ...``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

import yaml

from harness.errors import ConfigError
from harness.train.outdir import check_training_folder
from harness.train.spec import load_spec_file
from harness.train.stages import Stage

log = logging.getLogger("harness.train")


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a retrieval method into a checkpoint folder",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Choices are not listed here: importing every method (torch included) would slow down every
    # `harness` call; an unknown name gets the registry's did-you-mean error.
    p.add_argument("--method", default="uniform",
                   help="registered method name or module:Class (default: uniform; `harness list methods` shows all)")
    p.add_argument("--data", action="append", required=True, metavar="PATH",
                   help="training collection folder, .jsonl file, or BEIR folder (train qrels); repeatable")
    p.add_argument("--out", required=True, help="output folder (checkpoints, logs, final model)")
    p.add_argument("--scale", default="small", help="preset of the method: tiny, small or paper (default small)")
    p.add_argument("--config", help="YAML/JSON file of TrainSpec overrides")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one TrainSpec field (value parsed as YAML), e.g. --set temperature=0.02")
    p.add_argument("--model", help="backbone: alias (minilm), local folder or hub id")
    p.add_argument("--steps", type=int, help="optimizer steps")
    p.add_argument("--batch-size", type=int, help="queries per optimizer step over all processes")
    p.add_argument("--max-rows", type=int, help="use only the first N rows of every source")
    p.add_argument("--negatives-run", help="TREC run giving hard negatives for BEIR training data")
    p.add_argument("--domains", help="comma-separated subset of a collection's domains")
    p.add_argument("--map", metavar="FROM=TO[,FROM=TO...]",
                   help="rename the training files' own keys to the row fields query, pos and neg, "
                        "e.g. --map question=query,positive=pos")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit without training")
    p.add_argument("--gpu-tflops", type=float, default=989.0, help="peak TFLOP/s assumed by the estimate")
    p.add_argument("--mfu", type=float, default=0.4, help="utilisation assumed by the estimate")
    p.set_defaults(func=run)


def _parse_sets(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def build_spec(args, method):
    overrides: dict[str, Any] = {}
    if args.config:
        overrides.update(load_spec_file(args.config))
    overrides.update(_parse_sets(args.set))
    for field, value in (("model", args.model), ("steps", args.steps), ("batch_size", args.batch_size)):
        if value is not None:
            overrides[field] = value
    return method.spec(args.scale, **overrides)


def build_data(args):
    from pathlib import Path

    # lazy (start-up speed): imports numpy
    from harness.data.collections import is_beir_folder, load_training_data, parse_column_map

    columns = parse_column_map(args.map) if getattr(args, "map", None) else None
    entries = []
    for path in args.data:
        entry: dict[str, Any] = {"path": path}
        if args.max_rows:
            entry["max_rows"] = args.max_rows
        if is_beir_folder(Path(path)):
            if columns:
                raise ConfigError(f"--map renames the keys of .jsonl training files; {path} is a BEIR folder "
                                  "(its rows come from qrels, queries and corpus)")
            if args.negatives_run:
                entry["negatives_run"] = args.negatives_run
        else:
            if args.domains:
                entry["domains"] = [d.strip() for d in args.domains.split(",") if d.strip()]
            if columns:
                entry["map"] = columns
        entries.append(entry)
    return load_training_data(entries)


def check_out(out: str, method, spec, data) -> None:
    """Refuse ``--out`` before any work unless training may write there: a new or empty folder, a run of
    the harness, or a folder holding only ``deps/`` with the dependency runs of this very command (what an
    interrupted ``harness train`` of a method with dependencies leaves: rerunning it resumes there, and
    finished dependency runs are reused).  Another configuration's dependency runs are refused too."""
    from harness.method.stages import flatten_stages  # lazy (start-up speed): imports numpy

    runs = {planned.key for planned in flatten_stages(method, spec, data.fingerprint())
            if isinstance(planned.stage, Stage)}
    check_training_folder(out, runs)


def run(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from harness.method import get_method  # lazy (start-up speed): imports numpy

    method = get_method(args.method)
    spec = build_spec(args, method)
    data = build_data(args)
    if args.dry_run:
        from harness.train.plan import training_plan  # lazy (start-up speed): imports numpy

        world = int(os.environ.get("WORLD_SIZE", "1"))
        plan = training_plan(spec, data, method, world_size=world, peak_tflops=args.gpu_tflops, mfu=args.mfu)
        from harness.method.stages import describe_stages  # lazy (start-up speed): imports numpy

        stages = describe_stages(method, spec, data.fingerprint())
        if stages:          # listed only for a method that trains or builds something first
            plan["stages"] = stages
        print(json.dumps(plan, indent=2, ensure_ascii=False))
        return 0
    check_out(args.out, method, spec, data)
    ckpt = method.train(spec, data, args.out)
    print(f"trained {method.name} for {ckpt.step} steps: model in {ckpt.path}")
    return 0
