"""PEG's progressive learning loss (paper 002) vs vanilla InfoNCE (METHODS.md section 3).

The loss (cosine similarities ``s``, temperature tau, per batch of B positive pairs)::

    sigma = mean_q s(q, p) - beta                       batch threshold with margin beta
    t     = alpha * mean_q s(q, p) + (1 - alpha) * t    momentum bias, updated *before* use
    w_q   = 1 if s(q, p) >= sigma else s(q, p) / sigma  down-weights likely false positives
    a_n   = t + s(q, p)   if s(q, p) >= sigma and s(q, n) >= s(q, p)   ("pos", the paper)
            t + s(q, n)   under the same condition                    ("neg", CurricularFace)
            1             otherwise
    loss  = mean_q  w_q * ( logsumexp(s(q,p)/tau, a_n * s(q,n)/tau ...) - s(q,p)/tau )

``w_q``, ``a_n``, ``sigma`` and ``t`` carry no gradient.  Everything is computed in log
space (the log-sum-exp of ``cross_entropy``), so tau = 0.01 (logits near 100) cannot overflow.  One guard beyond
the paper: ``w_q`` is clipped to [0, 1] (the ratio is meaningless when sigma <= 0 or
s(q, p) < 0, where it would exceed 1 or turn the loss into gradient ascent); it never binds
for 0 <= s(q, p) < sigma.  With both ingredients switched off the loss is exactly InfoNCE.

:func:`peg_loss` is the public kernel on (positive, negatives) similarities;
:func:`peg_from_scores` works on a full candidate matrix (the trainer's layout) and
returns every intermediate; :class:`PEG` is the method for the shared trainer.
Method choices (the paper is silent; see METHODS.md 3.3): negatives are the InfoNCE
candidates of the trainer (own hard negatives + every other passage of the batch,
all-gathered across ranks); the batch statistics are global (all-gathered) by default;
with gradient accumulation each micro-batch is one "batch" of the paper (t updates per
micro-batch).  The scalar t is method state, saved in checkpoints.

PEG's progressive weights also wrap another method's per-sample loss (option ``base``,
:mod:`harness.method.compose`): ``loss = mean_q w_q * l_q`` with sigma, t and w_q as above, a
suite-file line such as ``{method: peg, options: {base: debiased, scale_negatives: false}}``.
:func:`progressive_weights` is that kernel; what PEG reads around a base whose similarity is not
a cosine, and why a_n is refused there, is in :class:`PEG`'s docstring.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from harness.errors import ConfigError, InputError
from harness.io import atomic_write, atomic_write_json
from harness.method import Method, register_method
from harness.recipe import BaseLossOptions, option, preset, rebased
from harness.train.api import LOG_FILE, DataStage, Prepared, Stage, StageResult, read_log, reduce_losses

if TYPE_CHECKING:
    from harness.data.collections import TrainingData
    from harness.train.api import LossOutput, TrainContext, TrainSpec

A_MODES = ("pos", "neg")
T_MODES = ("momentum", "constant")
STATISTICS = ("global", "local")
REDUCTIONS = ("mean", "sum", "none")
PLOTTED = ("t", "sigma", "downweighted_share", "modulated_share", "emphasised_share", "damped_share")


@dataclass
class PEGTerms:
    """Everything one PEG batch computes (all but ``loss``/``losses`` detached)."""

    loss: torch.Tensor          # reduced as asked
    losses: torch.Tensor        # (B,) per query, weighted by w_q
    new_t: torch.Tensor         # 0-d: the bias used in this batch (after the update)
    sigma: torch.Tensor         # 0-d
    batch_mean: torch.Tensor    # 0-d: mean positive similarity the statistics used
    pos: torch.Tensor           # (B,) positive similarities
    weights: torch.Tensor       # (B,) w_q as applied (ones when query weighting is off)
    above: torch.Tensor         # (B,) bool: s(q, p) >= sigma (the query is not down-weighted)
    hard: torch.Tensor          # (B, C) bool: the a_n condition, before the candidate mask
    allowed: torch.Tensor       # (B, C) bool: the candidates (positive included)
    targets: torch.Tensor       # (B,) the positive's column
    base: torch.Tensor | None   # a_n of modulated negatives: (B, 1) t + s(q,p), (B, C) t + s(q,n); None if off

    @property
    def modulated(self) -> torch.Tensor:
        """(B, C) bool: the negatives that meet the a_n condition (scaled when scaling is on)."""
        return self.hard & self.allowed

    @property
    def n_negatives(self) -> int:
        rows = torch.arange(len(self.targets), device=self.targets.device)
        return int(torch.count_nonzero(self.allowed)) - int(torch.count_nonzero(self.allowed[rows, self.targets]))

    @property
    def factor(self) -> torch.Tensor:
        """a_n as applied, (B, C): ``base`` where modulated, else 1 (all ones when scaling is off)."""
        if self.base is None:
            return torch.ones_like(self.hard, dtype=self.pos.dtype)
        return torch.where(self.modulated, self.base, 1.0)

    def modulation_counts(self) -> tuple[int, int, int]:
        """(modulated, emphasised: a_n > 1, damped: a_n < 1) negatives, without building ``factor``."""
        mask = self.modulated
        if self.base is None:
            return int(torch.count_nonzero(mask)), 0, 0
        if self.base.shape[1] == 1:           # "pos": one a_n per query row
            per_row = torch.count_nonzero(mask, dim=1)
            row_base = self.base[:, 0]
            return int(per_row.sum()), int(per_row[row_base > 1].sum()), int(per_row[row_base < 1].sum())
        return (int(torch.count_nonzero(mask)), int(torch.count_nonzero(mask & (self.base > 1))),
                int(torch.count_nonzero(mask & (self.base < 1))))


@dataclass
class ProgressiveWeights:
    """PEG's batch statistics and query weights (all detached): what wraps another method's loss."""

    weights: torch.Tensor       # (B,) w_q (ones when query weighting is off)
    above: torch.Tensor         # (B,) bool: s(q, p) >= sigma
    sigma: torch.Tensor         # 0-d: the batch threshold
    batch_mean: torch.Tensor    # 0-d: the mean positive similarity the statistics used
    new_t: torch.Tensor         # 0-d: the momentum bias after this batch's update


def progressive_weights(pos: torch.Tensor, t: float | torch.Tensor, *, alpha: float = 0.5, beta: float = 0.1,
                        batch_mean: float | torch.Tensor | None = None, weight_queries: bool = True,
                        momentum: bool = True) -> ProgressiveWeights:
    """sigma, t and w_q of one batch from its (B,) positive similarities ``pos`` (no gradient).

    ``sigma = mean - beta``; ``new_t = alpha * mean + (1 - alpha) * t`` (``t`` unchanged when
    ``momentum`` is off); ``w_q = 1`` where ``pos >= sigma``, else ``pos / sigma`` clipped to
    [0, 1].  ``batch_mean`` replaces ``pos.mean()`` (the all-gathered mean of a distributed batch).
    """
    with torch.no_grad():
        pos = pos.detach()
        mean = pos.mean() if batch_mean is None else torch.as_tensor(batch_mean, dtype=pos.dtype, device=pos.device)
        sigma = mean - beta
        t_old = torch.as_tensor(t, dtype=pos.dtype, device=pos.device)
        new_t = alpha * mean + (1.0 - alpha) * t_old if momentum else t_old
        above = pos >= sigma
        if weight_queries:
            weights = torch.where(above, 1.0, (pos / sigma).clamp(0.0, 1.0))
        else:
            weights = torch.ones_like(pos)
    return ProgressiveWeights(weights, above, sigma, mean, new_t)


def _hard_negatives(sim: torch.Tensor, pos: torch.Tensor, above: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, C) bool: the a_n condition ``s(q, p) >= sigma and s(q, n) >= s(q, p)``, the positive excluded."""
    # One comparison per entry: rows below sigma get an unreachable threshold.  Ties count as
    # hard ("s(q, n) < s(q, p)" keeps a_n = 1); the positive itself is never a negative, and
    # non-candidates are masked out of the logits (and the counts) by ``allowed``.
    threshold = torch.where(above, pos, float("inf"))
    hard = sim >= threshold.unsqueeze(1)
    hard[torch.arange(sim.shape[0], device=sim.device), targets] = False
    return hard


