"""COCO: continuous contrastive pretraining on target corpora (paper 001, METHODS.md 2.1).

Two disjoint spans of each document form a batch of 2n spans; each span's target is its
partner, its own column is removed, every other span of the *global* batch is a negative;
dot product of [CLS] (or the encoder's own pooling) with **no temperature**; the loss is
the mean over the 2n spans, both directions.  :func:`coco_loss` is the public kernel
(oracle C1); :func:`coco_losses` returns the per-span vector the trainer needs.

Across processes the spans of every rank are all-gathered *with* gradient
(:func:`harness.train.distributed.all_gather_with_grad`): each rank scores its own spans
against the gathered ones and DDP averages the gradients, which equals one process with
the global batch (the gather's backward sums every rank's gradient for each slice; tested
with 2 gloo processes).  The released code multiplies its loss by the world size instead,
because its gathered copies carry no gradient.

The method, :class:`Coco` (``coco``), trains on span pairs cut from the corpora named in
its options (:mod:`methods.coco_spans`; any BEIR-layout folder or ``corpus.jsonl``) and
ignores the ``data`` it is given: its training data *is* the corpora.  Options:

* ``corpora``: list of corpus folders/files (required);
* ``span_tokens`` (30), ``early_close`` (0.1): the released chunking rule;
* ``span_max_length`` (128): tokens per span view.

Dropout is the spec's ``dropout`` field (one switch for every method), False in COCO's presets:
the released code runs the backbone in eval mode (``self.lm.eval()``).  Off is implemented as
train mode with every dropout probability set to 0, not as ``eval()`` (what the trainer does
for other methods): HF models skip gradient checkpointing in eval mode
(``GradientCheckpointingLayer``), and COCO's paper batches (~2048 spans) need it.  For BERT-like
backbones the two give the same numbers (dropout is their only train/eval difference).

The corpora are data named in the options: keys (``TrainSpec.result_dict``) carry each corpus
file's content digest instead of its path, so the same corpus at another path reuses the run.

MLM (optional, ``mlm_weight`` > 0; :mod:`methods.coco_mlm`): the backbone is loaded with its MLM
head (refused when the model has none), each micro-batch also carries a BERT-masked copy of its
``span_a`` tokens (masks seeded by run seed, micro-batch and the document's place in the global
batch, so they do not depend on the number of processes), and the loss is the contrastive mean
plus ``mlm_weight`` times the MLM cross-entropy averaged over the masked tokens of the global batch
(2 gloo processes equal 1 process with the global batch, tested).  Not here (BERT-specific,
optional in the spec): the Condenser head.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from harness.encoders.backbone import resolve_model, tokenize
from harness.errors import ConfigError
from harness.method import Method, register_method
from harness.recipe import option, rebased
from harness.train.api import (
    Prepared,
    StageResult,
    ViewBatch,
    all_gather_with_grad,
    all_reduce_sum,
    is_distributed,
    resolved_encoding,
)
from methods.coco_mlm import MlmDenseHead, check_mlm_backbone, mask_tokens, mlm_loss_sum
from methods.coco_spans import span_sources
from methods.uniform import _PAPER, _SMALL, _TINY, Uniform

if TYPE_CHECKING:
    from harness.data.collections import TrainingData
    from harness.encoders.heads import Head
    from harness.train.api import EncodedBatch, LossOutput, TrainContext, TrainSpec

_PICK_STREAM = 0xC0C1
_MLM_STREAM = 0xC0C2
VIEWS = ("span_a", "span_b")


def coco_losses(span_a: torch.Tensor, span_b: torch.Tensor, *, rank: int = 0,
                gather: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Per-span COCO losses, (2n,): rows ``[a_0..a_{n-1}, b_0..b_{n-1}]`` of this rank.

    ``span_a[i]`` and ``span_b[i]`` are partners.  With ``gather`` (an all-gather with
    gradient) the candidates are every rank's spans and ``rank`` places the local rows in
    the global batch; without it, the local batch is the whole batch.
    """
    if span_a.shape != span_b.shape or span_a.dim() != 2:
        raise ValueError(f"span_a and span_b must both be (n, D); got {tuple(span_a.shape)}, {tuple(span_b.shape)}")
    dtype = torch.promote_types(span_a.dtype, torch.float32)
    a, b = span_a.to(dtype), span_b.to(dtype)
    all_a, all_b = (a, b) if gather is None else (gather(a), gather(b))
    n, big_n = len(a), len(all_a)
    rows = torch.cat([a, b])
    cols = torch.cat([all_a, all_b])
    logits = rows @ cols.T                                   # dot product, no temperature
    local = torch.arange(n, device=a.device) + rank * n      # global index of the local a-rows
    own = torch.cat([local, local + big_n])
    partner = torch.cat([local + big_n, local])
    self_mask = torch.zeros_like(logits, dtype=torch.bool)
    self_mask[torch.arange(2 * n, device=a.device), own] = True
    logits = logits.masked_fill(self_mask, float("-inf"))
    return F.cross_entropy(logits, partner, reduction="none")


