"""One micro-batch: encode its views, the method's per-sample losses, hooks, backward — with or
without GradCache.

The micro-batch (``ctx.batch``, default or built by the method) has named tokenized
views; each is encoded through the model's representation head, in order, and the
method's ``losses(encoded, ctx)`` turns the representations into per-sample losses and
group ids (default: InfoNCE with HN/IBN/CBN).  ``observe``, the weight optimizers and
``reduce`` then see the same per-sample vector whatever the loss.

Gradient cache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size
under Memory Limited Setup"), implemented here:

1. encode every chunk of every view *without* a graph, recording the RNG state
   before each chunk;
2. compute the loss from the concatenated representations (leaf tensors), backward
   to get the gradient of the loss w.r.t. each representation (the method's loss must
   therefore be a function of the encoded views alone);
3. re-encode each chunk *with* a graph after restoring its RNG state (so dropout
   masks are the ones of step 1) and backpropagate the cached embedding gradients
   (``emb.backward(grad)``): the parameter gradients add up to the full-batch ones.

Peak memory then holds one chunk's activations instead of the whole batch's.
Under DDP only the very last backward of an optimizer step synchronises gradients.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from harness.errors import ConfigError
from harness.train.context import EncodedBatch, LossOutput, TrainContext
from harness.train.encoding import RandState, encode_chunks, split_features, to_device

if TYPE_CHECKING:
    from harness.method import Method


@dataclass
class MicroResult:
    loss: float                 # the method's scalar loss (before division by grad_accum)
    mean_sample_loss: float     # plain mean of the per-sample losses
    output: LossOutput


def checked_losses(method: Method, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
    """The method's ``losses``, refused unless they are one loss and one group id per sample."""
    losses, group_ids = method.losses(encoded, ctx)
    if losses.dim() != 1 or group_ids.shape != losses.shape:
        raise ConfigError(f"method {method.name!r}: losses() must return per-sample losses (N,) and group ids (N,); "
                          f"got {tuple(losses.shape)} and {tuple(group_ids.shape)}")
    return losses, group_ids.long()


def run_micro_batch(model: torch.nn.Module, ctx: TrainContext, method: Method, *,
                    backward: Callable[[torch.Tensor], None], sync: Callable[[bool], Any],
                    step_weights: Callable[[], None], gradcache_chunk: int | None, forward_chunk: int | None = None,
                    loss_scale: Callable[[torch.Tensor], torch.Tensor] | None = None) -> MicroResult:
    """Forward, hooks, loss and backward of the current micro-batch ``ctx.batch``.

    ``backward(loss)`` backpropagates a scalar (accelerator.backward), ``sync(last)``
    is a context manager that suppresses DDP gradient sync unless ``last``,
    ``step_weights()`` steps the weight optimizers (called on the boundary, after
    ``observe`` and before ``reduce``), ``loss_scale`` scales a loss for fp16.
    Without the gradient cache, ``forward_chunk`` encodes in chunks with the graph
    kept (same numbers as one forward; used to compare with the cache under dropout).
    """
    batch, device = ctx.batch, ctx.device
    if batch is None:
        raise ConfigError("run_micro_batch needs ctx.batch (the tokenized micro-batch)")
    views = batch.views
    divisor = ctx.spec.grad_accum
    final_sync = ctx.is_boundary
    ctx.gradcache = gradcache_chunk is not None

    def loss_of(reps: dict[str, torch.Tensor]) -> tuple[torch.Tensor, LossOutput]:
        encoded = EncodedBatch(reps)
        losses, group_ids = checked_losses(method, encoded, ctx)
        out = LossOutput(losses, group_ids, encoded, batch)
        method.observe(out, ctx)
        if ctx.is_boundary:
            step_weights()
        return method.reduce(out, ctx), out

    if gradcache_chunk is None:
        with sync(final_sync):
            reps = {name: encode_chunks(model, feats, forward_chunk, device, grad=True, autocast=ctx.autocast)[0]
                    for name, feats in views.items()}
            loss, out = loss_of(reps)
            backward(loss / divisor)
        return MicroResult(float(loss.detach()), float(out.losses.detach().mean()), out)

    # 1. representations without graph, remembering the RNG state of each chunk
    cached = {name: encode_chunks(model, feats, gradcache_chunk, device, grad=False, autocast=ctx.autocast)
              for name, feats in views.items()}
    leaves = {name: emb.detach().float().requires_grad_(True) for name, (emb, _) in cached.items()}
    # 2. loss and its gradient w.r.t. the representations
    loss, out = loss_of(leaves)
    scaled = loss / divisor
    if loss_scale is not None:
        scaled = loss_scale(scaled)
    found = torch.autograd.grad(scaled, list(leaves.values()), allow_unused=True)
    rep_grads = [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves.values(), found)]
    # 3. re-encode chunk by chunk with the same RNG, backpropagate the cached gradients
    jobs = [(chunk, state, g)
            for (name, feats), grad in zip(views.items(), rep_grads)
            for chunk, state, g in zip(split_features(feats, gradcache_chunk), cached[name][1],
                                       grad.split(gradcache_chunk))]
    rng_after = RandState.capture(device)
    for i, (chunk, state, grad) in enumerate(jobs):
        with sync(final_sync and i == len(jobs) - 1):
            state.restore()
            with (ctx.autocast() if ctx.autocast else contextlib.nullcontext()):
                emb = model(**to_device(chunk, device))
            emb.backward(gradient=grad.to(emb.dtype))
    rng_after.restore()   # leave the RNG where a single pass would have left it
    return MicroResult(float(loss.detach()), float(out.losses.detach().mean()), out)
