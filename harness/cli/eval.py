"""``harness eval``: evaluate a model on a dataset folder under a suite's protocol, and store the result."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from harness import pipeline
from harness.cli._types import positive_int
from harness.cli.data import suite_help
from harness.encoders.devices import check_devices, parse_devices
from harness.errors import ConfigError
from harness.io import OutputExistsError
from harness.io.stale import sweep_stale_temps
from harness.pipeline import LEXICAL_MODELS, ModelSpec, default_out_dir, load_benchmark
from harness.protocol import BM25_TIES
from harness.retrieval.impact import QUANTIZATIONS
from harness.retrieval.sparse import BACKENDS as SPARSE_BACKENDS
from harness.retrieval.sparse import check_backend
from harness.store import check_output_dir

DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr@10", "map", "p@10", "success@10")
BM25_K1, BM25_B = 0.9, 0.4
DENSE_ONLY = ("pooling", "query_prompt", "doc_prompt", "normalize", "max_length", "batch_size", "index")
# Dense-encoder execution options: they change the vectors (dtype, backend) or only memory (shard size).
ENCODING = ("dtype", "backend", "shard_size", "devices")
DTYPES = ("fp32", "bf16", "fp16")
BACKENDS = ("torch", "int8")
BM25_ONLY = ("k1", "b", "bm25_ties")
SPARSE_ONLY = ("sparse_backend", "quantization")

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a model (bm25, minilm, or a model path) on a dataset folder and store the result",
        description="Retrieve with MODEL on the dataset in --dataset-dir (BEIR layout or a suite's release "
                    "format), score per query under the suite's protocol card, print the metrics and store "
                    "run, per-query values, metrics and manifest in one result directory.",
    )
    p.add_argument("--model", required=True, help="'bm25', an alias ('minilm'), a local model path or a hub id")
    p.add_argument("--dataset-dir", required=True, type=Path, help="dataset folder")

    p.add_argument("--suite", default=None,
                   help=suite_help("default: generic BEIR-layout protocol with the default metrics"))
    p.add_argument("--split", default=None, help="qrels split (default: the suite's)")
    p.add_argument("--dataset", default=None, help="dataset name within the suite (default: the folder name)")
    p.add_argument("--language", default=None, help="language code (MIRACL/MKQA; default from the folder)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="suite-specific load option (repeatable), e.g. --option gallery=sub200k --option seed=7 "
                        "for DuReader's 200k sub-gallery; values are parsed as YAML scalars")
    p.add_argument("-m", "--metric", action="append", dest="metrics", default=None,
                   help="metric to report (repeatable; default: the suite's metrics, plus "
                        f"{', '.join(DEFAULT_METRICS)} for the generic protocol)")
    p.add_argument("--out", type=Path, default=None,
                   help="result directory (default: results/<suite>/<dataset>/<model>); an existing folder, the "
                        "default one too, is refused unless it is a previous harness result holding nothing else "
                        "and --overwrite is given")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a previous harness result at --out or the default location (never a folder "
                        "holding anything the harness did not write)")
    p.add_argument("--results-root", type=Path, default=Path("results"), help="root for default result directories")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="embedding/index cache (default: $HARNESS_CACHE or ~/.cache/retrieval-harness)")
    p.add_argument("--pooling", choices=("cls", "mean", "last", "max", "sum"), default=None,
                   help="pooling for a model path (dense: cls/mean/last; sparse term weights: max/sum)")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None, help="L2-normalise embeddings")
    p.add_argument("--query-prompt", default=None, help="prefix for queries (overrides model default)")
    p.add_argument("--doc-prompt", default=None, help="prefix for documents (overrides model default)")
    p.add_argument("--max-length", type=positive_int, default=None, help="max tokens for queries and documents")
    p.add_argument("--batch-size", type=positive_int, default=None, help="encoding batch size")
    p.add_argument("--shard-size", type=positive_int, default=None,
                   help="documents per embedding-cache shard (default 50000): peak encoding memory is one shard of "
                        "texts and vectors plus one batch of tokens; an existing cache entry keeps its layout")
    p.add_argument("--dtype", choices=DTYPES, default=None,
                   help="weights/activation precision of a dense model (default fp32 on CPU, bf16/fp16 autocast on a "
                        "GPU); not fp32 changes the vectors: recorded in the manifest, the cache key and the card")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="dense inference backend: torch (default) or int8 (dynamic int8 linear layers on CPU, "
                        "slightly different numbers: recorded in the manifest, cache key and card)")
    p.add_argument("--devices", type=devices_list, default=None, metavar="DEVICE[,DEVICE...]",
                   help="encode the corpus with one worker process per device, e.g. cuda:0,cuda:1 (cpu, cuda:N, or "
                        "auto = every visible GPU); same vectors and cache entry as one device, queries run on the "
                        "first; a device that does not exist is refused before any compute")
    p.add_argument("--index", default=None,
                   help="faiss index factory string (Flat, HNSW32, IVF1024,Flat, ...; default Flat)")
    p.add_argument("--top-k", type=positive_int, default=None, help="run depth (default: the card's, 1000)")
    p.add_argument("--sparse-backend", type=sparse_backend, default=None, metavar="BACKEND[:KEY=VALUE,...]",
                   help=f"retrieval backend for a sparse (term-weight) model, one of {', '.join(SPARSE_BACKENDS)}: "
                        "exact scipy dot products (default), Lucene impact search through Pyserini, or seismic "
                        "(approximate; index options inline, e.g. seismic:query_cut=20)")
    p.add_argument("--quantization", choices=tuple(QUANTIZATIONS), default=None,
                   help="impact quantisation for --sparse-backend lucene-impact (ignored by the other backends): "
                        + "; ".join(f"{k} = {v}" for k, v in QUANTIZATIONS.items()) + " (default pyserini)")
    # None defaults tell "given" from "default", to warn about options the model ignores.
    p.add_argument("--k1", type=float, default=None, help=f"BM25 k1 (default {BM25_K1})")
    p.add_argument("--b", type=float, default=None, help=f"BM25 b (default {BM25_B})")
    p.add_argument("--bm25-ties", choices=BM25_TIES, default=None,
                   help="BM25 score ties (recorded in the card): trec_eval = Lucene's exact scores, ties by doc id "
                        "descending at evaluation (default); pyserini = Pyserini's searcher exactly (4-decimal "
                        "scores, ties by doc id ascending)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The model name first, before the dataset and torch load: a typo fails in a second, with a did-you-mean.
    from harness.encoders.model_check import check_model  # lazy (start-up speed): reads the model registry

    check_model(args.model)
    options = {"split": args.split, "dataset": args.dataset}
    if args.language:
        options["language"] = args.language
    options.update(_parse_options(args.option))
    loaded = load_benchmark(args.dataset_dir, args.suite, **options)
    card_changes: dict = {}
    if args.metrics:
        card_changes["metrics"] = tuple(args.metrics)
    elif args.suite is None:
        card_changes["metrics"] = tuple(dict.fromkeys(loaded.card.metrics + DEFAULT_METRICS))
    if args.top_k:
        card_changes["top_k"] = args.top_k
    if getattr(args, "bm25_ties", None) and args.model.lower() in LEXICAL_MODELS:
        card_changes["bm25_ties"] = args.bm25_ties  # other models warn below and keep the card as it is
    if card_changes:
        loaded.card = loaded.card.with_(**card_changes)

    overrides: dict = {}
    for key, value in (("pooling", args.pooling), ("normalize", args.normalize), ("query_prompt", args.query_prompt),
                       ("doc_prompt", args.doc_prompt), ("batch_size", args.batch_size)):
        if value is not None:
            overrides[key] = value
    if args.max_length:
        overrides["query_max_length"] = overrides["doc_max_length"] = args.max_length
    encoding = encoding_overrides(args)
    spec = ModelSpec(args.model, overrides=overrides, bm25_k1=BM25_K1 if args.k1 is None else args.k1,
                     bm25_b=BM25_B if args.b is None else args.b, index=args.index or "Flat",
                     sparse_backend=args.sparse_backend or "exact", quantization=args.quantization or "pyserini")
    warn_ignored_options(args, lexical=spec.is_lexical, sparse=spec.is_sparse)
    if encoding and not (spec.is_lexical or spec.is_sparse):
        spec.overrides = {**overrides, **encoding}
        extra = encoding_card_fields(encoding)
        if extra:
            loaded.card = loaded.card.with_(extra={**dict(loaded.card.extra), **extra})
    out = args.out or default_out_dir(args.results_root, loaded, spec)
    # What a killed earlier eval of this folder left (its temporary folder, if its process is gone).
    sweep_stale_temps(out.parent, out.name)
    # Before any compute.  A previous result is replaced only with --overwrite, at --out and at the
    # default location alike (a user may have kept it, or added notes to it); nothing else ever is.
    try:
        check_output_dir(out, overwrite=args.overwrite)
    except OutputExistsError as exc:
        if args.out is not None or "--overwrite" not in str(exc):
            raise
        raise OutputExistsError(f"{exc}, or --out DIR (or --results-root DIR) to store this result elsewhere "
                                f"({out} is the default location of this model on this dataset)") from None
    cache = args.cache_dir or os.environ.get("HARNESS_CACHE")
    result = pipeline.evaluate_model(spec, loaded, out, cache_dir=cache)   # looked up at call time (tests replace it)

    if args.format == "json":
        print(json.dumps({"metrics": result.metrics, "result_dir": str(out), "card": result.card.to_dict()},
                         indent=2, ensure_ascii=False))
    else:
        _print_table(result, out)
    return 0


def sparse_backend(text: str) -> str:
    """``--sparse-backend`` checked as the pipeline will use it (harness.retrieval.sparse.check_backend):
    a known backend, seismic's inline options valid and its extra installed, before any compute."""
    try:
        check_backend(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} ({exc})") from None
    return text


