"""LAMB as the released COCO-DR scripts run it (OpenMatch/COCO-DR ANCE/utils/lamb.py, identical in warmup/utils/):
the warm-up and ANCE commands pass ``--optimizer lamb`` where paper 001 §5.1 says AdamW.

Per parameter, per step: ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g²`` (no bias correction: the released
code comments it out), ``u = m / (sqrt(v) + eps) + weight_decay * p``, the trust ratio
``r = min(||p||, 10) / ||u||`` (1 when either norm is 0), and ``p -= lr * r * u``: every tensor moves by
``lr * min(||p||, 10)`` along ``u``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

WEIGHT_NORM_CAP = 10.0     # ANCE/utils/lamb.py: p.data.pow(2).sum().sqrt().clamp(0, 10)


class Lamb(torch.optim.Optimizer):
    """The released LAMB (see the module docstring); ``weight_decay`` per parameter group."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"LAMB: invalid lr {lr}, eps {eps} or betas {betas}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("LAMB does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                weight_norm = p.pow(2).sum().sqrt().clamp(0, WEIGHT_NORM_CAP)
                update = exp_avg / exp_avg_sq.sqrt().add(group["eps"])
                if group["weight_decay"] != 0:
                    update.add_(p, alpha=group["weight_decay"])
                update_norm = update.pow(2).sum().sqrt()
                trust = (weight_norm / update_norm if float(weight_norm) > 0 and float(update_norm) > 0
                         else torch.ones((), device=p.device, dtype=p.dtype))
                p.add_(update * trust, alpha=-group["lr"])
        return loss