def peg_from_scores(sim: torch.Tensor, targets: torch.Tensor, allowed: torch.Tensor, t: float | torch.Tensor, *,
                    alpha: float = 0.5, beta: float = 0.1, tau: float = 0.01, a_mode: str = "pos",
                    batch_mean: float | torch.Tensor | None = None, weight_queries: bool = True,
                    scale_negatives: bool = True, momentum: bool = True, reduction: str = "mean") -> PEGTerms:
    """PEG on a candidate matrix: ``sim`` (B, C) similarities, ``targets`` (B,) the positive's
    column per row, ``allowed`` (B, C) bool candidates (positive included, others are negatives).

    ``batch_mean`` replaces the local mean positive similarity in sigma and t (the all-gathered
    mean of a distributed batch); ``momentum=False`` keeps t constant; ``weight_queries`` and
    ``scale_negatives`` switch w_q and a_n (both off: InfoNCE over the same candidates).
    """
    _check_options(alpha, tau, a_mode, reduction)
    if sim.dim() != 2 or targets.shape != (sim.shape[0],) or allowed.shape != sim.shape:
        raise ValueError(f"expected sim (B, C), targets (B,), allowed (B, C); got {tuple(sim.shape)}, "
                         f"{tuple(targets.shape)}, {tuple(allowed.shape)}")
    sim = sim.to(torch.promote_types(sim.dtype, torch.float32))
    rows = torch.arange(sim.shape[0], device=sim.device)
    pos = sim[rows, targets]
    with torch.no_grad():
        sim_d, pos_d = sim.detach(), pos.detach()
        w = progressive_weights(pos_d, t, alpha=alpha, beta=beta, batch_mean=batch_mean,
                                weight_queries=weight_queries, momentum=momentum)
        mean, sigma, new_t, above, weights = w.batch_mean, w.sigma, w.new_t, w.above, w.weights
        hard = _hard_negatives(sim_d, pos_d, above, targets)
        if scale_negatives:
            base = new_t + (pos_d.unsqueeze(1) if a_mode == "pos" else sim_d)
            # a_n / tau = 1/tau + hard * (a_n - 1)/tau: cheaper than a broadcasting torch.where
            scale: torch.Tensor | float = hard.to(sim.dtype).mul_((base - 1.0) / tau).add_(1.0 / tau)
        else:
            base = None
            scale = 1.0 / tau
    logits = torch.where(allowed, sim * scale, float("-inf"))
    # cross_entropy = logsumexp(row) - logit of the positive, in one fused log-space kernel
    losses = weights * F.cross_entropy(logits, targets, reduction="none")
    loss = reduce_losses(losses, reduction)
    return PEGTerms(loss, losses, new_t.detach(), sigma, mean, pos_d, weights, above, hard, allowed, targets, base)


