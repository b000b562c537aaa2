"""A method that changes only the per-sample loss: debiased contrastive loss (Chuang et al., 2020).

With logits ``s = sim / t``, the positive ``s+`` and the N negatives ``s-_j`` of a query
(its InfoNCE candidates under the spec: hard, in-batch, cross-batch), and the class
prior ``tau_plus`` (the chance that a "negative" is in fact a positive)::

    Ng = max((sum_j exp(s-_j) - N * tau_plus * exp(s+)) / (1 - tau_plus),  N * exp(-1 / t))
    l  = -log(exp(s+) / (exp(s+) + Ng))

``tau_plus = 0`` is InfoNCE on cosine scores.  Computed shifted by the row maximum, so
small temperatures do not overflow.  :class:`DebiasedTdro` composes it with tDRO's
loss reweighting (stage 2, ``transfer: loss``) by inheritance alone.
"""
from __future__ import annotations

import torch

from harness.errors import ConfigError
from harness.method import Method
from methods.tdro import Tdro


def debiased_losses(sim: torch.Tensor, allowed: torch.Tensor, targets: torch.Tensor, temperature: float,
                    tau_plus: float) -> torch.Tensor:
    """Per-query debiased contrastive loss from the InfoNCE candidates (``ctx.candidates``)."""
    logits = sim / temperature
    rows = torch.arange(len(targets), device=sim.device)
    negative = allowed.clone()
    negative[rows, targets] = False
    top = logits.masked_fill(~allowed, float("-inf")).amax(dim=1, keepdim=True).detach()
    pos = logits[rows, targets] - top.squeeze(1)
    neg_exp = torch.exp(logits - top).masked_fill(~negative, 0.0).sum(dim=1)
    n = negative.sum(dim=1).to(logits.dtype)
    ng = (neg_exp - n * tau_plus * torch.exp(pos)) / (1.0 - tau_plus)
    ng = torch.maximum(ng, n * torch.exp(-1.0 / temperature - top.squeeze(1)))
    return torch.log(torch.exp(pos) + ng) - pos


class Debiased(Method):
    """InfoNCE's candidates with the debiased negative term; everything else is the default trainer."""

    name = "test-debiased"
    default_options = {"tau_plus": 0.1}

    def configure(self, ctx) -> None:
        super().configure(ctx)
        self.tau_plus = float(ctx.options["tau_plus"])
        if not 0.0 <= self.tau_plus < 1.0:
            raise ConfigError(f"method {self.name}: tau_plus must be in [0, 1), got {self.tau_plus}")

    def losses(self, encoded, ctx):
        cand = ctx.candidates(encoded["query"], encoded["passage"])
        encoded.candidates = cand
        losses = debiased_losses(cand.sim, cand.allowed, cand.targets, ctx.spec.temperature, self.tau_plus)
        return losses, ctx.batch_group_ids()


class DebiasedTdro(Debiased, Tdro):
    """tDRO stage 2 (learned weights as loss multipliers k * alpha_g) on the debiased per-sample loss."""

    name = "test-debiased-tdro"
    default_options = {**Tdro.default_options, **Debiased.default_options}
