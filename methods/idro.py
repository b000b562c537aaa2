"""iDRO: implicit DRO over query clusters (paper 001, METHODS.md 2.2).

Public kernel: :func:`idro_step` (oracles I1-I3, in :mod:`methods.dro_kernels`).  The method
``idro`` fine-tunes with cluster weights over K-means query clusters recomputed at each episode
(:mod:`methods.clusters`).  Per micro-batch, on each rank:

1. per-sample losses (the code's triplet softmax, or the trainer's InfoNCE) and cluster means
   of the local samples (absent clusters 0);
2. per-cluster gradients of the cluster means on the chosen parameters (the last 3 blocks by
   default) via ``ctx.group_gradients``, **summed over ranks** (all-reduce), as the code does;
3. ``idro_step``: the robust loss that is backpropagated (code: previous weights times the
   cluster means, h⁰ = ones; paper: alpha * new omega * losses) and the new weights.

``idro_step`` uses the gradients G only through ``G Gᵀ`` (row norms and cosines in code mode, raw dots
in paper mode).  On one process with a separable loss, :meth:`~methods.dro_grads.SeparableClusterGradients.gram`
gives that K x K matrix without forming the (K, P) G, and ``idro_step`` receives a K x K factor F with
``F Fᵀ = G Gᵀ`` (:func:`gram_factor`): the same weights and loss up to rounding (tested), at a cost that
barely grows with K.  Over several ranks the (K, P) G is formed and all-reduced, as the released code.

Losses and presence are local, only the gradients are all-reduced, so in ``code`` mode the
weights can differ across ranks (as in the released code; each rank checkpoints its own).
The weights carry over a re-clustering (cluster indices are not matched across episodes); under
``episode_lr: restart`` each later ANCE episode starts them afresh, as each round of the released
driver does (ANCE/model/models.py builds the DRO loss after loading the previous round's checkpoint).

Options (besides the clustering ones of :mod:`methods.clusters`): ``mode`` (``code``/``paper``/
``paper-appendix``: Eq. 10's or Appendix E's r_ij),
``beta`` 0.25, ``rho`` 0.05, ``ema`` 0.1, ``eps`` 0.01, ``tau`` (paper mode; required there:
about 1000 matches the code's update for K = 50, METHODS.md 2.2), ``cluster_grads`` (``auto``: one
partial backward for every cluster when the per-sample loss separates, :mod:`methods.dro_grads`;
``backward``: one partial backward per present cluster, ``ctx.group_gradients``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from harness.errors import ConfigError
from harness.method import register_method
from harness.recipe import option
from harness.train.api import TrainBatch
from methods.clusters import ClusterDRO, ClusterDROOptions
from methods.dro_grads import SeparableClusterGradients
from methods.dro_kernels import IDRO_MODES, idro_step

if TYPE_CHECKING:
    from harness.train.api import LossOutput, TrainContext

__all__ = ["IDRO_MODES", "IDRO", "gram_factor", "idro_step"]
CLUSTER_GRADS = ("auto", "backward")
_IDRO_LOSS = "OpenMatch/COCO-DR ANCE/model/dro_loss.py iDROLoss"


@dataclass(frozen=True)
class IDROOptions(ClusterDROOptions):
    """iDRO's options: the clustering ones and the weight update's constants."""

    mode: str = option("code", doc="weight update as released (code: cosines, previous weights in the loss) or as "
                                   "the paper writes it (paper: Eq. 10, raw gradients, 1/tau; paper-appendix: "
                                   "Appendix E's r_ij with the normalised alpha)", choices=IDRO_MODES,
                       source="METHODS.md 2.2 choice: the released code is what produced the paper's numbers")
    beta: float = option(0.25, doc="loss power: r_ij = (l_i l_j)^beta * gradient similarity",
                         source="paper 001 (beta 0.25) / OpenMatch/COCO-DR ANCE/README.md (alpha 0.25)")
    rho: float = option(0.05, doc="code mode: step of e_i = rho * mean_j r_ij", bounds="[0, inf)",
                        source="OpenMatch/COCO-DR ANCE/README.md (rho 0.05)")
    ema: float = option(0.1, doc="code mode: power of the previous weights, h = h^ema * exp(e)", bounds="[0, 1]",
                        source="OpenMatch/COCO-DR ANCE/README.md (ema 0.1)")
    eps: float = option(0.01, doc="code mode: floor of a cluster's weight after normalisation", bounds="[0, inf)",
                        source="OpenMatch/COCO-DR ANCE/README.md (eps 0.01)")
    tau: float | None = option(None, doc="paper mode: temperature (required there; about 1000 matches the code's "
                                         "update for K = 50)",
                               source="harness default: none; paper 001 gives no value (METHODS.md 2.2)")
    cluster_grads: str = option("auto", doc="auto: one partial backward for every cluster when the loss separates "
                                            "per sample; backward: one per present cluster", choices=CLUSTER_GRADS,
                                source="harness default: the fast path, equal up to rounding (tested)")


def gram_factor(gram: torch.Tensor) -> torch.Tensor:
    """A (K, K) matrix F with ``F Fᵀ = gram`` (a symmetric PSD Gram matrix ``G Gᵀ``), whose rows stand in for
    the rows of G in :func:`idro_step`: same norms, same pairwise dots.  Rows of zero gradients (absent
    clusters) stay exactly zero, as G's."""
    gram = gram.to(torch.float64)
    if not bool(torch.isfinite(gram).all()):       # a non-finite loss: NaN weights, as from the (K, P) gradients
        return torch.full_like(gram, float("nan"))
    values, vectors = torch.linalg.eigh(gram)
    factor = vectors * values.clamp(min=0).sqrt()
    return torch.where((gram.diagonal() > 0).unsqueeze(1), factor, torch.zeros_like(factor))