def coco_loss(span_a: torch.Tensor, span_b: torch.Tensor) -> torch.Tensor:
    """The COCO contrastive loss of one batch: the mean over its 2n spans (oracle C1: 0.551445)."""
    return coco_losses(span_a, span_b).mean()


# What COCO changes in a fine-tuning recipe: [CLS], dot product without temperature, span pairs from
# documents mixed across corpora (weights proportional to corpus sizes), no hard negatives.
_COCO = {"pooling": "cls", "similarity": "dot", "temperature": 1.0, "normalize": False, "n_hard_negatives": 0,
         "in_batch_negatives": True, "cross_batch_negatives": True, "sampling": "mixed",
         "use_instructions": False, "append_eos": False, "dropout": False}
# paper: BERT-base (coCondenser init), 8 epochs at lr 1e-4, 128 tokens, ~2048 spans per batch, warmup 10%,
# linear decay, weight decay 0.01, fp16 (the epochs are a step count for a given corpus: set ``steps``).
_COCO_PAPER = {**_PAPER, **_COCO, "model": "Luyu/co-condenser-marco", "lr": 1e-4, "batch_size": 2048,
               "doc_max_length": 128, "schedule": "linear", "warmup_steps": 100, "steps": 1000,
               "weight_decay": 0.01, "precision": "fp16", "min_lr_ratio": 0.0}
_COCO_SMALL = {**_SMALL, **_COCO, "pooling": "mean", "doc_max_length": 128, "batch_size": 32, "steps": 100,
               "warmup_steps": 10, "lr": 2e-5, "schedule": "linear", "min_lr_ratio": 0.0}
_CODE = "OpenMatch/COCO-DR COCO/README.md, COCO/modeling.py (METHODS.md 2.1)"
COCO_PAPER = rebased(Uniform.presets["paper"], _COCO_PAPER, _CODE, [
    ("paper 001 (coCondenser init)", ["model"]),
    ("harness default: 8 epochs is a step count per corpus (set steps; warmup 10% of it)",
     ["steps", "warmup_steps"]),
])
COCO_SMALL = rebased(COCO_PAPER, _COCO_SMALL, "harness default: COCO's changes on the uniform small recipe (CPU, "
                                              "minutes)")
_COCO_TINY = {**_TINY, **_COCO, "doc_max_length": 64, "batch_size": 16, "steps": 30, "warmup_steps": 3,
              "lr": 1e-3}


_CHUNKS = "OpenMatch/COCO-DR COCO/helper/create_train_co_short.py"


