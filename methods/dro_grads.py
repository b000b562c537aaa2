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
  ``x̂ = (y - b) / w`` (LayerNorm weight).  Per module, the tokens of all its calls are pooled, those
  with an all-zero output gradient (padding: they add nothing) dropped, and the rest sorted by
  cluster once, so each cluster's tokens are one contiguous slice and its Linear weight sum is one
  matrix product over its own tokens (every token enters once: about one weight-gradient pass,
  whatever K); the bias and LayerNorm sums are one ``index_add_`` over the tokens.

iDRO uses the gradients only through their K x K Gram matrix ``G Gᵀ`` (cosines in code mode, raw
dots in paper mode), which is a sum over parameters: :meth:`SeparableClusterGradients.gram` builds it
module by module in one reused (K, largest module) buffer, so the (K, P) matrix is never formed
(P = 5.3M for MiniLM's last 3 blocks, 21M for BERT-base's: K x P floats of traffic per step was the
part of the cost that grew with K).  :meth:`~SeparableClusterGradients.gradients` still returns the
(K, P) matrix, for a sum over ranks (the released code all-reduces G, not its Gram).

Both equal ``ctx.group_gradients`` (tested); anything the separation does not cover (other parameter
types, a loss with in-batch negatives, forwards that do not match the batch) is reported as ``None``
and the caller falls back to the per-cluster backward passes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

_SUPPORTED = (nn.Linear, nn.LayerNorm)
_Call = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]        # input, output, output gradient