def peg_loss(pos_sim: torch.Tensor, neg_sim: torch.Tensor, t: float | torch.Tensor, alpha: float = 0.5,
             beta: float = 0.1, tau: float = 0.01, a_mode: str = "pos", neg_mask: torch.Tensor | None = None,
             reduction: str = "mean", *, batch_mean: float | torch.Tensor | None = None,
             weight_queries: bool = True, scale_negatives: bool = True, momentum: bool = True
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """PEG's progressive loss for one batch; returns ``(loss, new_t)``.

    Args:
        pos_sim: (B,) similarity of each query with its positive (cosine in the paper).
        neg_sim: (B, N) similarities of each query with its negatives.
        t: the momentum bias before this batch (t0 = 0).  It is updated first,
            ``new_t = alpha * mean(pos_sim) + (1 - alpha) * t``, and the new value is used here.
        alpha, beta, tau: momentum, threshold margin, temperature (paper: 0.5, 0.1, 0.01).
        a_mode: "pos" scales hard negatives by ``t + s(q, p)`` (the paper), "neg" by ``t + s(q, n)``.
        neg_mask: (B, N) bool, True where ``neg_sim`` holds a real negative; False entries are
            excluded from the loss and the statistics.  None: every entry counts.
        reduction: "mean" over queries (default), "sum" (the paper's formula) or "none" (B,).
        batch_mean: the mean positive similarity of the whole (e.g. all-gathered) batch, if the
            statistics should not come from ``pos_sim`` alone.
        weight_queries, scale_negatives, momentum: switch w_q, a_n and the t update off (ablations).

    Returns:
        ``loss`` (with gradient to ``pos_sim``/``neg_sim``; w_q and a_n are constants) and
        ``new_t``, a detached 0-d tensor: the bias used in this batch, to pass as ``t`` next time.
    """
    if pos_sim.dim() != 1 or neg_sim.dim() != 2 or neg_sim.shape[0] != pos_sim.shape[0] or pos_sim.shape[0] == 0:
        raise ValueError(f"expected pos_sim (B,) and neg_sim (B, N) with B >= 1; got {tuple(pos_sim.shape)} "
                         f"and {tuple(neg_sim.shape)}")
    b, n = neg_sim.shape
    if neg_mask is None:
        neg_mask = torch.ones((b, n), dtype=torch.bool, device=neg_sim.device)
    else:
        if neg_mask.shape != neg_sim.shape:
            raise ValueError(f"neg_mask has shape {tuple(neg_mask.shape)}, neg_sim {tuple(neg_sim.shape)}")
        if neg_mask.dtype != torch.bool:
            if not bool(((neg_mask == 0) | (neg_mask == 1)).all()):
                raise ValueError("neg_mask must be boolean (or 0/1)")
            neg_mask = neg_mask.to(torch.bool)
    dtype = torch.promote_types(pos_sim.dtype, neg_sim.dtype)
    sim = torch.cat([pos_sim.to(dtype).unsqueeze(1), neg_sim.to(dtype)], dim=1)
    allowed = torch.cat([torch.ones((b, 1), dtype=torch.bool, device=neg_mask.device), neg_mask], dim=1)
    targets = torch.zeros(b, dtype=torch.long, device=sim.device)
    terms = peg_from_scores(sim, targets, allowed, t, alpha=alpha, beta=beta, tau=tau, a_mode=a_mode,
                            batch_mean=batch_mean, weight_queries=weight_queries, scale_negatives=scale_negatives,
                            momentum=momentum, reduction=reduction)
    return terms.loss, terms.new_t


def _check_options(alpha: float, tau: float, a_mode: str, reduction: str) -> None:
    if a_mode not in A_MODES:
        raise ValueError(f"a_mode must be one of {A_MODES}, got {a_mode!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


# ---------------------------------------------------------------------- presets
_PAPER = {
    # Paper 002, fine-tuning: BERT-large (24 layers, 16 heads, 1024 wide) with RetroMAE pre-training on
    # Chinese (not released); the public stand-in is a Chinese BERT-large-architecture checkpoint.
    # Pooling is not stated; CLS as in BGE, which the paper follows for its instruction.
    "model": "hfl/chinese-roberta-wwm-ext-large", "pooling": "cls", "append_eos": False,
    "query_max_length": 64, "doc_max_length": 256,
    # BGE-style: one fixed instruction before every query, none on passages.
    "use_instructions": True, "symmetric_doc_prompt": False,
    "instruction_template": "为这个句子生成表示以用于检索相关文章：{text}",
    "similarity": "cos", "temperature": 0.01, "n_hard_negatives": 5,
    "in_batch_negatives": True, "cross_batch_negatives": True,
    # 432 queries per GPU x 32 GPUs; 5 epochs over 110M rows = ceil(5 * 110e6 / 13824) steps.
    # Warmup and weight decay are not stated: none, and AdamW's usual 0.01.
    "batch_size": 13824, "grad_accum": 1, "sampling": "homogeneous",
    "steps": 39786, "warmup_steps": 0, "lr": 1e-5, "schedule": "linear", "min_lr_ratio": 0.0,
    "weight_decay": 0.01, "max_grad_norm": 1.0,
    "precision": "bf16", "gradient_checkpointing": True, "lora": None, "seed": 42, "save_every": 1000,
}

_SMALL = {
    **_PAPER,
    "model": "minilm", "pooling": "mean", "use_instructions": False, "instruction_template": "{text}",
    "n_hard_negatives": 1, "batch_size": 32, "steps": 120, "warmup_steps": 12, "lr": 2e-5,
    "precision": "fp32", "gradient_checkpointing": False, "save_every": 40,
}

# A tiny random model on the synthetic world: tau 0.05 (at 0.01 the randomly initialised model's
# training is erratic and false positives are barely separated), lr 1e-3, 150 steps.
_TINY = {
    **_SMALL,
    "query_max_length": 32, "doc_max_length": 64, "temperature": 0.05, "steps": 150, "warmup_steps": 15,
    "lr": 1e-3, "save_every": 50, "progress": False, "dropout": False,   # as the uniform tiny recipe
}


PAPER = preset(_PAPER, "paper 002 (METHODS.md 3.1)", [
    ("harness default: a public Chinese BERT-large-architecture stand-in (paper 002's RetroMAE model is not "
     "released)", ["model"]),
    ("harness default: CLS as in BGE, which paper 002 follows for its instruction (it does not state pooling)",
     ["pooling"]),
    ("harness default: paper 002 states no warmup and no weight decay (none, and AdamW's usual 0.01)",
     ["warmup_steps", "weight_decay"]),
    ("harness default: the shared trainer's (paper 002 does not say)",
     ["append_eos", "symmetric_doc_prompt", "grad_accum", "sampling", "min_lr_ratio", "max_grad_norm", "precision",
      "gradient_checkpointing", "lora", "seed", "save_every"]),
])
SMALL = rebased(PAPER, _SMALL, "harness default: all-MiniLM-L6-v2 on CPU in minutes (as the uniform small recipe)")
TINY = rebased(SMALL, _TINY, "harness default: a tiny random model on the synthetic world; tau 0.05 (at 0.01 its "
                             "training is erratic)")


# ---------------------------------------------------------------------- the method
_NO_CODE = "harness default: paper 002 releases no code (METHODS.md 3.3)"


@dataclass(frozen=True)
class PegOptions(BaseLossOptions):
    """PEG's ``method_options``: the loss's hyperparameters and its ablation switches (and, inherited, ``base``
    and ``base_options``: PEG's progressive weights around another method's per-sample loss)."""

    alpha: float = option(0.5, doc="momentum of the bias t (t = alpha * mean positive similarity + (1 - alpha) * t)",
                          bounds="[0, 1]", source="paper 002 §3.1 (alpha = 0.5)")
    beta: float = option(0.1, doc="margin of the batch threshold sigma = mean positive similarity - beta",
                         unit="cosine similarity", source="paper 002 §3.1 (beta = 0.1)")
    tau: float | None = option(None, doc="temperature of the PEG loss; null: the spec's temperature (which the "
                                         "logged plain InfoNCE always uses); none around a base", bounds="(0, inf)",
                               source="harness default: the spec's temperature (paper 002 §3.1: 0.01, the paper "
                                      "preset's)")
    a_mode: str = option("pos", doc="a_n = t + s(q, p) (pos, the paper's equation) or t + s(q, n) (neg, "
                                    "CurricularFace)",
                         choices=A_MODES, source="paper 002 §3.1 equation (METHODS.md 3.3)")
    weight_queries: bool = option(True, doc="down-weight likely false positives (w_q); off: plain InfoNCE weights",
                                  source="paper 002 §3.1 (the full loss)")
    scale_negatives: bool = option(True, doc="scale hard negatives' logits by a_n; off: a_n = 1 (must be off around "
                                             "a base other than uniform)",
                                   source="paper 002 §3.1 (the full loss)")
    t_mode: str = option("momentum", doc="t updated by momentum each batch, or kept constant at t_init",
                         choices=T_MODES, source="paper 002 §3.1 (momentum bias)")
    t_init: float = option(0.0, doc="t0, or the constant t when t_mode is constant",
                           source="paper 002 §3.1 (t^(0) = 0)")
    statistics: str = option("global", doc="batch statistics over the all-gathered batch (global) or this rank's "
                                           "queries (local)", choices=STATISTICS,
                             source=_NO_CODE + "; the paper does not say, B counts the global batch")
    record_query_weights: bool = option(False, doc="write w_q per training query to method/query_weights.tsv",
                                        source="harness default: a diagnostic file, off unless asked for")
    epochs: int | None = option(
        None, doc="the run's length in epochs over its training rows: train.steps must be ceil(epochs x rows / "
                  "(batch_size x grad_accum)), checked when the data is loaded (a mixture built by the user, whose "
                  "row count the suite cannot know); null: steps as given", bounds="[1, inf)",
        source="harness default: no check; paper 002 \"Implementation details\" (5 epochs) where a scale sets it")
    pretrain: dict[str, Any] | None = option(
        None, doc="RetroMAE pre-training first: {preset, train, options} (methods.retromae: train overrides its "
                  "preset, options name the corpora); the fine-tuning starts from the pre-trained encoder",
        source="paper 002 \"Training\" (MAE-style pre-training on Wudao, then fine-tuning); null: the backbone as "
               "given")


@register_method("peg")
class PEG(Method):
    """PEG's progressive loss on the trainer's InfoNCE candidates; vanilla InfoNCE with both ingredients off.

    Options (``TrainSpec.method_options``): ``alpha``, ``beta``, ``tau`` (None: the spec's
    temperature, which the logged plain InfoNCE always uses), ``a_mode`` ("pos" | "neg"), ``weight_queries`` (w_q),
    ``scale_negatives`` (a_n), ``t_mode`` ("momentum" | "constant"), ``t_init`` (t0, or the constant t),
    ``statistics`` ("global": all-gathered batch; "local": this rank's queries) and
    ``record_query_weights`` (write w_q per training query to ``method/query_weights.tsv``).
    Logged per step (``method`` in the training log): t, sigma, the mean positive similarity,
    ``downweighted_share`` (queries below sigma: down-weighted when ``weight_queries`` is on) and
    the mean applied w_q, and the shares of negatives that meet the a_n condition
    (``modulated_share``; scaled when ``scale_negatives`` is on) and that are emphasised
    (a_n > 1) or damped (a_n < 1).  The ablations thus log what full PEG would have selected.

    Around a base (``base``, ``base_options``; :mod:`harness.method.compose`) PEG keeps only its
    progressive query weights: the training loss is ``mean_q w_q * l_q`` with ``l_q`` the base's
    per-sample loss (SPLADE's includes its FLOPS term) and w_q, sigma and t computed as above (no
    gradient through w_q; t is method state).  The positive similarity s(q, p) PEG reads is the
    candidates' score when the base formed InfoNCE candidates and the spec's similarity is ``cos``
    (``uniform``, ``debiased``); otherwise (SPLADE's dot products, a base without candidates) the
    cosine of each query with its positive passage from the encoded ``query``/``passage`` views.
    harness default: normalise to cosine rather than refuse, since sigma's margin beta and the ratio
    s(q, p) / sigma are defined on cosine similarities (paper 002 §3.1).  The a_n shares are logged
    only where the candidates' cosines are read.  a_n (``scale_negatives``) rescales logits inside
    InfoNCE's log-sum-exp, which no wrapper of another loss reaches: it must be off around a base,
    and so must ``tau`` and ``a_mode`` (they only shape a_n's loss), except around ``uniform``, where
    a_n on makes PEG form its own loss from the base's InfoNCE candidates, exactly the method alone.
    """

    description = "PEG progressive loss (paper 002) and vanilla InfoNCE ablations; its query weights wrap a base"
    presets = {"tiny": TINY, "small": SMALL, "paper": PAPER}
    Options = PegOptions

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        opts = super().resolve_options(options)
        base = opts["base"]
        if base and not _own_loss(opts):
            if opts["scale_negatives"]:
                raise ConfigError(f"method 'peg' around base {base!r}: scale_negatives (a_n) rescales hard negatives "
                                  f"inside InfoNCE's log-sum-exp, which a wrapper of another method's per-sample "
                                  f"losses cannot reach; set scale_negatives: false (only the progressive weights "
                                  f"w_q wrap a base; a_n is kept only around base 'uniform')")
            # Options that only shape PEG's own loss would be silently ignored around a base.
            if opts["tau"] is not None:
                raise ConfigError(f"method 'peg' around base {base!r}: tau is the temperature of PEG's own loss; "
                                  f"the base's loss uses its own (the spec's temperature): remove tau")
            if opts["a_mode"] != "pos":
                raise ConfigError(f"method 'peg' around base {base!r}: a_mode shapes a_n only, which is off around "
                                  f"a base: remove a_mode")
        return opts

    # ------------------------------------------------------------------ run length in epochs
    @staticmethod
    def epoch_steps(epochs: int, rows: int, spec: TrainSpec) -> int:
        """``ceil(epochs x rows / global batch)``: paper 002's 5 epochs over 110M pairs at 13,824 per step are
        ceil(5 x 110e6 / 13824) = 39786 steps ("Implementation details", "Dataset Source")."""
        return math.ceil(epochs * rows / (spec.batch_size * spec.grad_accum))

    def prepare(self, spec: TrainSpec, data: TrainingData, stages: Mapping[str, StageResult]) -> Prepared:
        """The data as given; with option ``epochs``, a run whose steps are not that many epochs of the rows is
        refused, naming the steps that are (the count of a user-built mixture is known only here)."""
        epochs = self.resolve_options(dict(spec.method_options))["epochs"]
        if epochs is not None and not spec.limits:          # a smoke run's caps shorten every run on purpose
            rows = sum(data.sizes)
            want = self.epoch_steps(int(epochs), rows, spec)
            if spec.steps != want:
                raise ConfigError(
                    f"method 'peg': option epochs {epochs} over the {rows:,} training rows at "
                    f"{spec.batch_size * spec.grad_accum:,} per step is ceil({epochs} x {rows} / "
                    f"{spec.batch_size * spec.grad_accum}) = {want:,} steps, but the run has {spec.steps:,}: set "
                    f"train.steps: {want} for this data (or drop the epochs option to keep {spec.steps:,})")
        return super().prepare(spec, data, stages)

    def plan_notes(self, spec: TrainSpec) -> list[str]:
        epochs = self.resolve_options(dict(spec.method_options))["epochs"]
        if epochs is None:
            return []
        batch = spec.batch_size * spec.grad_accum
        low, high = (spec.steps - 1) * batch // epochs + 1, spec.steps * batch // epochs
        return [f"steps {spec.steps:,} must be {epochs} epochs of the training rows at {batch:,} per step "
                f"(ceil({epochs} x rows / {batch})): derived from the built data, checked when it is loaded; "
                f"{spec.steps:,} steps are {epochs} epochs of {low:,} to {high:,} rows"]

    # ------------------------------------------------------------------ RetroMAE first (paper 002's pre-training)
    def pretrain_spec(self, spec: TrainSpec) -> TrainSpec | None:
        """The RetroMAE run this fine-tuning starts from (option ``pretrain``), or None.

        ``pretrain: {preset: tiny|small|paper, train: {TrainSpec overrides}, options: {corpora: [...], ...}}``;
        the backbone and the seed are the fine-tuning run's, a smoke run's caps hold for it too."""
        from methods.retromae import RetroMAE

        pre = self.stage_option(spec, "pretrain")
        if pre is None:
            return None
        limits = {"limits": spec.limits} if spec.limits else {}
        return RetroMAE.spec(str(pre.get("preset", "tiny")), **{"model": spec.model, "seed": spec.seed,
                                                                 **dict(pre.get("train") or {}),
                                                                 "method_options": dict(pre.get("options") or {}),
                                                                 **limits})

    def stages(self, spec: TrainSpec) -> list[Stage | DataStage]:
        """RetroMAE pre-training first when ``pretrain`` is set: the fine-tuning starts from its encoder."""
        pre = self.pretrain_spec(spec)
        own: list[Stage | DataStage] = []
        if pre is not None:
            given = self.resolve_options(dict(spec.method_options))["pretrain"]
            why = "the suite's pretrain option (paper 002 \"Dataset Source\": Wudao, or the corpus substituted)"
            sources = {**{f"options.{k}": why for k in dict(given.get("options") or {})},
                       **{k: why for k in dict(given.get("train") or {})}}
            own.append(Stage("pretrain", "RetroMAE pre-training (retromae)", "retromae", pre, starts_from=True,
                             sources=sources))
        return [*super().stages(spec), *own]

    def configure(self, ctx: TrainContext) -> None:
        opts = ctx.options
        # Around a base PEG reads cosines whatever the spec's similarity (see the class docstring).
        self.wraps = bool(opts["base"]) and not _own_loss(opts)
        self.base_name = opts["base"]
        self.an_measured = not self.wraps         # whether the a_n condition was read (its shares logged)
        if not self.wraps and ctx.spec.similarity != "cos":
            raise ConfigError(f"method peg: its threshold and scaling are defined on cosine similarities; "
                              f"the spec asks for {ctx.spec.similarity!r}")
        self.tau = float(ctx.spec.temperature if opts["tau"] is None else opts["tau"])
        if not 0.0 <= float(opts["alpha"]) <= 1.0 or not self.tau > 0:
            raise ConfigError(f"method peg: need 0 <= alpha <= 1 and tau > 0 (alpha={opts['alpha']}, tau={self.tau})")
        self.options = opts
        self.t = float(opts["t_init"])
        self.batches = 0
        self.query_rows: list[list[Any]] = []
        self._sums = torch.zeros(len(_SUMS), dtype=torch.float64)

    def reduce(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        opts = self.options
        if ctx.micro_step == 0:
            self._sums.zero_()
        terms = self._wrapped_terms(out, ctx) if self.wraps else self._own_terms(out, ctx)
        if opts["t_mode"] == "momentum":      # a constant t stays exactly the configured number
            self.t = float(terms.new_t)
        self.batches += 1
        self._accumulate(terms, ctx)
        if opts["record_query_weights"]:
            self._record_rows(terms, ctx)
        return terms.loss

    def _own_terms(self, out: LossOutput, ctx: TrainContext) -> PEGTerms:
        """PEG's own loss over the trainer's InfoNCE candidates (no base, or a_n around ``uniform``)."""
        opts = self.options
        # The trainer's InfoNCE candidates: no second similarity matrix (or passage gather).
        cand = out.candidates if out.candidates is not None else ctx.candidates(out.q, out.p)
        sim, allowed, targets = cand.sim, cand.allowed, cand.targets
        rows = torch.arange(sim.shape[0], device=sim.device)
        pos = sim.detach()[rows, targets]
        batch_mean = ctx.all_gather(pos).mean() if opts["statistics"] == "global" else None
        return peg_from_scores(sim, targets, allowed, self.t, alpha=float(opts["alpha"]), beta=float(opts["beta"]),
                               tau=self.tau, a_mode=opts["a_mode"], batch_mean=batch_mean,
                               weight_queries=opts["weight_queries"], scale_negatives=opts["scale_negatives"],
                               momentum=opts["t_mode"] == "momentum")

    def _wrapped_terms(self, out: LossOutput, ctx: TrainContext) -> PEGTerms:
        """The base's per-sample losses times w_q, with the statistics PEG alone would log."""
        opts = self.options
        cand = out.candidates
        measured = cand is not None and ctx.spec.similarity == "cos"
        if cand is not None and measured:
            sim = cand.sim.detach()
            sim = sim.to(torch.promote_types(sim.dtype, torch.float32))
            allowed, targets = cand.allowed, cand.targets
            pos = sim[torch.arange(sim.shape[0], device=sim.device), targets]
        else:
            pos = self._positive_cosines(out, ctx)
        if out.losses.shape != pos.shape:
            raise ConfigError(f"method 'peg' around base {self.base_name!r}: the base gives {out.losses.numel()} "
                              f"per-sample losses for {pos.numel()} queries; PEG weights one loss per query")
        batch_mean = ctx.all_gather(pos).mean() if opts["statistics"] == "global" else None
        w = progressive_weights(pos, self.t, alpha=float(opts["alpha"]), beta=float(opts["beta"]),
                                batch_mean=batch_mean, weight_queries=opts["weight_queries"],
                                momentum=opts["t_mode"] == "momentum")
        if measured:
            hard = _hard_negatives(sim, pos, w.above, targets)
        else:       # no cosine candidate matrix: no negatives are counted (their shares are not logged)
            allowed = torch.ones((len(pos), 1), dtype=torch.bool, device=pos.device)
            targets = torch.zeros(len(pos), dtype=torch.long, device=pos.device)
            hard = torch.zeros_like(allowed)
        self.an_measured = measured
        losses = w.weights.to(out.losses.dtype) * out.losses
        return PEGTerms(losses.mean(), losses, w.new_t, w.sigma, w.batch_mean, pos, w.weights, w.above, hard,
                        allowed, targets, None)

    def _positive_cosines(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        """(B,) cos(q, p) of each local query with its positive (the first passage of its group), no gradient."""
        encoded = out.encoded
        if encoded is None or "query" not in encoded.views or "passage" not in encoded.views:
            views = ", ".join(encoded.views) if encoded is not None else "none"
            raise ConfigError(f"method 'peg' around base {self.base_name!r}: PEG reads each query's similarity with "
                              f"its positive from the encoded 'query' and 'passage' views; this base's batches have "
                              f"{views}")
        q, p = out.q.detach(), out.p.detach()
        dtype = torch.promote_types(torch.promote_types(q.dtype, p.dtype), torch.float32)
        positives = p[::ctx.query_batch().passages_per_query]
        return F.cosine_similarity(q.to(dtype), positives.to(dtype), dim=-1)

    def _accumulate(self, terms: PEGTerms, ctx: TrainContext) -> None:
        with torch.no_grad():
            modulated, emphasised, damped = terms.modulation_counts()
            local = torch.tensor([len(terms.pos), int(terms.above.sum()), float(terms.weights.sum()),
                                  terms.n_negatives, modulated, emphasised, damped,
                                  float(terms.sigma), float(terms.batch_mean), 1.0], dtype=torch.float64)
        # Counts add over ranks; sigma and the mean are averaged over ranks and micro-batches.
        self._sums += ctx.all_reduce_sum(local)

    def _record_rows(self, terms: PEGTerms, ctx: TrainContext) -> None:
        examples = torch.tensor(ctx.query_batch().examples, dtype=torch.float64).reshape(-1, 2)
        values = torch.stack([terms.pos, terms.weights], 1).double().cpu()
        local = torch.cat([examples, values], 1)
        every = ctx.all_gather(local.to(terms.pos.device)).cpu()
        names = ctx.data.names
        for source, row, pos, w in every.tolist():
            self.query_rows.append([ctx.step + 1, names[int(source)], int(row), round(pos, 6), round(w, 6)])

    def scalars(self) -> dict[str, float]:
        s = dict(zip(_SUMS, self._sums.tolist()))
        queries, negatives, batches = max(s["queries"], 1.0), max(s["negatives"], 1.0), max(s["batches"], 1.0)
        out = {"t": self.t, "sigma": s["sigma"] / batches, "pos_sim": s["pos_mean"] / batches,
               "downweighted_share": 1.0 - s["above"] / queries, "mean_w": s["sum_w"] / queries}
        if not getattr(self, "an_measured", True):      # around a base read without cosine candidates
            return out
        return {**out, "modulated_share": s["modulated"] / negatives, "emphasised_share": s["emphasised"] / negatives,
                "damped_share": s["damped"] / negatives}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"t": self.t, "batches": self.batches}
        if self.options["record_query_weights"]:
            state["query_rows"] = [list(r) for r in self.query_rows]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.t = float(state["t"])
        self.batches = int(state["batches"])
        self.query_rows = [list(r) for r in state.get("query_rows", [])]

    def export(self, ctx: TrainContext, directory: Path) -> None:
        """``peg_state.json`` (final t, options), the progressive-state plot, and the w_q records if asked."""
        atomic_write_json(directory / "peg_state.json", {"t": self.t, "batches": self.batches, "tau": self.tau,
                                                         "options": self.options})
        if self.options["record_query_weights"]:
            with atomic_write(directory / "query_weights.tsv") as handle:
                handle.write("step\tsource\trow\tpos_sim\tw\n")
                for r in self.query_rows:
                    handle.write("\t".join(map(str, r)) + "\n")
        records = [{"step": r["step"], **r["method"]} for r in read_log(directory.parent / LOG_FILE)
                   if isinstance(r.get("method"), dict) and "t" in r["method"]]
        if records:
            progressive_state_figure(records, directory / "progressive_state")


def _own_loss(opts: Mapping[str, Any]) -> bool:
    """Whether PEG forms its own loss: no base, or a_n kept around ``uniform`` (whose losses are InfoNCE over
    the same candidates, so PEG's loss on them is exactly PEG alone)."""
    return not opts["base"] or (opts["base"] == "uniform" and bool(opts["scale_negatives"]))


_SUMS = ("queries", "above", "sum_w", "negatives", "modulated", "emphasised", "damped", "sigma", "pos_mean",
         "batches")


def progressive_state_figure(records: list[dict[str, Any]], stem: str | Path, label: str = "PEG") -> list[Path]:
    """Plot t, sigma and the down-weighted / modulated / emphasised / damped shares over steps (PNG + PDF)."""
    from reports.plots import save_figure, training_curves_figure  # lazy (start-up speed): imports matplotlib

    # The a_n shares are absent from runs around a base without cosine candidates (PEG.scalars).
    plotted = [name for name in PLOTTED if any(name in r for r in records)]
    fig = training_curves_figure({label: records}, scalars=plotted, height_per_scalar=2.0)
    return save_figure(fig, stem)


def read_query_weights(path: str | Path) -> list[dict[str, Any]]:
    """The ``query_weights.tsv`` a run with ``record_query_weights`` wrote (one dict per query and batch)."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != ["step", "source", "row", "pos_sim", "w"]:
        raise InputError(path, "expected the header step, source, row, pos_sim, w", 1)
    out = []
    for number, line in enumerate(lines[1:], start=2):
        parts = line.split("\t")
        try:
            out.append({"step": int(parts[0]), "source": parts[1], "row": int(parts[2]),
                        "pos_sim": float(parts[3]), "w": float(parts[4])})
        except (IndexError, ValueError):
            raise InputError(path, f"malformed row {line!r}", number) from None
    return out
