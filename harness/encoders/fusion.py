"""Faster fp32 inference on CPU: linear layers through oneDNN with the bias (and GELU) fused.

On CPU, PyTorch's ``nn.Linear`` runs ``addmm``, which first copies the broadcast bias
into the output and then accumulates the GEMM on top of it; the GELU after a BERT
intermediate layer is one more full pass over a (tokens x 4*hidden) tensor.  For a
small encoder such as MiniLM these memory passes cost about a fifth of the forward
(measured with ``torch.profiler``: ``aten::copy_`` 11%, ``aten::gelu`` 6%).
oneDNN's ``linear_pointwise`` adds the bias and applies GELU inside the GEMM
epilogue instead.  The result is the same fp32 computation up to summation order
(differences around 1e-6 relative), checked against ``F.linear`` before use.

The modules keep their class identity (``isinstance(m, nn.Linear)``), parameters and
state-dict keys; only ``forward`` changes, and anything unusual (autograd, non-fp32,
non-CPU tensors, an op error) falls back to the stock path.  The oneDNN op is a
PyTorch internal (the one TorchInductor emits on CPU), so its presence and its
numbers are probed first and the fusion is skipped when either check fails.
"""
from __future__ import annotations

import functools
import logging
import os

import torch
from torch import nn

log = logging.getLogger(__name__)

# oneDNN (through ideep) keeps each primitive of the fused linear, with its reordered weights and scratch
# buffers, in two caches keyed by the input shape, 1024 entries each by default.  Encoding makes one shape per
# padded batch length, so that memory grew with the number of distinct lengths a corpus produces: with MiniLM
# about 14 MB a shape (+1.8 GB after batches of 64 lengths), with the tiny test BERT 1.8 MB.  Small caches keep
# the recurring shapes (most batches of a shard pad to the same length) and bound the rest.  oneDNN reads these
# when it makes its first primitive, so they are set at import; a value already in the environment wins.
ONEDNN_CACHE_CAPACITY = "16"
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE_CAPACITY)
os.environ.setdefault("LRU_CACHE_CAPACITY", ONEDNN_CACHE_CAPACITY)


@functools.lru_cache(maxsize=1)
def fusion_available() -> bool:
    """True when oneDNN's fused linear exists here and matches ``F.linear`` on a probe."""
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if hasattr(torch.ops, "mkldnn") else None
    if op is None or not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 24, generator=gen)
    w = torch.randn(40, 24, generator=gen)
    b = torch.randn(40, generator=gen)
    try:
        with torch.inference_mode():
            plain = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
            gelu = torch.ops.mkldnn._linear_pointwise(x, w, b, "gelu", [], "none")
            ref = nn.functional.linear(x, w, b)
    except (RuntimeError, TypeError) as exc:
        log.info("oneDNN fused linear unavailable: %s", exc)
        return False
    return bool(torch.allclose(plain, ref, rtol=1e-5, atol=1e-5)
                and torch.allclose(gelu, nn.functional.gelu(ref), rtol=1e-5, atol=1e-5))


class FusedLinear(nn.Linear):
    """``nn.Linear`` whose CPU fp32 inference forward is one oneDNN call (bias and optional GELU fused)."""

    fused_activation: str = "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type == "cpu" and x.dtype == torch.float32 and self.weight.dtype == torch.float32
                and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))):
            try:
                if self.fused_activation == "gelu":
                    return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "gelu", [], "none")
                return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
            except RuntimeError:
                pass
        out = super().forward(x)
        return nn.functional.gelu(out) if self.fused_activation == "gelu" else out


def _is_exact_gelu(module: nn.Module) -> bool:
    if isinstance(module, nn.GELU):
        return module.approximate == "none"
    return getattr(module, "act", None) is nn.functional.gelu  # transformers' GELUActivation (erf form)


def fuse_linear_layers(model: nn.Module) -> dict[str, int]:
    """Switch every ``nn.Linear`` of ``model`` to :class:`FusedLinear`, in place.

    BERT-style intermediate blocks (a ``dense`` linear followed by an exact-GELU
    ``intermediate_act_fn``) get the GELU fused too.  Returns counts of what changed.
    """
    counts = {"linear": 0, "gelu": 0}
    if not fusion_available():
        return counts
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = FusedLinear
            counts["linear"] += 1
    for module in model.modules():
        dense = getattr(module, "dense", None)
        act = getattr(module, "intermediate_act_fn", None)
        if isinstance(dense, FusedLinear) and act is not None and _is_exact_gelu(act):
            dense.fused_activation = "gelu"
            module.intermediate_act_fn = nn.Identity()
            counts["gelu"] += 1
    return counts
