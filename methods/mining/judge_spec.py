"""Judge specs for ``harness mine --judge``: ``none``, ``stand-in``, ``transformers:<model>`` (a folder,
a ``.gguf`` file, a hub id or ``smollm2``), ``openai:<base url>#<model>`` and ``vllm:<model>`` (a local GPU
with the vllm package; refused otherwise)."""
from __future__ import annotations

from typing import Any

from harness.errors import ConfigError
from methods.mining.judge import Judge, StandInJudge
from methods.mining.judge_hf import TransformersJudge
from methods.mining.judge_openai import OpenAIJudge
from methods.mining.judge_vllm import VLLMJudge

JUDGE_SPECS = "none | stand-in | transformers:<model> | openai:<base url>#<model> | vllm:<model>"


def make_judge(spec: str, **options: Any) -> Judge | None:
    """The judge a spec names (``None`` for ``none``).  ``options`` go to the backend: ``mode``,
    ``max_new_tokens``, ``batch_size`` (transformers); ``max_tokens``, ``rate``, ``workers``,
    ``retries``, ``timeout`` (openai).  Unknown specs raise :class:`ConfigError`."""
    spec = (spec or "").strip()
    kind, _, rest = spec.partition(":")
    if spec == "none":
        return None
    if spec == "stand-in":
        return StandInJudge()
    if kind == "transformers" and rest:
        hf_keys = ("mode", "max_new_tokens", "batch_size")
        return TransformersJudge(rest, **{k: v for k, v in options.items() if k in hf_keys and v is not None})
    if kind == "openai" and rest:
        url, sep, model = rest.rpartition("#")
        if not sep or not url or not model:
            raise ConfigError(f"openai judge spec must be openai:<base url>#<model>, got {spec!r}")

        http_keys = ("max_tokens", "rate", "workers", "retries", "timeout")
        return OpenAIJudge(url, model, **{k: v for k, v in options.items() if k in http_keys and v is not None})
    if kind == "vllm" and rest:
        vllm_keys = ("max_tokens", "tensor_parallel_size", "max_model_len", "dtype")
        return VLLMJudge(rest, **{k: v for k, v in options.items() if k in vllm_keys and v is not None})
    raise ConfigError(f"unknown judge {spec!r}; expected {JUDGE_SPECS}")
