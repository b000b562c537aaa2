"""SPLADE exports users can take elsewhere (issue 12, item 5).

* :func:`write_sparse_encoder_files`: the sentence-transformers ``SparseEncoder`` module files
  (``modules.json``: an MLM transformer at the folder root + ``SpladePooling`` in
  ``1_SpladePooling/``; ``sentence_bert_config.json``; ``config_sentence_transformers.json``)
  written next to an HF masked-LM folder, so ``sentence_transformers.SparseEncoder(folder)`` loads
  it and encodes to the same weights as the harness.  The files use the sentence-transformers 5
  layout (``sparse_encoder.models.MLMTransformer``), which 5.x and 6.x both load; writing them
  needs no sentence-transformers install.  A trained ``splade`` run writes them into ``final/``.
* :func:`export_sparse_encoder`: a copy of any MLM folder or alias (``splade-tiny``) with those files.
* :func:`export_json_vector_collection`: a corpus encoded by a sparse model as Anserini's
  ``JsonVectorCollection`` (``docs.jsonl``: ``{"id", "contents": "", "vector": {token: impact}}``,
  impacts quantised by a named rule, ``pyserini`` = round(w/5*256) or ``splade`` = rint(w*100)),
  plus ``queries.jsonl`` (``{"id", "vector"}``, Anserini's ``JsonIntVector`` topic reader) when
  queries are given, and ``export.json`` (model identity, rule, counts).  Index it with
  ``IndexCollection -collection JsonVectorCollection -impact -pretokenized``.

From the command line::

    python -m methods.splade_export st  --model RUN_OR_FOLDER --out DIR
    python -m methods.splade_export jsonvector --model RUN_OR_FOLDER --dataset-dir BEIR_DIR --out DIR \\
        [--quantization pyserini|splade]
"""
from __future__ import annotations

import argparse
import json
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from harness.data import load_beir
from harness.encoders.heads import AGGREGATIONS
from harness.encoders.refs import resolve_model
from harness.encoders.settings import read_encoder_config
from harness.encoders.sparse import is_sparse_model, load_sparse_encoder
from harness.encoders.sparse_cache import encode_corpus_sparse
from harness.errors import ConfigError
from harness.io import atomic_dir, atomic_write_json
from harness.retrieval.impact import (
    QUANTIZATIONS,
    _check_vocabulary,
    check_quantization,
    quantize,
    write_vector_collection,
)

MLM_MODULE = "sentence_transformers.sparse_encoder.models.MLMTransformer"
POOLING_MODULE = "sentence_transformers.sparse_encoder.models.SpladePooling"
POOLING_DIR = "1_SpladePooling"
ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", POOLING_DIR)


def _st_version() -> str:
    try:
        return metadata.version("sentence-transformers")
    except metadata.PackageNotFoundError:
        return "5.0.0"        # the layout written here is that of sentence-transformers 5


def write_sparse_encoder_files(folder: str | Path, pooling: str = "max", max_length: int = 256) -> Path:
    """Write the ``SparseEncoder`` module files next to the HF masked-LM model in ``folder``."""
    folder = Path(folder)
    if pooling not in AGGREGATIONS:
        raise ConfigError(f"unknown SPLADE pooling {pooling!r}; choose one of {', '.join(AGGREGATIONS)}")
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{folder} holds no HF model (config.json is missing); export a model folder")
    vocab = int(json.loads((folder / "config.json").read_text(encoding="utf-8"))["vocab_size"])
    atomic_write_json(folder / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": MLM_MODULE},
        {"idx": 1, "name": "1", "path": POOLING_DIR, "type": POOLING_MODULE}])
    atomic_write_json(folder / "sentence_bert_config.json", {"max_seq_length": int(max_length),
                                                             "do_lower_case": False})
    atomic_write_json(folder / "config_sentence_transformers.json", {
        "model_type": "SparseEncoder", "__version__": {"sentence_transformers": _st_version()},
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "dot"})
    (folder / POOLING_DIR).mkdir(exist_ok=True)
    # relu then log1p, no chunking: the weights of harness.encoders.heads.splade_pool
    atomic_write_json(folder / POOLING_DIR / "config.json", {"pooling_strategy": pooling,
                                                             "activation_function": "relu",
                                                             "word_embedding_dimension": vocab})
    return folder


