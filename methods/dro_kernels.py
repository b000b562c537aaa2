"""The weight updates of iDRO and GroupDRO (METHODS.md 2.2, 2.3) as plain tensor functions.

They are re-exported by :mod:`methods.idro` (``idro_step``) and :mod:`methods.groupdro`
(``sagawa_step``, ``greedy_cvar_weights``), the public kernels pinned by the oracles
I1-I3 and G1-G2.  Kept in one small module without the methods, so the methods (which
share the clustering machinery) and the kernels import nothing from each other.

Conventions: cluster/group vectors have length K; ``present`` is a bool (K,) mask of the
clusters with samples in the batch; losses are differentiable (K,) tensors (group means);
every returned weight vector is detached.
"""
from __future__ import annotations

import torch

from harness.errors import ConfigError

IDRO_MODES = ("code", "paper", "paper-appendix")
NORM_EPS = 1e-12            # iDROLoss: G / (||G|| + 1e-12)


def _vector(name: str, value: torch.Tensor | list[float] | list[bool], k: int | None,
            like: torch.Tensor | None = None
            ) -> torch.Tensor:
    t = torch.as_tensor(value)
    if like is not None:
        t = t.to(device=like.device)
    if t.dim() != 1 or (k is not None and t.shape[0] != k):
        raise ConfigError(f"{name} must be a vector of {k if k is not None else 'K'} entries, got shape "
                          f"{tuple(t.shape)}")
    return t


def _present(present: torch.Tensor | list[bool] | None, k: int, like: torch.Tensor) -> torch.Tensor:
    if present is None:
        return torch.ones(k, dtype=torch.bool, device=like.device)
    return _vector("present", present, k, like).to(torch.bool)


