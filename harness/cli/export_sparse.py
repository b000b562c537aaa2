"""``harness export-sparse``: take a sparse (SPLADE) model elsewhere.

Two outputs, either or both in one call:

* ``--sentence-transformers DIR``: a copy of the model folder with the sentence-transformers
  ``SparseEncoder`` files, so ``SparseEncoder(DIR)`` loads it and encodes to the harness's weights;
* ``--jsonvector DIR``: the corpus of ``--dataset-dir`` (and its queries) encoded as Anserini's
  ``JsonVectorCollection``, impacts quantised by ``--quantization`` (``pyserini`` =
  round(w/5*256), ``splade`` = rint(w*100)), ready for
  ``IndexCollection -collection JsonVectorCollection -impact -pretokenized``.

The model is an alias (``splade-tiny``), a model folder or a training run's workdir.  Every
output folder is written under a temporary name and renamed when complete; a folder that is
not an earlier export is never replaced, and an earlier one only with ``--overwrite``.  Both
outputs are checked before any encoding.  The writers are the SPLADE plug-in's
(``methods.splade_export``): this command only wires them to the command line.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from harness.cli._types import positive_int
from harness.cli.data import suite_help
from harness.errors import ConfigError
from harness.io import check_replaceable

log = logging.getLogger(__name__)

QUANTIZATION_CHOICES = ("pyserini", "splade")     # harness.retrieval.impact.QUANTIZATIONS (checked by a test)
POOLING_CHOICES = ("max", "sum")
ST_MARKER, JSONVECTOR_MARKER = "modules.json", "export.json"   # what methods.splade_export's outputs hold


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export-sparse",
        help="export a sparse model as a sentence-transformers SparseEncoder folder and/or a corpus as an "
             "Anserini JsonVectorCollection",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="a sparse model: alias (splade-tiny), model folder or training "
                                                  "run workdir")
    p.add_argument("--sentence-transformers", dest="st_out", type=Path, default=None, metavar="DIR",
                   help="write a SparseEncoder folder here")
    p.add_argument("--jsonvector", dest="jsonvector_out", type=Path, default=None, metavar="DIR",
                   help="write the corpus of --dataset-dir as a JsonVectorCollection here (docs.jsonl, "
                        "queries.jsonl, export.json)")
    p.add_argument("--dataset-dir", type=Path, default=None, help="dataset folder to encode (with --jsonvector)")

    p.add_argument("--suite", default=None, help=suite_help("default: the BEIR layout"))
    p.add_argument("--split", default=None, help="qrels split whose queries are exported (default: the suite's)")
    p.add_argument("--no-queries", action="store_true", help="export the documents only")
    p.add_argument("--quantization", choices=QUANTIZATION_CHOICES, default="pyserini",
                   help="impact quantisation: pyserini = round(w/5*256) (default), splade = rint(w*100)")
    p.add_argument("--pooling", choices=POOLING_CHOICES, default=None,
                   help="term aggregation (default: the model's own)")
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="max tokens (default: the model's own; for --sentence-transformers the model's max length)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="encoding batch size")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="sparse embedding cache (default: $HARNESS_CACHE or ~/.cache/retrieval-harness)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export at the same folder")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def _check_plan(args: argparse.Namespace) -> None:
    """Every refusal that needs no model: before any loading or encoding."""
    if args.st_out is None and args.jsonvector_out is None:
        raise ConfigError("nothing to export: give --sentence-transformers DIR and/or --jsonvector DIR")
    if args.jsonvector_out is None:
        given = [flag for flag, value in (("--dataset-dir", args.dataset_dir), ("--suite", args.suite),
                                          ("--split", args.split)) if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply to --jsonvector, which is not given")
    elif args.dataset_dir is None:
        raise ConfigError("--jsonvector needs --dataset-dir (the corpus to encode)")
    if args.st_out is not None and args.jsonvector_out is not None and \
            Path(args.st_out).resolve() == Path(args.jsonvector_out).resolve():
        raise ConfigError("--sentence-transformers and --jsonvector must be different folders")
    if args.st_out is not None:
        check_replaceable(args.st_out, lambda p: (p / ST_MARKER).is_file(), "an exported model folder",
                          args.overwrite)
    if args.jsonvector_out is not None:
        check_replaceable(args.jsonvector_out, lambda p: (p / JSONVECTOR_MARKER).is_file(),
                          "a JsonVectorCollection export", args.overwrite)


def run(args: argparse.Namespace) -> int:
    from harness.encoders.sparse import is_sparse_model  # lazy (start-up speed): imports numpy, torch, tqdm

    _check_plan(args)
    if not is_sparse_model(args.model):
        raise ConfigError(f"model {args.model!r} is not a sparse (SPLADE) model: no sparse alias, "
                          "harness_encoder.json with max/sum pooling, or sentence-transformers SpladePooling")
    # The SPLADE plug-in's writers (application layer: this command may import plug-ins).
    # lazy (start-up speed): imports numpy, torch, tqdm
    from methods.splade_export import export_json_vector_collection, export_sparse_encoder

    report: dict[str, Any] = {"model": args.model}
    loaded = None
    if args.jsonvector_out is not None:
        from harness.pipeline import load_benchmark  # lazy (start-up speed): imports numpy

        loaded = load_benchmark(args.dataset_dir, args.suite, split=args.split)   # bad data: before any export
    if args.st_out is not None:
        path = export_sparse_encoder(args.model, args.st_out, pooling=args.pooling, max_length=args.max_length,
                                     overwrite=args.overwrite)
        report["sentence_transformers"] = str(path)
    if loaded is not None:
        cache = args.cache_dir or os.environ.get("HARNESS_CACHE")
        info = export_json_vector_collection(
            args.model, loaded.dataset.corpus, args.jsonvector_out,
            queries=None if args.no_queries else loaded.dataset.queries, quantization=args.quantization,
            cache_dir=cache, overwrite=args.overwrite, pooling=args.pooling, query_max_length=args.max_length,
            doc_max_length=args.max_length, batch_size=args.batch_size)
        report["jsonvector"] = {"path": str(args.jsonvector_out), **{k: v for k, v in info.items() if k != "model"}}
    if args.format == "json":
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        if "sentence_transformers" in report:
            print(f"SparseEncoder folder: {report['sentence_transformers']}")
        if "jsonvector" in report:
            jv = report["jsonvector"]
            queries = f", {jv['queries']} queries" if "queries" in jv else ""
            print(f"JsonVectorCollection: {jv['path']} ({jv['documents']} documents{queries}, quantisation "
                  f"{jv['quantization']} = {jv['quantization_rule']}, {jv['doc_postings']} postings, "
                  f"{jv['doc_weights_dropped']} weights rounded to 0 dropped)")
    return 0