def warn_ignored_options(args: argparse.Namespace, lexical: bool, sparse: bool = False) -> list[str]:
    """Log one warning per given option that the model does not use (dense options with
    BM25, ``--k1``/``--b`` with a dense model, sparse options with a non-sparse one); returns the options named."""
    unused: tuple[str, ...] = (DENSE_ONLY + ENCODING + SPARSE_ONLY if lexical
                               else BM25_ONLY + ("index", "normalize") + ENCODING if sparse
                               else BM25_ONLY + SPARSE_ONLY)
    if sparse and (args.sparse_backend or "exact").split(":", 1)[0] != "lucene-impact":
        unused += ("quantization",)      # only Lucene impact search quantises the weights
    ignored = [k for k in unused if getattr(args, k, None) is not None]
    for key in ignored:
        flag = "--" + key.replace("_", "-")
        what = "BM25" if lexical else "a sparse model" if sparse else "a dense model"
        log.warning("%s does not apply to %s (--model %s) and is ignored", flag, what, args.model)
    return ignored


def encoding_overrides(args: argparse.Namespace) -> dict:
    """HFEncoder keyword overrides from ``--dtype``, ``--backend``, ``--shard-size`` and ``--devices`` (given
    ones only)."""
    given = {"dtype": getattr(args, "dtype", None), "backend": getattr(args, "backend", None),
             "shard_size": getattr(args, "shard_size", None), "devices": getattr(args, "devices", None)}
    if all(value is None for value in given.values()):
        return {}                   # nothing to check: BM25 and default encodings never import torch
    from harness.encoders.hf import encoding_options  # lazy (start-up speed): imports torch, tqdm

    return encoding_options(given)