def export_sparse_encoder(model: str, out: str | Path, *, pooling: str | None = None,
                          max_length: int | None = None, overwrite: bool = False) -> Path:
    """Copy the MLM folder of ``model`` (alias, folder or trained run) to ``out`` with the ``SparseEncoder``
    files; pooling and max length default to the model's own (``harness_encoder.json``, alias defaults)."""
    path, defaults = resolve_model(model)
    source = Path(path)
    if not source.is_dir():
        raise ConfigError(f"model {model!r} is not a local folder; export a downloaded or trained model")
    saved = read_encoder_config(source)
    pooling = pooling or saved.get("pooling", defaults.pooling)
    if pooling not in AGGREGATIONS:
        raise ConfigError(f"model {model!r} records pooling {pooling!r}, not a sparse (SPLADE) aggregation; "
                          f"give pooling= one of {', '.join(AGGREGATIONS)}")
    length = max_length or int(saved.get("doc_max_length", defaults.max_length))
    with atomic_dir(out, overwrite=overwrite, what="an exported model folder",
                    is_ours=lambda p: (p / "modules.json").is_file()) as tmp:
        for item in source.iterdir():
            if item.name in ST_FILES:
                continue
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        write_sparse_encoder_files(tmp, pooling, length)
    return Path(out)


def _vector_lines(ids: list[str], vectors: Any, vocab: list[str], quantization: str) -> tuple[list[str], int]:
    impacts = quantize(np.asarray(vectors.data), quantization)
    indptr, indices = np.asarray(vectors.indptr), np.asarray(vectors.indices)
    lines, dropped = [], 0
    for r, qid in enumerate(ids):
        a, b = int(indptr[r]), int(indptr[r + 1])
        vec = {vocab[int(t)]: int(w) for t, w in zip(indices[a:b], impacts[a:b]) if w > 0}
        dropped += (b - a) - len(vec)
        lines.append(json.dumps({"id": qid, "vector": vec}, ensure_ascii=False))
    return lines, dropped


def export_json_vector_collection(model: str, corpus: Any, out: str | Path, *, queries: Any = None,
                                  quantization: str = "pyserini", cache_dir: str | Path | None = None,
                                  overwrite: bool = False, **encoder_options: Any) -> dict[str, Any]:
    """Encode ``corpus`` (and ``queries``) with the sparse ``model`` into an Anserini-ready folder ``out``;
    returns what ``export.json`` records.  The corpus weights come from (and go to) the sparse cache."""
    check_quantization(quantization)
    if not is_sparse_model(model):
        raise ConfigError(f"model {model!r} is not a sparse (SPLADE) model: no sparse alias, harness_encoder.json "
                          "with max/sum pooling, or sentence-transformers SpladePooling")
    encoder = load_sparse_encoder(model, **encoder_options)
    docs = encode_corpus_sparse(encoder, corpus, cache_dir, progress=False)
    vocab = _check_vocabulary(encoder.vocabulary(), docs.vocab_size)
    with atomic_dir(out, overwrite=overwrite, what="a JsonVectorCollection export",
                    is_ours=lambda p: (p / "export.json").is_file()) as tmp:
        counts = write_vector_collection(docs, vocab, quantization, tmp)
        info: dict[str, Any] = {"format": "JsonVectorCollection", "model": encoder.identity(),
                                "quantization": quantization, "quantization_rule": QUANTIZATIONS[quantization],
                                "documents": docs.num_docs, **counts}
        if queries is not None:
            qvec = encoder.encode_queries(queries.texts, progress=False)
            lines, dropped = _vector_lines(list(queries.ids), qvec, vocab, quantization)
            (tmp / "queries.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            info.update({"queries": len(lines), "query_weights_dropped": dropped})
        atomic_write_json(tmp / "export.json", info)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m methods.splade_export", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    st = sub.add_parser("st", help="a sentence-transformers SparseEncoder folder")
    st.add_argument("--model", required=True)
    st.add_argument("--out", required=True)
    st.add_argument("--pooling", choices=AGGREGATIONS)
    st.add_argument("--max-length", type=int)
    jv = sub.add_parser("jsonvector", help="an Anserini JsonVectorCollection of a BEIR corpus (and its queries)")
    jv.add_argument("--model", required=True)
    jv.add_argument("--dataset-dir", required=True)
    jv.add_argument("--split", default="test")
    jv.add_argument("--out", required=True)
    jv.add_argument("--quantization", default="pyserini", choices=("pyserini", "splade"))
    for p in (st, jv):
        p.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "st":
        print(export_sparse_encoder(args.model, args.out, pooling=args.pooling, max_length=args.max_length,
                                    overwrite=args.overwrite))
        return 0

    dataset = load_beir(args.dataset_dir, args.split)
    info = export_json_vector_collection(args.model, dataset.corpus, args.out, queries=dataset.queries,
                                         quantization=args.quantization, overwrite=args.overwrite)
    print(json.dumps({k: v for k, v in info.items() if k != "model"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
