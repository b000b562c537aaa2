"""A training plan without loading weights: what will run, and a rough compute estimate.

Compute estimate (documented, deliberately simple):

* tokens  T = steps * batch_size * (query_max_length + (1 + n_hard_negatives) * doc_max_length)
  (padded lengths, so an upper bound);
* FLOPs   F = k * N * T with N the non-embedding parameters (read from ``config.json``)
  and k = 6 for full fine-tuning (forward 2 + backward 4), 4 with LoRA (no weight
  gradients of the frozen matrices), plus 2 with gradient checkpointing (a second forward);
  the attention score term (quadratic in length) is left out;
* GPU-hours = F / (peak_tflops * 1e12 * mfu) / 3600, by default an H100/H800 at
  989 dense bf16 TFLOP/s and 40% utilisation.

For the tDRO baseline (Qwen1.5-0.5B, 1000 steps x 2048 x (128 + 2 * 512) tokens) this
gives about 4 GPU-hours, i.e. half an hour on 8 GPUs; Mistral-7B with LoRA about
70 GPU-hours (under 9 hours on 8 GPUs), in line with the paper's "less than 10 hours"
on 8 H800 for its fine-tunings.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import ConfigError
from harness.train.spec import TrainSpec

if TYPE_CHECKING:
    from harness.method import Method

# Architecture numbers of the paper-scale backbones (from their published config.json), so that
# a dry run can estimate compute offline, before the weights are ever downloaded.
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen1.5-0.5B": {"model_type": "qwen2", "hidden_size": 1024, "num_hidden_layers": 24,
                          "intermediate_size": 2816, "num_attention_heads": 16, "num_key_value_heads": 16,
                          "vocab_size": 151936},
    "Qwen/Qwen1.5-1.8B": {"model_type": "qwen2", "hidden_size": 2048, "num_hidden_layers": 24,
                          "intermediate_size": 5504, "num_attention_heads": 16, "num_key_value_heads": 16,
                          "vocab_size": 151936},
    "Qwen/Qwen1.5-4B": {"model_type": "qwen2", "hidden_size": 2560, "num_hidden_layers": 40,
                        "intermediate_size": 6912, "num_attention_heads": 20, "num_key_value_heads": 20,
                        "vocab_size": 151936},
    "Qwen/Qwen1.5-7B": {"model_type": "qwen2", "hidden_size": 4096, "num_hidden_layers": 32,
                        "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
                        "vocab_size": 151936},
    "mistralai/Mistral-7B-v0.1": {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
                                  "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                                  "vocab_size": 32000},
    # Echo-Mistral-SPLADE's backbone (paper 003): v0.3 extends the vocabulary to 32768.
    "mistralai/Mistral-7B-v0.3": {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
                                  "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                                  "vocab_size": 32768},
    # BERT-large architecture with the Chinese vocabulary (the public stand-in for PEG's backbone).
    "hfl/chinese-roberta-wwm-ext-large": {"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24,
                                          "intermediate_size": 4096, "num_attention_heads": 16,
                                          "vocab_size": 21128},
    # BERT-base with coCondenser pretraining (COCO-DR Base's initialisation) and BERT-large (paper 001).
    "Luyu/co-condenser-marco": {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
                                "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 30522},
    # Condenser (Gao and Callan 2021; BERT-base): paper 001's COCO initialisation.
    "Luyu/condenser": {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
                       "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 30522},
    "bert-base-uncased": {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
                          "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 30522},
    "bert-large-uncased": {"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24,
                           "intermediate_size": 4096, "num_attention_heads": 16, "vocab_size": 30522},
    "meta-llama/Meta-Llama-3-8B": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                                   "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                                   "vocab_size": 128256},
}
GATED_MLP_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "qwen2_moe", "mixtral")


def read_model_config(model: str) -> dict[str, Any] | None:
    """``config.json`` of a local model, from the local HF cache (offline), or from ``KNOWN_CONFIGS``."""
    from harness.encoders.backbone import resolve_model  # lazy (start-up speed): imports torch, tqdm

    path, _ = resolve_model(model)
    cfg_file = Path(path) / "config.json"
    if cfg_file.exists():
        return json.loads(cfg_file.read_text(encoding="utf-8"))
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path, local_files_only=True).to_dict()
    except (OSError, ValueError):
        return KNOWN_CONFIGS.get(model)


def estimate_parameters(cfg: dict[str, Any]) -> dict[str, int] | None:
    """Total and non-embedding parameter counts from a transformers config (approximate)."""
    try:
        h = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        vocab = int(cfg["vocab_size"])
        ffn = int(cfg.get("intermediate_size") or 4 * h)
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(cfg.get("num_attention_heads") or 1)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    kv_dim = h // heads * kv_heads
    mlp_mats = 3 if cfg.get("model_type") in GATED_MLP_TYPES else 2
    per_layer = 2 * h * h + 2 * h * kv_dim + mlp_mats * h * ffn
    non_embedding = layers * per_layer
    return {"total": non_embedding + vocab * h, "non_embedding": non_embedding}


def compute_estimate(spec: TrainSpec, non_embedding_params: int, peak_tflops: float = 989.0,
                     mfu: float = 0.4, length_factor: float = 1.0) -> dict[str, float]:
    """Training FLOPs and GPU-hours; ``length_factor`` scales every text's tokens (a method that feeds
    each text twice, as echo embeddings do, passes 2: ``Method.sequence_length_factor``)."""
    tokens = length_factor * spec.steps * spec.batch_size * (
        spec.query_max_length + (1 + spec.n_hard_negatives) * spec.doc_max_length)
    k = (4 if spec.lora is not None else 6) + (2 if spec.gradient_checkpointing else 0)
    flops = k * non_embedding_params * tokens
    gpu_hours = flops / (peak_tflops * 1e12 * mfu) / 3600
    return {"tokens": float(tokens), "flops": float(flops), "flops_per_param_token": float(k),
            "gpu_hours": gpu_hours, "assumed_peak_tflops": peak_tflops, "assumed_mfu": mfu}


def estimate_gpu_hours(spec: TrainSpec, method: Method, frozen_forwards: int | None = None) -> float | None:
    """GPU-hours of a run of ``method`` (:func:`compute_estimate` with the method's sequence-length
    factor) plus 2 FLOPs/param/token per no-grad forward of a same-size frozen model (default: the
    method's ``frozen_forwards``); None when the model's size cannot be read (e.g. a synthetic model)."""
    try:
        cfg = read_model_config(spec.model)
    except (ConfigError, OSError):
        return None
    params = estimate_parameters(cfg) if cfg else None
    if not params:
        return None
    frozen = method.frozen_forwards(spec) if frozen_forwards is None else frozen_forwards
    estimate = compute_estimate(spec, params["non_embedding"], length_factor=method.sequence_length_factor(spec))
    return float(estimate["gpu_hours"] * (1 + 2 * frozen / estimate["flops_per_param_token"]))


def training_plan(spec: TrainSpec, data, method, world_size: int | None = None, peak_tflops: float = 989.0,
                  mfu: float = 0.4) -> dict[str, Any]:
    """Everything a run will do, as a JSON-able dict (no weights are loaded)."""
    from harness.encoders.backbone import resolve_model  # lazy (start-up speed): imports torch, tqdm

    path, defaults = resolve_model(spec.model)
    weights = np.asarray(method.dataset_weights(spec, data), dtype=float)
    weights = weights / weights.sum()
    cfg = read_model_config(spec.model)
    params = estimate_parameters(cfg) if cfg else None
    plan: dict[str, Any] = {
        "method": method.name,
        "model": {"name": spec.model, "path": path, "pooling": spec.pooling or defaults.pooling,
                  "parameters": params, "lora": None if spec.lora is None else vars(spec.lora)},
        "steps": spec.steps, "batch_size": spec.batch_size, "grad_accum": spec.grad_accum,
        "sampling": spec.sampling, "negatives": {"hard": spec.n_hard_negatives, "in_batch": spec.in_batch_negatives,
                                                 "cross_batch": spec.cross_batch_negatives},
        "loss": {"similarity": spec.similarity, "temperature": spec.temperature},
        "optimizer": {"lr": spec.lr, "schedule": spec.schedule, "warmup_steps": spec.warmup_steps,
                      "min_lr_ratio": spec.min_lr_ratio, "weight_decay": spec.weight_decay},
        "precision": spec.precision, "gradient_checkpointing": spec.gradient_checkpointing,
        "gradcache_chunk_size": spec.gradcache_chunk_size,
        "datasets": [{"name": s.name, "rows": len(s), "weight": round(float(w), 6), "language": s.language,
                      "task": s.task, "symmetric": s.symmetric}
                     for s, w in zip(data.sources, weights)],
        "spec_fingerprint": spec.fingerprint(), "data_fingerprint": data.fingerprint(),
    }
    head = method.representation_head(spec)
    if head is not None:            # listed only when a method replaces the dense pooling
        plan["model"]["head"] = head.describe()

    episodes = sorted(method.episode_steps(spec))
    if episodes:
        plan["episodes"] = {"before_steps": episodes}
    if world_size:
        plan["queries_per_process_per_micro_batch"] = spec.micro_batch_size(world_size)
    if params:
        plan["compute"] = compute_estimate(spec, params["non_embedding"], peak_tflops, mfu,
                                           method.sequence_length_factor(spec))
    return plan