def devices_list(text: str) -> tuple[str, ...]:
    """``--devices`` checked before any compute: known spellings, and every CUDA device present."""
    try:
        return check_devices(parse_devices(text))
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def encoding_card_fields(encoding: dict) -> dict:
    from harness.encoders.hf import encoding_card_fields as fields  # lazy (start-up speed): imports torch, tqdm

    return fields(encoding)


def _parse_options(items: list[str]) -> dict:
    import yaml

    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option expects KEY=VALUE, got {item!r}")
        options[key.strip().replace("-", "_")] = yaml.safe_load(value) if value else ""
    return options


def _print_table(result, out: Path) -> None:
    card = result.card
    width = max(len(m) for m in result.metrics)
    print(f"{card.suite} / {card.dataset or result.manifest['dataset']['name']}  "
          f"model={result.manifest['model']}  queries={result.manifest['num_queries']}")
    for metric, value in result.metrics.items():
        print(f"  {metric:<{width}}  {value:.4f}")
    print(f"protocol: split={card.split} relevance>={card.relevance_threshold} exclude_self={card.exclude_self} "
          f"complete={card.complete} top_k={card.top_k}  (card {card.fingerprint()})")
    timings = result.manifest.get("timings", {})
    if timings:
        print("timings: " + ", ".join(f"{k}={v:.1f}s" for k, v in timings.items()))
    print(f"stored in {out}", file=sys.stderr)
