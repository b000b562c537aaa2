"""vLLM as the false-negative judge (and generator): offline batched inference on a local GPU.

``vllm:<model>`` (a hub id or folder, e.g. ``meta-llama/Llama-3.1-70B-Instruct`` with
``tensor_parallel_size`` GPUs).  Every call becomes one chat request with the sampling's temperature
and top_p, ``max_tokens`` and the per-call seed (vLLM's per-request seed makes sampled answers
reproducible); a batch of calls is one ``LLM.chat`` call.  :func:`request_plan` builds those requests
without vLLM, so what would be asked can be inspected (and tested) on a CPU machine.

vLLM is not a dependency of the project (it needs a CUDA GPU and pins its own torch): install it in
the environment where the judge runs.  Without it, or without a GPU, the judge is refused with a
clear message before anything is asked; an OpenAI-compatible ``vllm serve`` endpoint is reached
through the ``openai:`` judge instead.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from harness.errors import ConfigError
from methods.mining.judge import PromptJudge, Reply, Sampling


def request_plan(prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int], *,
                 max_tokens: int = 8) -> list[dict[str, Any]]:
    """The chat requests (messages and sampling parameters) vLLM is asked, one per prompt."""
    if len(prompts) != len(seeds):
        raise ConfigError(f"{len(prompts)} prompts but {len(seeds)} seeds")
    return [{"messages": [{"role": "user", "content": p}], "temperature": sampling.temperature,
             "top_p": sampling.top_p, "max_tokens": max_tokens, "seed": int(s) % (2**31)}
            for p, s in zip(prompts, seeds)]


def vllm_available() -> str | None:
    """None when vLLM can run here, else why not."""
    if importlib.util.find_spec("vllm") is None:
        return "the vllm package is not installed (pip install vllm, on a machine with a CUDA GPU)"
    import torch

    if not torch.cuda.is_available():
        return "vLLM needs a CUDA GPU and none is visible (torch.cuda.is_available() is False)"
    return None


class VLLMJudge(PromptJudge):
    def __init__(self, model: str, *, max_tokens: int = 8, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, dtype: str = "auto", engine: Any = None):
        if not model:
            raise ConfigError("the vllm judge needs a model (vllm:<model>)")
        if max_tokens < 1 or tensor_parallel_size < 1:
            raise ConfigError("vllm judge: max_tokens and tensor_parallel_size must be >= 1")
        self.model_name, self.max_tokens, self.tp, self.dtype = model, max_tokens, tensor_parallel_size, dtype
        if engine is None:
            why = vllm_available()
            if why is not None:
                raise ConfigError(f"judge vllm:{model} refused: {why}; use transformers:<model> on a CPU or "
                                  "openai:<url>#<model> for a served model")
            from vllm import LLM  # type: ignore[import-not-found]  # optional, GPU only

            kw: dict[str, Any] = {"tensor_parallel_size": tensor_parallel_size, "dtype": dtype}
            if max_model_len:
                kw["max_model_len"] = max_model_len
            engine = LLM(model=model, **kw)
        self.engine = engine

    def identity(self) -> dict[str, Any]:
        # The model name stands for the weights (pin a revision or a local folder for reproducibility).
        return {"backend": "vllm", "model": self.model_name, "max_tokens": self.max_tokens, "dtype": self.dtype}

    def complete(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        plan = request_plan(prompts, sampling, seeds, max_tokens=self.max_tokens)
        from vllm import SamplingParams

        params = [SamplingParams(temperature=r["temperature"], top_p=r["top_p"], max_tokens=r["max_tokens"],
                                 seed=r["seed"]) for r in plan]
        try:
            outputs = self.engine.chat([r["messages"] for r in plan], sampling_params=params, use_tqdm=False)
        except Exception as exc:   # one failed batch: its calls become vote -1 (asked again by a rerun)
            return [Reply(-1, error=f"vLLM {type(exc).__name__}: {exc}") for _ in plan]
        return [Reply(-1, text=o.outputs[0].text if o.outputs else "") for o in outputs]