def idro_step(prev_weights: torch.Tensor, cluster_losses: torch.Tensor, cluster_grads: torch.Tensor,
              present: torch.Tensor | None, *, mode: str = "code", beta: float = 0.25, rho: float = 0.05,
              ema: float = 0.1, eps: float = 0.01, tau: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One iDRO step: ``(robust loss, new weights)``.

    ``cluster_losses`` (K,) are the cluster mean losses (absent clusters 0), with graph;
    ``cluster_grads`` (K, P) their flattened gradients on the chosen parameters (absent
    clusters zero rows; already all-reduced over ranks in code mode).

    ``mode="code"`` (the released ``iDROLoss``, METHODS.md 2.2 steps 3-8): the loss is
    ``sum_i h_prev_i * l_i`` (no alpha factor); rows of G are L2-normalised,
    ``RTG = (l^beta l^beta^T) * (G^ G^T)``, ``e = rho * mean_j RTG_ij`` masked by presence and
    shifted by its max, ``h = h_prev^ema * exp(e) * present``, normalised, clamped at ``eps``.

    ``mode="paper"``: ``w_i ∝ w_prev_i * exp(sum_j r_ij / tau)`` with raw gradient dots
    ``r_ij = (l_i l_j)^beta G_i . G_j`` (``tau`` required; computed as a softmax of logs, so
    tau -> 0 gives the one-hot limit), and the loss ``sum_i alpha_i w_i l_i`` with the *new*
    weights and ``alpha = l^beta / sum l^beta``.  ``rho``, ``ema``, ``eps`` are unused there.

    ``mode="paper-appendix"``: as ``paper`` but with paper 001 Appendix E's ``r_ij = alpha_i alpha_j G_i . G_j``
    (the normalised alpha) instead of Eq. 10's ``(l_i l_j)^beta G_i . G_j``: the same update as ``paper`` at
    ``tau * (sum_i l_i^beta)^2``.
    """
    if mode not in IDRO_MODES:
        raise ConfigError(f"unknown iDRO mode {mode!r}; choose one of {', '.join(IDRO_MODES)}")
    losses = _vector("cluster_losses", cluster_losses, None)
    k = losses.shape[0]
    prev = _vector("prev_weights", prev_weights, k, losses).detach()
    grads = torch.as_tensor(cluster_grads).to(device=losses.device).detach()
    if grads.dim() != 2 or grads.shape[0] != k:
        raise ConfigError(f"cluster_grads must be (K={k}, P), got shape {tuple(grads.shape)}")
    mask = _present(present, k, losses)
    # Weights keep at least their own precision (a float64 weight vector is not rounded by float32 losses).
    dtype = torch.promote_types(torch.promote_types(losses.dtype, grads.dtype),
                                torch.promote_types(prev.dtype, torch.float32))
    l_det = losses.detach().to(dtype)
    grads, prev = grads.to(dtype), prev.to(dtype)
    powered = l_det.clamp(min=0).pow(beta)
    if mode == "code":
        unit = grads / (grads.norm(dim=1, keepdim=True) + NORM_EPS)
        rtg = torch.outer(powered, powered) * (unit @ unit.T)
        e = rho * rtg.mean(dim=1) * mask
        e = e - e.max()
        h = prev.pow(ema) * torch.exp(e) * mask
        h = (h / h.sum()).clamp(min=eps)
        loss = (prev.to(losses.dtype) * losses).sum()
        return loss, h
    if tau is None or tau <= 0:
        raise ConfigError(f"iDRO paper mode needs a temperature tau > 0, got {tau!r}")
    alpha = powered / powered.sum().clamp(min=torch.finfo(dtype).tiny)
    factor = alpha if mode == "paper-appendix" else powered
    r = torch.outer(factor, factor) * (grads @ grads.T)
    w = torch.softmax(torch.log(prev) + r.sum(dim=1) / tau, dim=0)
    loss = ((alpha * w).to(losses.dtype) * losses).sum()
    return loss, w


def sagawa_step(q: torch.Tensor, group_losses: torch.Tensor, eta: float = 0.01,
                present: torch.Tensor | None = None, adjustment: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sagawa et al.'s online GroupDRO step: ``(robust loss, new q)``.

    ``q <- q * exp(eta * L)``, renormalised, and the loss ``sum_g q_new_g * L_g`` with the
    *updated* q (kohpangwei/group_DRO ``compute_robust_loss``).  Absent groups (``present``
    False) count with loss 0, as the group means of the original code do.  ``adjustment``
    (the per-group ``C / sqrt(n_g)``) is added to the losses only when every entry is > 0,
    and then enters the loss as well as the update (the original adds it in place).
    """
    losses = _vector("group_losses", group_losses, None)
    k = losses.shape[0]
    q_prev = _vector("q", q, k, losses).detach()
    mask = _present(present, k, losses)
    losses = torch.where(mask, losses, torch.zeros_like(losses))
    if adjustment is not None:
        adj = _vector("adjustment", adjustment, k, losses).to(losses.dtype)
        if bool((adj > 0).all()):
            losses = losses + adj
    dtype = torch.promote_types(torch.promote_types(losses.dtype, q_prev.dtype), torch.float32)
    new_q = q_prev.to(dtype) * torch.exp(eta * losses.detach().to(dtype))
    new_q = new_q / new_q.sum()
    return (new_q.to(losses.dtype) * losses).sum(), new_q


def greedy_cvar_weights(ema_losses: torch.Tensor, fractions: torch.Tensor, alpha: float = 0.2,
                        eps: float = 0.01) -> torch.Tensor:
    """COCO-DR's greedy CVaR weights (``DROGreedyLoss.update_mw``, the released "GroupDRO").

    Groups sorted by EMA loss, descending: the first c whose cumulative fraction stays
    below ``alpha`` get ``1/alpha``; the next gets ``max((1 - sum f_top / alpha) / f_next, eps)``;
    the rest ``eps``.  When every cumulative fraction is below ``alpha``, the last group is
    the "next" one (as the released code).
    """
    if not 0 < alpha <= 1:
        raise ConfigError(f"greedy GroupDRO alpha must lie in (0, 1], got {alpha}")
    losses = _vector("ema_losses", ema_losses, None).detach()
    frac = _vector("fractions", fractions, losses.shape[0], losses).detach().to(torch.float64)
    if bool((frac <= 0).any()):
        raise ConfigError(f"greedy GroupDRO fractions must be positive, got {frac.tolist()}")
    order = torch.argsort(losses, descending=True, stable=True)
    sorted_frac = frac[order]
    cut = min(int((torch.cumsum(sorted_frac, 0) < alpha).sum()), len(order) - 1)
    h = torch.full_like(frac, eps)
    h[order[:cut]] = 1.0 / alpha
    leftover = 1.0 - float(sorted_frac[:cut].sum()) / alpha
    h[order[cut]] = max(leftover / float(sorted_frac[cut]), eps)
    return h


def greedy_robust_loss(weights: torch.Tensor, losses: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``sum_g h_g * (sum of the per-sample losses of g) / B`` with the previous weights (DROGreedyLoss)."""
    h = weights.detach().to(device=losses.device, dtype=losses.dtype)
    return (h[group_ids] * losses).sum() / max(len(losses), 1)


def greedy_ema_update(ema_losses: torch.Tensor, ema_counts: torch.Tensor, group_means: torch.Tensor,
                      counts: torch.Tensor, ema: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss EMA (present groups only) and the count EMA (every group) of DROGreedyLoss, from the
    batch's (all-gathered) group means and counts; returns new ``(ema_losses, ema_counts)``."""
    present = counts > 0
    losses = torch.where(present, ema_losses * (1 - ema) + group_means * ema, ema_losses)
    return losses, ema_counts * (1 - ema) + counts * ema
