"""The fine-tuning baseline of paper 001's ablations, on the DRO methods' machinery.

``dro-erm`` trains with the plain mean of the per-sample losses (uniform weights) but shares
everything else with ``idro`` and ``groupdro`` (:class:`methods.clusters.ClusterDRO`): the same
per-sample loss (the code's triplet softmax by default), the same query clusters recomputed at
each episode, ANCE negatives (``ance_refresh_steps``), the ``coco`` option ("+COCO" rows) and the
per-step trace, so its cluster losses and worst-cluster loss are logged like theirs and a
difference between the rows is the reweighting alone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.method import register_method
from methods.clusters import ClusterDRO

if TYPE_CHECKING:
    from harness.train.api import LossOutput, TrainContext


@register_method("dro-erm")
class DroERM(ClusterDRO):
    """Uniform loss over the clustered queries: the baseline row of the COCO-DR ablations."""

    description = "Fine-tuning baseline with the DRO methods' loss, clusters, ANCE negatives and COCO option"

    def init_weights(self, ctx: TrainContext) -> None:
        self.weights = torch.ones(self.k, dtype=torch.float64, device=ctx.device)

    def robust_loss(self, out: LossOutput, means: torch.Tensor, counts: torch.Tensor, present: torch.Tensor,
                    ctx: TrainContext) -> torch.Tensor:
        return out.losses.mean()