@dataclass(frozen=True)
class CocoOptions:
    """COCO's options: the corpora, the released chunking rule and the optional MLM term."""

    corpora: list[str] = option([], doc="corpus folders or files to cut span pairs from (required)",
                                source="harness default: none; a run names its target corpora")
    span_tokens: int = option(30, doc="tokens a span chunk is packed to", unit="tokens", bounds="[1, inf)",
                              source=_CHUNKS + " (about 30 tokens)")
    early_close: float = option(0.1, doc="probability of closing a chunk early", bounds="[0, 1]",
                                source=_CHUNKS + " (random close, p 0.1)")
    span_max_length: int = option(128, doc="tokens per span view", unit="tokens", bounds="[1, inf)",
                                  source="OpenMatch/COCO-DR COCO/README.md (maximum sequence length 128)")
    mlm_weight: float = option(0.0, doc="weight of the MLM cross-entropy beside the contrastive loss (0: none)",
                               bounds="[0, inf)", source="harness default: off (the Condenser MLM is BERT-specific; "
                                                         "METHODS.md 2.1)")
    mlm_probability: float = option(0.15, doc="share of tokens masked for the MLM term", bounds="(0, 1)",
                                    source="OpenMatch/COCO-DR COCO/modeling.py (whole-word masking rate 0.15)")


