"""GroupDRO on query clusters (COCO-DR appendix F, METHODS.md 2.3).

Public kernels: :func:`sagawa_step` (oracle G1) and :func:`greedy_cvar_weights` (oracle G2), in
:mod:`methods.dro_kernels`.  The method ``groupdro`` uses the clusters of :mod:`methods.clusters`
(the same K-means as iDRO) and one of two rules (option ``variant``):

``sagawa`` (default; Sagawa et al. 2020, kohpangwei/group_DRO)
    q ← q·exp(eta·L̄) renormalised, robust loss Σ q_g·L̄_g with the *updated* q; optional size
    adjustment ``adjustment`` C: L̄_g + C/√n_g with n_g the cluster's number of training queries
    (applied when C > 0).  The q update uses the group means of the whole global batch
    (all-reduced sums and counts, so every rank keeps the same q); the loss uses this rank's means.
``greedy`` (COCO-DR's released "GroupDRO", ``DROGreedyLoss``)
    robust loss Σ h_g·(sum of the losses of g)/B with the previous h (h⁰ = ones); then, from the
    global batch, the loss EMA of present groups and the count EMA (initialised to ones), and the
    greedy CVaR weights with ``alpha`` (0.2) and ``eps`` (0.01).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from harness.method import register_method
from harness.recipe import option
from methods.clusters import ClusterDRO, ClusterDROOptions
from methods.dro_kernels import greedy_cvar_weights, greedy_ema_update, greedy_robust_loss, sagawa_step

if TYPE_CHECKING:
    from harness.train.api import LossOutput, TrainContext

__all__ = ["GroupDRO", "greedy_cvar_weights", "greedy_ema_update", "greedy_robust_loss", "sagawa_step"]
VARIANTS = ("sagawa", "greedy")
_GREEDY = "OpenMatch/COCO-DR ANCE/model/dro_loss.py DROGreedyLoss"


@dataclass(frozen=True)
class GroupDROOptions(ClusterDROOptions):
    """GroupDRO's options: the clustering ones and the rule with its step sizes."""

    variant: str = option("sagawa", doc="update rule: Sagawa's exponentiated gradient or COCO-DR's greedy CVaR",
                          choices=VARIANTS, source="METHODS.md 2.3 recommendation (Sagawa et al. 2020 is what paper "
                                                   "001 appendix F names)")
    eta: float = option(0.01, doc="sagawa: step size of q <- q * exp(eta * L)", bounds="[0, inf)",
                        source="kohpangwei/group_DRO loss.py, run_expt.py (step size 0.01; METHODS.md 2.3)")
    adjustment: float = option(0.0, doc="sagawa: size adjustment C (L_g + C / sqrt(n_g)); 0: none",
                               source="harness default: off (optional in kohpangwei/group_DRO loss.py)")
    alpha: float = option(0.2, doc="greedy: CVaR fraction of the worst groups", bounds="(0, 1]",
                          source="METHODS.md 2.3: the group_DRO greedy default (paper 001 gives none)")
    eps: float = option(0.01, doc="greedy: floor of a group's weight", bounds="[0, inf)",
                        source=_GREEDY + " (eps 0.01)")
    ema: float = option(0.1, doc="greedy: EMA rate of the group losses and counts", bounds="[0, 1]",
                        source=_GREEDY + " (ema 0.1)")


@register_method("groupdro")
class GroupDRO(ClusterDRO):
    """GroupDRO over K-means query clusters: Sagawa's exponentiated gradient or COCO-DR's greedy CVaR."""

    description = "GroupDRO over query clusters: sagawa (EG) or greedy (COCO-DR's CVaR rule)"
    Options = GroupDROOptions

    def init_weights(self, ctx: TrainContext) -> None:
        sagawa = ctx.options["variant"] == "sagawa"
        self.weights = torch.full((self.k,), 1.0 / self.k if sagawa else 1.0, dtype=torch.float64, device=ctx.device)
        self.ema_losses = torch.zeros(self.k, dtype=torch.float64, device=ctx.device)
        self.ema_counts = torch.ones(self.k, dtype=torch.float64, device=ctx.device)

    def _global_stats(self, out: LossOutput, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        ids = out.group_ids
        sums = torch.zeros(self.k, dtype=torch.float64, device=ids.device).index_add(
            0, ids, out.losses.detach().to(torch.float64))
        counts = torch.bincount(ids, minlength=self.k).to(torch.float64)
        sums, counts = ctx.all_reduce_sum(sums), ctx.all_reduce_sum(counts)
        return sums / counts.clamp(min=1), counts

    def _adjustment(self, c: float) -> torch.Tensor | None:
        """C / sqrt(n_g) with n_g the training queries of cluster g (None when C <= 0: no adjustment)."""
        if c <= 0:
            return None
        sizes = torch.bincount(torch.from_numpy(self.assignment), minlength=self.k).to(torch.float64)
        return (c / sizes.clamp(min=1).sqrt()).to(self.weights.device)

    def robust_loss(self, out: LossOutput, means: torch.Tensor, counts: torch.Tensor, present: torch.Tensor,
                    ctx: TrainContext) -> torch.Tensor:
        opts = ctx.options
        g_means, g_counts = self._global_stats(out, ctx)
        if opts["variant"] == "sagawa":
            adj = self._adjustment(float(opts["adjustment"]))
            _, self.weights = sagawa_step(self.weights, g_means, float(opts["eta"]), g_counts > 0, adj)
            means = torch.where(present, means, torch.zeros_like(means))   # as the kernel: absent groups 0
            if adj is not None:
                means = means + adj.to(means.dtype)
            return (self.weights.to(means.dtype) * means).sum()
        loss = greedy_robust_loss(self.weights, out.losses, out.group_ids)
        self.ema_losses, self.ema_counts = greedy_ema_update(self.ema_losses, self.ema_counts, g_means, g_counts,
                                                             float(opts["ema"]))
        self.weights = greedy_cvar_weights(self.ema_losses, self.ema_counts / self.ema_counts.sum(),
                                           float(opts["alpha"]), float(opts["eps"])).to(self.weights.device)
        return loss

    def extra_state(self) -> dict[str, Any]:
        return {"ema_losses": self.ema_losses.cpu().clone(), "ema_counts": self.ema_counts.cpu().clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.ema_losses = state["ema_losses"].clone().to(self.device)
        self.ema_counts = state["ema_counts"].clone().to(self.device)
