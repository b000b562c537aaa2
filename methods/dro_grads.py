"""Per-cluster gradients from one partial backward (iDRO, METHODS.md 2.2 step 2), for separable losses.

iDRO needs, for every present cluster k, the gradient of its mean loss on a parameter subset (the
last blocks).  ``ctx.group_gradients`` runs one partial backward per cluster, so the cost grows
linearly in K.  When each per-sample loss depends only on its own sequences (the released triplet
loss: query, positive, negative; no in-batch negatives) and the chosen parameters all belong to
``nn.Linear`` and ``nn.LayerNorm`` modules (transformer blocks, LoRA adapters), the per-sequence
gradients of those modules separate exactly:

* forward hooks keep each chosen module's input ``x`` and output ``y`` of every grad-enabled call;
* one ``autograd.grad`` of the *sum* of the per-sample losses w.r.t. those outputs gives every
  token's output gradient ``g`` (a partial backward through the chosen blocks only); the gradient
  at the tokens of sample i's sequences is the gradient of ``l_i`` alone;
* a sequence's cluster is its sample's; the gradient of cluster k's mean loss is
  ``Σ_{s∈k} Σ_t g_st x_st^T / n_k`` (Linear weight), ``Σ g / n_k`` (biases) and ``Σ g ⊙ x̂ / n_k`` with
  ``x̂ = (y - b) / w`` (LayerNorm weight), one matrix product per present cluster over its own
  sequences: every sequence enters once, so the whole (K, P) matrix costs about one
  weight-gradient pass, whatever K.

The result equals ``ctx.group_gradients`` (tested); anything the separation does not cover (other
parameter types, a loss with in-batch negatives, forwards that do not match the batch) is
reported as ``None`` and the caller falls back to the per-cluster backward passes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

_SUPPORTED = (nn.Linear, nn.LayerNorm)


class SeparableClusterGradients:
    """Forward hooks on the modules owning ``params``; :meth:`gradients` turns the latest forward of a
    micro-batch into the (K, P) matrix of per-cluster mean-loss gradients (or None: fall back)."""

    def __init__(self, model: nn.Module, params: Sequence[torch.Tensor]) -> None:
        owner: dict[int, tuple[nn.Module, str]] = {}
        for module in model.modules():
            if isinstance(module, _SUPPORTED):
                for name, p in module.named_parameters(recurse=False):
                    owner[id(p)] = (module, name)
        self.params = list(params)
        self.supported = all(id(p) in owner for p in self.params)
        self.slots = [owner[id(p)] for p in self.params] if self.supported else []
        self.modules: list[nn.Module] = list(dict.fromkeys(m for m, _ in self.slots))
        self.records: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {id(m): [] for m in self.modules}
        self.handles = [m.register_forward_hook(self._hook) for m in self.modules]

    def _hook(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad:
            self.records[id(module)].append((inputs[0], output))

    def clear(self) -> None:
        for rows in self.records.values():
            rows.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _latest(self, module: nn.Module, n_seq: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The trailing calls of ``module`` that cover exactly ``n_seq`` sequences (this micro-batch)."""
        out, total = [], 0
        for x, y in reversed(self.records[id(module)]):
            if total == n_seq:
                break
            out.append((x, y))
            total += y.shape[0]
        return out[::-1] if total == n_seq else None

    def gradients(self, total_loss: torch.Tensor, sample_clusters: torch.Tensor, views: Sequence[int],
                  k: int) -> torch.Tensor | None:
        """(K, P) gradients of the cluster-mean losses (rows of absent clusters zero), or None (fall back).

        ``total_loss``: the sum of the per-sample losses (with graph); ``sample_clusters``: each sample's
        cluster; ``views``: the sequences per sample of each encoded view, in encoding order (e.g. [1, 2]
        for a query and [positive, negative])."""
        try:
            if not self.supported or any(isinstance(m, nn.LayerNorm) and bool((m.weight == 0).any())
                                         for m in self.modules):
                return None                                  # x̂ = (y - b) / w needs non-zero LayerNorm weights
            seq_cluster = torch.cat([sample_clusters.repeat_interleave(per) for per in views])
            calls = {id(m): self._latest(m, int(seq_cluster.shape[0])) for m in self.modules}
            if any(c is None for c in calls.values()):
                return None
            outputs = [y for m in self.modules for _, y in calls[id(m)]]      # type: ignore[union-attr]
            found = iter(torch.autograd.grad(total_loss, outputs, retain_graph=True, allow_unused=True))
            counts = torch.bincount(sample_clusters, minlength=k).clamp(min=1).float()
            per_module = {id(m): self._module_grads(m, calls[id(m)], found, seq_cluster,  # type: ignore[arg-type]
                                                    counts, k) for m in self.modules}
        finally:
            self.clear()
        rows = []
        for p, (module, name) in zip(self.params, self.slots):
            grad = per_module[id(module)].get(name)
            rows.append(torch.zeros(k, p.numel(), device=p.device) if grad is None else grad.reshape(k, -1))
        return torch.cat(rows, dim=1)

    @staticmethod
    def _module_grads(module: nn.Module, calls: list[tuple[torch.Tensor, torch.Tensor]], found: Any,
                      seq_cluster: torch.Tensor, counts: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
        """Per-cluster gradients of one module's weight and bias from its calls' inputs, outputs and output
        gradients: one matrix product per present cluster over its own sequences (each sequence once)."""
        is_linear = isinstance(module, nn.Linear)
        params = dict(module.named_parameters(recurse=False))
        weight = params["weight"]
        acc = {"weight": torch.zeros(k, *weight.shape, device=weight.device)}
        if "bias" in params:
            acc["bias"] = torch.zeros(k, *params["bias"].shape, device=weight.device)
        start = 0
        for x, y in calls:
            g = next(found)
            n = y.shape[0]
            clusters = seq_cluster[start:start + n].to(y.device)
            start += n
            if g is None:
                continue
            g32 = g.float().reshape(n, -1, g.shape[-1])                        # (n, T, out)
            if is_linear:
                x32 = x.float().reshape(n, -1, x.shape[-1])
            else:
                bias = params["bias"].float() if "bias" in params else 0.0
                x32 = (y.float().reshape(n, -1, y.shape[-1]) - bias) / weight.float()    # x-hat
            for c in torch.unique(clusters).tolist():
                rows = clusters == c
                gc = g32[rows].reshape(-1, g32.shape[-1]) / counts[c]
                xc = x32[rows].reshape(-1, x32.shape[-1])
                acc["weight"][c] += gc.T @ xc if is_linear else (gc * xc).sum(dim=0)
                if "bias" in acc:
                    acc["bias"][c] += gc.sum(dim=0)
        return acc
