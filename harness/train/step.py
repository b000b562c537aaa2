"""One micro-batch: encode, per-sample losses, method hooks, backward — with or without GradCache.

Gradient cache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size
under Memory Limited Setup"), implemented here:

1. encode every chunk of queries and passages *without* a graph, recording the RNG
   state before each chunk;
2. compute the loss from the concatenated embeddings (leaf tensors), backward to
   get the gradient of the loss w.r.t. each embedding;
3. re-encode each chunk *with* a graph after restoring its RNG state (so dropout
   masks are the ones of step 1) and backpropagate the cached embedding gradients
   (``emb.backward(grad)``): the parameter gradients add up to the full-batch ones.

Peak memory then holds one chunk's activations instead of the whole batch's.
Under DDP only the very last backward of an optimizer step synchronises gradients.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from harness.train.context import LossOutput, TrainContext
from harness.train.losses import candidate_info_nce


@dataclass
class RandState:
    """CPU (and current CUDA device) RNG state, to replay dropout exactly."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None
    device: torch.device

    @classmethod
    def capture(cls, device: torch.device) -> "RandState":
        cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        return cls(torch.get_rng_state(), cuda, device)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


def split_features(features: dict[str, torch.Tensor], chunk_size: int | None) -> list[dict[str, torch.Tensor]]:
    n = next(iter(features.values())).shape[0]
    size = n if not chunk_size else chunk_size
    return [{k: v[i:i + size] for k, v in features.items()} for i in range(0, n, size)]


def _to(features: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    from harness.train.model import model_features

    return {k: v.to(device) for k, v in model_features(features).items()}


def encode_chunks(model: torch.nn.Module, features: dict[str, torch.Tensor], chunk_size: int | None,
                  device: torch.device, *, grad: bool, autocast: Callable[[], Any] | None = None
                  ) -> tuple[torch.Tensor, list[RandState]]:
    """Embeddings of all rows, encoded ``chunk_size`` rows at a time; returns the RNG state before each chunk."""
    embs, states = [], []
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        for chunk in split_features(features, chunk_size):
            states.append(RandState.capture(device))
            with (autocast() if autocast else contextlib.nullcontext()):
                embs.append(model(**_to(chunk, device)))
    return torch.cat(embs, dim=0), states


@dataclass
class MicroResult:
    loss: float                 # the method's scalar loss (before division by grad_accum)
    mean_sample_loss: float     # plain mean of the per-sample InfoNCE losses
    output: LossOutput


def run_micro_batch(model: torch.nn.Module, ctx: TrainContext, method, *, backward: Callable[[torch.Tensor], None],
                    sync: Callable[[bool], Any], step_weights: Callable[[], None], gradcache_chunk: int | None,
                    forward_chunk: int | None = None, loss_scale: Callable[[torch.Tensor], torch.Tensor] | None = None
                    ) -> MicroResult:
    """Forward, hooks, loss and backward of the current micro-batch ``ctx.batch``.

    ``backward(loss)`` backpropagates a scalar (accelerator.backward), ``sync(last)``
    is a context manager that suppresses DDP gradient sync unless ``last``,
    ``step_weights()`` steps the weight optimizers (called on the boundary, after
    ``observe`` and before ``reduce``), ``loss_scale`` scales a loss for fp16.
    Without the gradient cache, ``forward_chunk`` encodes in chunks with the graph
    kept (same numbers as one forward; used to compare with the cache under dropout).
    """
    batch, device = ctx.batch, ctx.device
    q_feats, p_feats = batch.features["query"], batch.features["passage"]
    group_ids = torch.as_tensor(batch.group_ids, device=device)
    divisor = ctx.spec.grad_accum
    final_sync = ctx.is_boundary
    ctx.gradcache = gradcache_chunk is not None

    def loss_of(q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, LossOutput]:
        cand = ctx.candidates(q, p)
        losses = candidate_info_nce(cand.sim, cand.allowed, cand.targets, ctx.spec.temperature)
        out = LossOutput(losses, group_ids, q, p, batch, cand)
        method.observe(out, ctx)
        if ctx.is_boundary:
            step_weights()
        return method.reduce(out, ctx), out

    if gradcache_chunk is None:
        with sync(final_sync):
            q, _ = encode_chunks(model, q_feats, forward_chunk, device, grad=True, autocast=ctx.autocast)
            p, _ = encode_chunks(model, p_feats, forward_chunk, device, grad=True, autocast=ctx.autocast)
            loss, out = loss_of(q, p)
            backward(loss / divisor)
        return MicroResult(float(loss.detach()), float(out.losses.detach().mean()), out)

    # 1. embeddings without graph, remembering the RNG state of each chunk
    q_cached, q_states = encode_chunks(model, q_feats, gradcache_chunk, device, grad=False, autocast=ctx.autocast)
    p_cached, p_states = encode_chunks(model, p_feats, gradcache_chunk, device, grad=False, autocast=ctx.autocast)
    q_leaf = q_cached.detach().float().requires_grad_(True)
    p_leaf = p_cached.detach().float().requires_grad_(True)
    # 2. loss and its gradient w.r.t. the embeddings
    loss, out = loss_of(q_leaf, p_leaf)
    scaled = loss / divisor
    if loss_scale is not None:
        scaled = loss_scale(scaled)
    q_grad, p_grad = torch.autograd.grad(scaled, [q_leaf, p_leaf], allow_unused=True)
    q_grad = torch.zeros_like(q_leaf) if q_grad is None else q_grad
    p_grad = torch.zeros_like(p_leaf) if p_grad is None else p_grad
    # 3. re-encode chunk by chunk with the same RNG, backpropagate the cached gradients
    jobs = [(c, s, g) for c, s, g in zip(split_features(q_feats, gradcache_chunk), q_states,
                                         q_grad.split(gradcache_chunk))]
    jobs += [(c, s, g) for c, s, g in zip(split_features(p_feats, gradcache_chunk), p_states,
                                          p_grad.split(gradcache_chunk))]
    rng_after = RandState.capture(device)
    for i, (chunk, state, grad) in enumerate(jobs):
        with sync(final_sync and i == len(jobs) - 1):
            state.restore()
            with (ctx.autocast() if ctx.autocast else contextlib.nullcontext()):
                emb = model(**_to(chunk, device))
            emb.backward(gradient=grad.to(emb.dtype))
    rng_after.restore()   # leave the RNG where a single pass would have left it
    return MicroResult(float(loss.detach()), float(out.losses.detach().mean()), out)
