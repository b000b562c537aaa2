"""What mining will cost, before anything runs (dry runs of the ``mined`` method).

Deliberately simple, with the assumptions of :mod:`harness.train.plan` (an H100-class GPU at 989
dense bf16 TFLOP/s and 40% utilisation; 2 FLOPs per parameter per token for a forward pass):

* encoding: every retriever encodes the corpus (``docs`` x ``doc_tokens``) and the queries
  (``queries`` x ``query_tokens``) once;
* judge calls: ``queries`` x the candidates judged per query (``judge_depth``, else ``depth``) x 4
  samplings (the released pairs), at most (threshold strategies judge only those under the bound;
  ``judge_rows`` bounds the queries); each call reads ``prompt_tokens`` (the prompt with a query and
  two passages) and writes ``answer_tokens``;
* generation calls: 2 per query (summary, then query) for the pools left under-full, bounded here by
  every query (paper 004 fills about 9% of the final negatives this way).

Parameter counts of the paper's models are their published sizes (rounded); other models are read
from their config when available locally (:func:`harness.train.plan.read_model_config`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.train.api import estimate_parameters, read_model_config

PEAK_TFLOPS, MFU = 989.0, 0.4
SAMPLINGS = 4
# Published sizes (parameters) of the paper-scale models, for offline estimates.
KNOWN_PARAMS = {"intfloat/multilingual-e5-large": 560e6, "BAAI/bge-m3": 568e6,
                "meta-llama/Llama-3.1-70B-Instruct": 70.6e9, "meta-llama/Meta-Llama-3.1-70B-Instruct": 70.6e9}


def model_parameters(name: str) -> float | None:
    """Parameters of a model (published size, or its local config); None when unknown here."""
    name = name.split(":", 1)[1] if name.startswith(("vllm:", "transformers:")) else name
    if name in KNOWN_PARAMS:
        return KNOWN_PARAMS[name]
    if name.split(":")[0] in ("bm25", "hashgram", "stand-in", "none"):
        return 0.0
    try:
        cfg = read_model_config(name)
    except Exception:   # noqa: BLE001  (an unknown model: no estimate, never a failed dry run)
        return None
    params = estimate_parameters(cfg) if cfg else None
    return float(params["total"]) if params else None


def gpu_hours(flops: float) -> float:
    return flops / (PEAK_TFLOPS * 1e12 * MFU) / 3600


def mining_estimate(options: Mapping[str, Any], queries: int, docs: int, *, doc_tokens: int = 256,
                    query_tokens: int = 64, prompt_tokens: int = 900, answer_tokens: int = 8,
                    generated_tokens: int = 128) -> dict[str, Any]:
    """Encode/judge/generate calls and GPU-hours of mining ``queries`` over ``docs`` documents."""
    out: dict[str, Any] = {"queries": queries, "docs": docs, "encode_gpu_hours": 0.0, "unknown_models": []}
    for name in options["retrievers"]:
        p = model_parameters(str(name))
        if p is None:
            out["unknown_models"].append(str(name))
            continue
        out["encode_gpu_hours"] += gpu_hours(2 * p * (docs * doc_tokens + queries * query_tokens))
    judged_queries = min(queries, options.get("judge_rows") or queries)
    per_query = options.get("judge_depth") or options["depth"]
    out["judge_calls"] = 0 if options.get("judge", "none") == "none" else judged_queries * per_query * SAMPLINGS
    out["generation_calls"] = 0 if options.get("generate", "none") == "none" else 2 * queries
    out["judge_gpu_hours"] = out["generation_gpu_hours"] = 0.0
    for kind, calls, tokens in (("judge", out["judge_calls"], prompt_tokens + answer_tokens),
                                ("generation", out["generation_calls"], 300 + generated_tokens)):
        if calls:
            p = model_parameters(str(options["judge" if kind == "judge" else "generate"]))
            if p is None:
                out["unknown_models"].append(str(options[kind if kind == "judge" else "generate"]))
            else:
                out[f"{kind}_gpu_hours"] = gpu_hours(2 * p * calls * tokens)
    out["gpu_hours"] = out["encode_gpu_hours"] + out["judge_gpu_hours"] + out["generation_gpu_hours"]
    return out


def describe(estimate: Mapping[str, Any]) -> str:
    """One line for a dry run."""
    text = (f"mining {estimate['queries']:,} queries over {estimate['docs']:,} documents: "
            f"encode ~{estimate['encode_gpu_hours']:.1f} GPU-h, {estimate['judge_calls']:,} judge calls "
            f"~{estimate['judge_gpu_hours']:.1f} GPU-h, {estimate['generation_calls']:,} generation calls "
            f"~{estimate['generation_gpu_hours']:.1f} GPU-h (at most; H100-class, 40% MFU)")
    if estimate["unknown_models"]:
        text += f"; no size known here for {', '.join(estimate['unknown_models'])}"
    return text