@register_method("idro")
class IDRO(ClusterDRO):
    """Implicit DRO over K-means query clusters (COCO-DR fine-tuning)."""

    description = "iDRO: implicit DRO over query clusters, code or paper update (COCO-DR, paper 001)"
    Options = IDROOptions

    def init_weights(self, ctx: TrainContext) -> None:
        if ctx.options["mode"] != "code" and not (ctx.options["tau"] and float(ctx.options["tau"]) > 0):
            raise ConfigError("method 'idro': mode paper needs a temperature tau > 0 (option tau)")
        self.params = self.cluster_params(ctx)
        # One partial backward for all clusters when the loss separates per sample (methods.dro_grads).
        self.fast = None
        if ctx.options["cluster_grads"] == "auto" and ctx.options["loss"] == "triplet":
            self.fast = SeparableClusterGradients(ctx.model, self.params)
        # The code starts from ones (so its first loss is the sum of cluster means); the paper from uniform.
        start = 1.0 if ctx.options["mode"] == "code" else 1.0 / self.k
        self.weights = torch.full((self.k,), start, dtype=torch.float64, device=ctx.device)

    def cluster_gradients(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        """(K, P) gradients of this rank's cluster-mean losses, summed over ranks, or on one process a (K, K)
        factor of their Gram matrix (all ``idro_step`` needs): one partial backward for all clusters when the
        loss separates per sample (``cluster_grads: auto``), else one per present cluster."""
        batch = ctx.batch
        if self.fast is not None and isinstance(batch, TrainBatch) and not ctx.gradcache \
                and list(batch.views) == ["query", "passage"]:
            views = [1, batch.passages_per_query]
            if ctx.world_size == 1:
                gram = self.fast.gram(out.losses.sum(), out.group_ids, views, self.k)
                if gram is not None:
                    return gram_factor(gram)
            else:
                fast = self.fast.gradients(out.losses.sum(), out.group_ids, views, self.k)
                if fast is not None:
                    return ctx.all_reduce_sum(fast)
        size = sum(p.numel() for p in self.params)
        grads = torch.zeros(self.k, size, dtype=torch.float32, device=out.losses.device)
        for cluster, grad in ctx.group_gradients(out.losses, out.group_ids, self.params).items():
            grads[cluster] = grad.float()
        return ctx.all_reduce_sum(grads)

    def robust_loss(self, out: LossOutput, means: torch.Tensor, counts: torch.Tensor, present: torch.Tensor,
                    ctx: TrainContext) -> torch.Tensor:
        grads = self.cluster_gradients(out, ctx)
        opts = ctx.options
        tau = float(opts["tau"]) if opts["tau"] else None
        loss, self.weights = idro_step(self.weights, means, grads, present, mode=opts["mode"],
                                       beta=float(opts["beta"]), rho=float(opts["rho"]), ema=float(opts["ema"]),
                                       eps=float(opts["eps"]), tau=tau)
        return loss.to(out.losses.dtype)
