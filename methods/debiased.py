"""Debiased contrastive loss (Chuang et al. 2020, Eq. 6): a loss-only method, wrapped with ``base: debiased``."""
import dataclasses

import torch

from harness.method import Method, register_method
from harness.recipe import option
from methods.uniform import Uniform


def debiased_losses(sim: torch.Tensor, allowed: torch.Tensor, targets: torch.Tensor, temperature: float,
                    tau_plus: float) -> torch.Tensor:
    """Per query, logits s = sim / t: Ng = max((sum_j e^{s-_j} - N tau_plus e^{s+}) / (1 - tau_plus), N e^{-1/t}),
    l = -log(e^{s+} / (e^{s+} + Ng)); tau_plus = 0 is InfoNCE.  Shifted by the row maximum: no overflow."""
    logits, rows = sim / temperature, torch.arange(len(targets), device=sim.device)
    negative = allowed.clone()
    negative[rows, targets] = False
    top = logits.masked_fill(~allowed, float("-inf")).amax(dim=1).detach()
    pos, n = logits[rows, targets] - top, negative.sum(dim=1).to(logits.dtype)
    neg = torch.exp(logits - top[:, None]).masked_fill(~negative, 0.0).sum(dim=1)
    bound = n * torch.exp(-1.0 / temperature - top)
    ng = torch.maximum((neg - n * tau_plus * torch.exp(pos)) / (1.0 - tau_plus), bound)
    return torch.log(torch.exp(pos) + ng) - pos


@dataclasses.dataclass(frozen=True)
class DebiasedOptions:
    tau_plus: float = option(0.1, doc="class prior: the chance that a negative is a positive", bounds="[0, 1)",
                             source="Chuang et al. 2020, Sec. 5 (tau+ = 0.1 on CIFAR10)")


@register_method("debiased")
class Debiased(Method):
    description = "debiased contrastive loss (Chuang et al. 2020) over the InfoNCE candidates, uniform recipe"
    presets, Options = Uniform.presets, DebiasedOptions

    def losses(self, encoded, ctx):
        encoded.candidates = cand = ctx.candidates(encoded["query"], encoded["passage"])
        return debiased_losses(cand.sim, cand.allowed, cand.targets, ctx.spec.temperature,
                               float(ctx.options["tau_plus"])), ctx.batch_group_ids()
