"""Collectives for cross-batch negatives and method statistics.

Two gathers:

* :func:`all_gather_nograd` returns every rank's tensor concatenated, detached.
  Methods use it for global statistics (losses, group ids, embeddings).
* :func:`all_gather_with_grad` does the same in the forward pass, and in the
  backward pass sums the gradient that every rank's loss sends to each slice and
  hands each rank the part for its own tensor.

Why the trainer gathers passages *with* gradient: each rank scores its local
queries against all gathered passages and DDP averages the parameter gradients.
If the gathered passages carried no gradient, the terms in which rank r's queries
push on rank s's passages would be lost, and only the loss (not the gradient)
would equal the single-process global batch.  Summing the slice gradients across
ranks restores exactly the single-process gradient (tested with 2 processes).
The backward uses ``all_reduce`` so it works on every backend (gloo has no
reduce-scatter).
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def all_gather_nograd(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` (same shape on every rank) from all ranks along dim 0, detached."""
    tensor = tensor.detach()
    if not is_distributed():
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        ctx.rank = dist.get_rank()
        ctx.size = tensor.shape[0]
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = ctx.rank * ctx.size
        return grad[start:start + ctx.size]


def all_gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from all ranks; gradients flow back to every rank's slice."""
    if not is_distributed():
        return tensor
    return _GatherWithGrad.apply(tensor)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum of ``tensor`` over ranks (a new tensor; the input is not modified)."""
    out = tensor.detach().clone()
    if is_distributed():
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