@register_method("coco")
class Coco(Method):
    """Contrastive pretraining on span pairs of target corpora (COCO, paper 001)."""

    description = "COCO: contrastive span-pair pretraining on target corpora (COCO-DR, paper 001)"
    presets = {"tiny": rebased(COCO_SMALL, _COCO_TINY, "harness default: COCO's changes on the uniform tiny recipe "
                                                       "(seconds)"),
               "small": COCO_SMALL, "paper": COCO_PAPER}
    Options = CocoOptions

    def span_data(self, spec: TrainSpec) -> TrainingData:
        """The span sources of the corpora in ``spec.method_options`` (chunked with the model's tokenizer)."""
        from transformers import AutoTokenizer

        options = self.resolve_options(dict(spec.method_options))
        tokenizer = AutoTokenizer.from_pretrained(resolve_model(spec.model)[0])
        return span_sources([str(c) for c in options["corpora"]], tokenizer, span_tokens=int(options["span_tokens"]),
                            early_close=float(options["early_close"]), seed=spec.seed)

    def validate(self, spec: TrainSpec) -> None:
        self.representation_head(spec)                 # an MLM term on a model without MLM head: refused first

    def prepare(self, spec: TrainSpec, data: TrainingData, stages: Mapping[str, StageResult]) -> Prepared:
        """Train on the corpora's span pairs (``data``, the fine-tuning collection, is not used)."""
        return Prepared(self.span_data(spec))

    @staticmethod
    def mlm_weight(spec: TrainSpec) -> float:
        weight = float(dict(spec.method_options).get("mlm_weight", 0.0) or 0.0)
        if weight < 0:
            raise ConfigError(f"method 'coco': mlm_weight must be >= 0, got {weight}")
        return weight

    def representation_head(self, spec: TrainSpec) -> Head | None:
        if self.mlm_weight(spec) == 0:
            return None

        check_mlm_backbone(spec.model)
        enc = resolved_encoding(spec)
        return MlmDenseHead(str(enc["pooling"]), bool(enc["normalize"]))

    def dataset_weights(self, spec: TrainSpec, data: TrainingData) -> np.ndarray:
        # Documents of all corpora are shuffled together in the released data: weight by corpus size.
        if spec.dataset_weights is not None:
            return super().dataset_weights(spec, data)
        sizes = np.array(data.sizes, dtype=float)
        return sizes / sizes.sum()

    def configure(self, ctx: TrainContext) -> None:
        # spec.dropout False: train mode with zero dropout probabilities instead of the trainer's eval mode,
        # because HF skips gradient checkpointing in eval mode (see the module docstring).
        if not ctx.spec.dropout:
            ctx.model.train()
            for module in ctx.model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0

    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> ViewBatch:
        """Two distinct chunks of each sampled document (seeded by run seed and micro-batch), this rank's slice."""
        rng = np.random.default_rng([ctx.spec.seed, _PICK_STREAM, micro_index])
        pairs = []
        for s, r in examples:                  # the whole global batch, so the draws do not depend on ranks
            chunks = ctx.data.sources[s].rows[r].pos
            i, j = rng.choice(len(chunks), size=2, replace=False)
            pairs.append((chunks[int(i)], chunks[int(j)]))
        per_rank = len(examples) // ctx.world_size
        lo, hi = ctx.rank * per_rank, (ctx.rank + 1) * per_rank
        groups = np.array([s for s, _ in examples], dtype=np.int64)
        length = int(ctx.options.get("span_max_length", 128))
        eos = bool(ctx.encoding.get("append_eos", False))
        views = {name: dict(tokenize(ctx.tokenizer, [p[k] for p in pairs[lo:hi]], length, append_eos=eos))
                 for k, name in enumerate(VIEWS)}
        batch = CocoBatch(views, groups[lo:hi], groups, list(examples[lo:hi]))
        if float(ctx.options.get("mlm_weight", 0.0) or 0.0) > 0:
            # One seed per document of the global batch, not per rank: 2 processes mask what 1 process masks.
            seeds = [int(np.random.SeedSequence([ctx.spec.seed, _MLM_STREAM, micro_index, g]).generate_state(1)[0])
                     for g in range(lo, hi)]
            ids, labels = mask_tokens(views["span_a"]["input_ids"], views["span_a"]["attention_mask"], ctx.tokenizer,
                                      float(ctx.options.get("mlm_probability", 0.15)), row_seeds=seeds,
                                      width=length)
            batch.mlm = {"input_ids": ids, "attention_mask": views["span_a"]["attention_mask"], "labels": labels}
        return batch

    def losses(self, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        gather = all_gather_with_grad if is_distributed() else None
        losses = coco_losses(encoded["span_a"], encoded["span_b"], rank=ctx.rank, gather=gather)
        return losses, ctx.batch_group_ids().repeat(2)

    def reduce(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        """The contrastive mean, plus ``mlm_weight`` times the MLM loss of the masked spans when it is on."""
        loss = out.losses.mean()
        weight = float(ctx.options.get("mlm_weight", 0.0) or 0.0)
        batch = ctx.batch
        if weight == 0 or not isinstance(batch, CocoBatch) or batch.mlm is None:
            return loss
        if ctx.gradcache:
            raise ConfigError("method 'coco': the MLM term needs the model graph; turn off gradcache_chunk_size")
        feats = {k: v.to(ctx.device) for k, v in batch.mlm.items()}
        backbone: torch.nn.Module = ctx.model.backbone      # type: ignore[assignment]
        logits = backbone(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"]).logits
        # The mean over the masked tokens of the global batch: this rank's sum over the global count, times the
        # world size because DDP averages the ranks' gradients (and the trainer logs the ranks' mean loss).
        total, count = mlm_loss_sum(logits, feats["labels"])
        sums = all_reduce_sum(torch.tensor([float(total.detach()), float(count)], dtype=torch.float64))
        global_count = max(float(sums[1]), 1.0)
        mlm = total * (ctx.world_size / global_count)
        contrastive = all_reduce_sum(loss.detach().double().reshape(1)) / ctx.world_size
        self.last = {"mlm_loss": float(sums[0]) / global_count, "contrastive_loss": float(contrastive)}
        return loss + weight * mlm.to(loss.dtype)

    last: dict[str, float]

    def scalars(self) -> dict[str, float]:
        return dict(getattr(self, "last", {}))


@dataclass
class CocoBatch(ViewBatch):
    """COCO's span-pair views, with the BERT-masked ``span_a`` tokens and labels when the MLM term is on."""

    mlm: dict[str, torch.Tensor] | None = None
