"""InfoNCE with hard, in-batch and cross-batch negatives (METHODS.md 0.1).

Layout: query i owns the passage group ``[d+_i, d-_i1, ..., d-_im]`` at columns
``(offset + i) * n .. (offset + i) * n + n - 1`` of the passage matrix, where
``n = 1 + m`` and ``offset`` is the index of the first local query in the global
batch (``rank * local_batch`` when the passages were gathered from every rank).
The target of query i is the first column of its group.

Candidates per query:

* ``in_batch=False`` (HN only): the query's own group;
* ``in_batch=True``: every passage column given (the local batch, or with
  cross-batch negatives the passages gathered from every rank);
* ``only_hn[i]``: query i falls back to its own group (tDRO masks in-batch
  negatives for clustering/classification sources);
* ``passage_valid[j] = False`` removes column j everywhere (a masked missing negative).

The per-sample vector (``reduction="none"``) is what methods reweight.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def similarity_scores(q: torch.Tensor, p: torch.Tensor, similarity: str = "dot") -> torch.Tensor:
    """(B, D) x (P, D) -> (B, P) similarity; ``cos`` normalises both sides first."""
    if similarity == "cos":
        q = F.normalize(q, dim=-1)
        p = F.normalize(p, dim=-1)
    elif similarity != "dot":
        raise ValueError(f"unknown similarity {similarity!r}")
    return q @ p.transpose(0, 1)


def candidate_mask(n_queries: int, n_cols: int, passages_per_query: int, *, query_offset: int = 0,
                   in_batch: bool = True, only_hn: torch.Tensor | None = None,
                   passage_valid: torch.Tensor | None = None, device: torch.device | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(allowed, targets)``: the (B, P) bool mask of each query's candidate columns (its positive
    included) and the (B,) column of its positive, under the layout of the module docstring.

    Methods that build their own loss on the InfoNCE candidates (e.g. PEG) use the same mask.
    """
    n = passages_per_query
    starts = (torch.arange(n_queries, device=device) + query_offset) * n
    if int(starts[-1]) + n > n_cols:
        raise ValueError(f"{n_cols} passage columns cannot hold groups of {n} for queries "
                         f"{query_offset}..{query_offset + n_queries - 1}")
    cols = torch.arange(n_cols, device=device)
    own_group = (cols.unsqueeze(0) >= starts.unsqueeze(1)) & (cols.unsqueeze(0) < (starts + n).unsqueeze(1))
    if in_batch:
        allowed = torch.ones_like(own_group)
        if only_hn is not None:
            allowed = torch.where(only_hn.to(torch.bool).unsqueeze(1), own_group, allowed)
    else:
        allowed = own_group
    if passage_valid is not None:
        allowed = allowed & passage_valid.to(torch.bool).unsqueeze(0)
    return allowed, starts


def info_nce_from_scores(scores: torch.Tensor, passages_per_query: int, *, query_offset: int = 0,
                         in_batch: bool = True, only_hn: torch.Tensor | None = None,
                         passage_valid: torch.Tensor | None = None, reduction: str = "mean") -> torch.Tensor:
    """InfoNCE on a (B, P) matrix of already-scaled scores (``sim / temperature``)."""
    n_queries, n_cols = scores.shape
    allowed, starts = candidate_mask(n_queries, n_cols, passages_per_query, query_offset=query_offset,
                                     in_batch=in_batch, only_hn=only_hn, passage_valid=passage_valid,
                                     device=scores.device)
    # Work in fp32: temperatures like 0.002 turn bf16 scores into large logits.
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    return candidate_info_nce(scores, allowed, starts, temperature=1.0, reduction=reduction)


def info_nce(q: torch.Tensor, p: torch.Tensor, passages_per_query: int, *, temperature: float = 1.0,
             similarity: str = "dot", query_offset: int = 0, in_batch: bool = True,
             only_hn: torch.Tensor | None = None, passage_valid: torch.Tensor | None = None,
             reduction: str = "mean") -> torch.Tensor:
    """InfoNCE of queries ``q`` (B, D) against passage groups ``p`` (P, D); see the module docstring."""
    dtype = torch.promote_types(torch.promote_types(q.dtype, p.dtype), torch.float32)
    scores = similarity_scores(q.to(dtype), p.to(dtype), similarity) / temperature
    return info_nce_from_scores(scores, passages_per_query, query_offset=query_offset, in_batch=in_batch,
                                only_hn=only_hn, passage_valid=passage_valid, reduction=reduction)


def candidate_info_nce(sim: torch.Tensor, allowed: torch.Tensor, targets: torch.Tensor, temperature: float,
                       reduction: str = "none") -> torch.Tensor:
    """InfoNCE from raw similarities ``sim`` (B, P), the candidate mask and the positive columns
    (what :func:`candidate_mask` returns); the same numbers as :func:`info_nce`."""
    logits = (sim / temperature).masked_fill(~allowed, float("-inf"))
    return reduce_losses(F.cross_entropy(logits, targets, reduction="none"), reduction)


def reduce_losses(losses: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return losses
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    raise ValueError(f"unknown reduction {reduction!r}")
