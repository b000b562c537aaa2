"""A fast CPU inference path: dynamic int8 quantisation of a backbone's linear layers.

Decision (why ``torch.ao`` and not ONNX Runtime through ``optimum``): the issue asks for ONNX
Runtime via ``optimum`` when it installs beside the pinned stack.  It does not: the ONNX
exporter of Optimum 2.x lives in ``optimum-onnx`` (0.1.0, the only release), which requires
``transformers<4.58`` while the harness runs transformers 5.x (``pip install --dry-run -c
constraints.txt "optimum-onnx[onnxruntime]"`` resolves to a transformers downgrade to 4.57.6,
which would move every model the harness loads).  sentence-transformers' ONNX backend imports
the same ``optimum`` exporter, so it is not available either.  The fallback named in the issue is
used instead: ``torch.ao.quantization.quantize_dynamic`` on every ``nn.Linear`` (weights int8
per output channel, activations quantised per batch at run time, x86/fbgemm kernels), which needs no
new dependency, keeps the tokenizer, pooling and padding code of the fp32 path, and applies to
any transformers backbone.  Embeddings change (it is a different model numerically), so the
backend is part of the encoder identity (embedding-cache key, manifest) and of the protocol
card written by ``harness eval``; the quality guard test measures the nDCG@10 difference on
SciFact.  Per-channel weight scales matter: with one scale per tensor, MiniLM's embeddings of 32
SciFact passages kept a mean cosine of 0.919 to fp32 (min 0.878); per channel 0.982 (min 0.973).
Measured on SciFact test with MiniLM: nDCG@10 0.6451 -> 0.6455, R@100 0.9250 -> 0.9183, and 1.57x
the fp32 path's encoding speed on CPU (tests/speed/test_encoding_int8_speed.py).

``torch.ao.quantization`` is deprecated upstream in favour of ``torchao`` (a separate package);
the deprecation warnings are silenced here, and :func:`quantize_int8` raises a ConfigError
naming the problem if a future torch drops the function.
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from harness.errors import ConfigError

BACKENDS = ("torch", "int8")
INT8_IDENTITY = "int8-dynamic-per-channel-torch.ao"   # recorded in identities and cards (what produced the numbers)


def check_backend(backend: str, device: torch.device, dtype: torch.dtype) -> str:
    """Validate a backend name against the device and dtype it would run with."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown encoder backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "int8":
        if device.type != "cpu":
            raise ConfigError(f"backend 'int8' (dynamic int8 quantisation) runs on CPU only, not {device.type}; "
                              "use --dtype bf16/fp16 on a GPU")
        if dtype != torch.float32:
            raise ConfigError("backend 'int8' quantises an fp32 model; leave --dtype at fp32 (or auto on CPU)")
    return backend


def quantize_int8(model: nn.Module) -> tuple[nn.Module, int]:
    """``(model with every nn.Linear replaced by a dynamic int8 linear, number replaced)``."""
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as exc:       # pragma: no cover - depends on the torch build
        raise ConfigError(f"this torch build has no torch.ao.quantization.quantize_dynamic ({exc}); "
                          "backend 'int8' is unavailable") from None
    count = sum(isinstance(m, nn.Linear) for m in model.modules())
    if count == 0:
        raise ConfigError("the model has no linear layers to quantise; backend 'int8' does not apply")
    engines = torch.backends.quantized.supported_engines
    engine = "x86" if "x86" in engines else "fbgemm" if "fbgemm" in engines else engines[0]
    torch.backends.quantized.engine = engine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # torch.ao deprecation notices (see the module docstring)
        quantized = quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    return quantized, count