class SeparableClusterGradients:
    """Forward hooks on the modules owning ``params``; :meth:`gradients` / :meth:`gram` turn the latest
    forward of a micro-batch into the (K, P) per-cluster mean-loss gradients or their (K, K) Gram matrix
    (or None: fall back)."""

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
        self.chosen = {id(m): {name for mm, name in self.slots if mm is m} for m in self.modules}
        self.records: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {id(m): [] for m in self.modules}
        self.handles = [m.register_forward_hook(self._hook) for m in self.modules]
        self._buffer: torch.Tensor | None = None       # (K x largest Linear weight) scratch of gram(), reused

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

    def _calls(self, total_loss: torch.Tensor, sample_clusters: torch.Tensor, views: Sequence[int]
               ) -> tuple[dict[int, list[_Call]], torch.Tensor] | None:
        """Each module's calls of this micro-batch with their output gradients (one partial backward), and
        each sequence's cluster; None when the separation does not apply.  The hook records are cleared."""
        try:
            if not self.supported or any(isinstance(m, nn.LayerNorm) and bool((m.weight == 0).any())
                                         for m in self.modules):
                return None                                  # x̂ = (y - b) / w needs non-zero LayerNorm weights
            seq_cluster = torch.cat([sample_clusters.repeat_interleave(per) for per in views])
            latest = {id(m): self._latest(m, int(seq_cluster.shape[0])) for m in self.modules}
            if any(c is None for c in latest.values()):
                return None
            outputs = [y for m in self.modules for _, y in latest[id(m)]]      # type: ignore[union-attr]
            found = iter(torch.autograd.grad(total_loss, outputs, retain_graph=True, allow_unused=True))
            calls: dict[int, list[_Call]] = {
                id(m): [(x, y, next(found)) for x, y in latest[id(m)]]          # type: ignore[union-attr]
                for m in self.modules}
        finally:
            self.clear()
        return calls, seq_cluster

    def gradients(self, total_loss: torch.Tensor, sample_clusters: torch.Tensor, views: Sequence[int],
                  k: int) -> torch.Tensor | None:
        """(K, P) gradients of the cluster-mean losses (rows of absent clusters zero), or None (fall back).

        ``total_loss``: the sum of the per-sample losses (with graph); ``sample_clusters``: each sample's
        cluster; ``views``: the sequences per sample of each encoded view, in encoding order (e.g. [1, 2]
        for a query and [positive, negative])."""
        prepared = self._calls(total_loss, sample_clusters, views)
        if prepared is None:
            return None
        calls, seq_cluster = prepared
        scale = 1.0 / torch.bincount(sample_clusters, minlength=k).clamp(min=1).float()
        per_module = {}
        for m in self.modules:
            sums = self._module_sums(m, calls[id(m)], seq_cluster, k, None)
            per_module[id(m)] = {name: s.mul_(scale.to(s.device).view(-1, *[1] * (s.dim() - 1)))
                                 for name, s in sums.items()}
        return torch.cat([per_module[id(module)][name].reshape(k, -1) for module, name in self.slots], dim=1)

    def gram(self, total_loss: torch.Tensor, sample_clusters: torch.Tensor, views: Sequence[int],
             k: int) -> torch.Tensor | None:
        """(K, K) float64 Gram matrix ``G Gᵀ`` of the cluster-mean loss gradients that :meth:`gradients`
        returns, built module by module without forming G; None (fall back) where gradients would be."""
        prepared = self._calls(total_loss, sample_clusters, views)
        if prepared is None:
            return None
        calls, seq_cluster = prepared
        device = self.params[0].device
        gram = torch.zeros(k, k, dtype=torch.float64, device=device)
        for m in self.modules:
            for s in self._module_sums(m, calls[id(m)], seq_cluster, k, self._scratch(m, k)).values():
                flat = s.reshape(k, -1)
                gram += (flat @ flat.T).to(torch.float64)      # float32 products, summed per tensor in float64
        inv = 1.0 / torch.bincount(sample_clusters, minlength=k).clamp(min=1).to(torch.float64).to(device)
        return gram * torch.outer(inv, inv)

    def _scratch(self, module: nn.Module, k: int) -> torch.Tensor | None:
        """A (K, out, in) view of the reused buffer for a Linear weight's sums (None: not a Linear)."""
        if not isinstance(module, nn.Linear) or "weight" not in self.chosen[id(module)]:
            return None
        weight = module.weight
        need = k * weight.numel()
        if self._buffer is None or self._buffer.numel() < need or self._buffer.device != weight.device:
            largest = max(mm.weight.numel() for mm in self.modules if isinstance(mm, nn.Linear))
            self._buffer = torch.empty(k * largest, device=weight.device)
        return self._buffer[:need].view(k, *weight.shape)

    @torch.no_grad()
    def _module_sums(self, module: nn.Module, calls: list[_Call], seq_cluster: torch.Tensor, k: int,
                     weight_out: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Per-cluster *sums* (not yet divided by the cluster sizes) of the gradients of ``module``'s chosen
        parameters, (K, *shape) each, from its calls' inputs, outputs and output gradients.  The tokens of
        all calls (query and passage forwards) are pooled, those whose output gradient is exactly zero
        (padding) dropped - they add nothing - and the rest sorted by cluster: a Linear weight's sums are
        one matrix product per present cluster over its contiguous tokens, written into ``weight_out`` when
        given; biases and LayerNorm weights one ``index_add_``.  No autograd graph: the inputs ``x``
        belong to the model's graph, the sums are constants."""
        is_linear = isinstance(module, nn.Linear)
        params = dict(module.named_parameters(recurse=False))
        chosen = self.chosen[id(module)]
        weight = params["weight"]
        grads, inputs, owners = [], [], []
        start = 0
        for x, y, g in calls:
            n = y.shape[0]
            clusters = seq_cluster[start:start + n].to(y.device)
            start += n
            if g is None:
                continue
            width = g.shape[-1]
            g32 = g.float().reshape(n, -1, width)                                    # (n, T, out)
            if is_linear:
                x32 = x.float().reshape(n, g32.shape[1], -1)
            else:
                bias = params["bias"].float() if "bias" in params else 0.0
                x32 = (y.float().reshape(n, -1, width) - bias) / weight.float()       # x-hat
            keep = (g32 != 0).any(dim=-1)                                            # (n, T)
            grads.append(g32[keep])
            inputs.append(x32[keep])
            owners.append(clusters.unsqueeze(1).expand_as(keep)[keep])
        acc: dict[str, torch.Tensor] = {}
        if not grads:
            if "weight" in chosen:
                acc["weight"] = weight_out if weight_out is not None else torch.zeros(k, *weight.shape,
                                                                                     device=weight.device)
            if "bias" in chosen:
                acc["bias"] = torch.zeros(k, *params["bias"].shape, device=weight.device)
            return acc
        g_all, x_all, token_cluster = torch.cat(grads), torch.cat(inputs), torch.cat(owners)
        if "bias" in chosen:
            acc["bias"] = torch.zeros(k, *params["bias"].shape, device=weight.device).index_add_(
                0, token_cluster, g_all)
        if "weight" not in chosen:
            return acc
        if not is_linear:
            acc["weight"] = torch.zeros(k, *weight.shape, device=weight.device).index_add_(
                0, token_cluster, g_all * x_all)
            return acc
        out = weight_out if weight_out is not None else torch.empty(k, *weight.shape, device=weight.device)
        order = torch.argsort(token_cluster, stable=True)
        g_sorted, x_sorted = g_all.index_select(0, order), x_all.index_select(0, order)
        first = 0
        for c, size in enumerate(torch.bincount(token_cluster, minlength=k).tolist()):
            if size:
                torch.mm(g_sorted[first:first + size].T, x_sorted[first:first + size], out=out[c])
                first += size
            else:
                out[c].zero_()
        acc["weight"] = out
        return acc
