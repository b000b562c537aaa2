"""What the trainer offers methods (METHODS.md section 7): :class:`TrainContext`.

Every hook of :class:`harness.method.Method` receives the context.  It exposes the
run (spec, data, step, rank), the current micro-batch, and these services:

* ``all_gather(t)``: every rank's tensor concatenated (no gradient);
* ``group_gradients(losses, group_ids, params)``: per-group flattened gradients of
  the group-mean loss on a parameter subset (``named_parameters(regex)``);
* ``add_weight_optimizer(...)``: a non-model optimizer for a weight vector, stepped
  by the trainer on the accumulation boundary and saved in checkpoints;
* ``set_sampler_weights(w)``: change the dataset sampling distribution;
* ``load_frozen_model(name)`` / ``frozen_losses(...)``: a second, frozen encoder run
  under no_grad on the same micro-batch (the tDRO reference model);
* ``candidates(q, p)`` / ``per_sample_losses(q, p)``: the InfoNCE candidate scores and
  per-sample losses under the spec (or other negative settings);
* ``info_nce_losses(encoded)``: the default per-sample loss of ``Method.losses``;
* ``query_batch()``: the current micro-batch as the default query/passage rows (the
  services above that need candidates or passages check this, not ``batch`` blindly).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from harness.errors import ConfigError
from harness.train import distributed as D
from harness.train.batching import Batch, TrainBatch, tokenize_batch
from harness.train.encoding import encode_chunks
from harness.train.losses import candidate_info_nce, candidate_mask, similarity_scores
from harness.train.model import load_frozen_model
from harness.train.tokens import TokenCache

if TYPE_CHECKING:
    from harness.data.collections import TrainingData
    from harness.train.samplers import WeightedSampler
    from harness.train.spec import TrainSpec
    from harness.train.stages import StageResult


@dataclass
class Candidates:
    """The InfoNCE candidates of the local queries of one micro-batch.

    ``sim`` (B, P): the spec's similarity (cos/dot, *not* divided by the temperature, at
    least fp32) of each local query with every candidate column (own group, local batch, or
    all ranks' passages gathered with gradient); ``allowed`` (B, P) bool: the query's
    candidates, its positive included; ``targets`` (B,): the column of its positive.
    """

    sim: torch.Tensor
    allowed: torch.Tensor
    targets: torch.Tensor


@dataclass
class EncodedBatch:
    """The representations of one micro-batch: one (rows, D) tensor per view of the batch.

    Under the gradient cache they are leaf tensors, so a loss computed from them alone
    is what the cache differentiates.  ``candidates`` is filled by the default InfoNCE
    loss (:meth:`TrainContext.info_nce_losses`), so a method that forms another loss
    over the same candidates (PEG) needs no second similarity matrix or passage gather.
    """

    views: dict[str, torch.Tensor]
    candidates: Candidates | None = None

    def __getitem__(self, view: str) -> torch.Tensor:
        try:
            return self.views[view]
        except KeyError:
            raise ConfigError(f"the encoded batch has no view {view!r}; views: {', '.join(self.views)}") from None


@dataclass
class LossOutput:
    """Per-sample results of one micro-batch on one rank (what ``observe``/``reduce`` receive).

    ``losses`` carries the autograd graph (to the model, or to the cached representations
    under the gradient cache); ``group_ids`` are source (or other group) indices, a long
    tensor; ``encoded`` holds the representations the losses came from.
    """

    losses: torch.Tensor
    group_ids: torch.Tensor
    encoded: EncodedBatch | None = None
    batch: Batch | None = None

    def _view(self, name: str) -> torch.Tensor:
        if self.encoded is None:
            raise ConfigError(f"this loss output holds no encoded {name} view")
        return self.encoded[name]

    @property
    def q(self) -> torch.Tensor:
        """Query representations (default batches)."""
        return self._view("query")

    @property
    def p(self) -> torch.Tensor:
        """Passage representations, ``passages_per_query`` per query (default batches)."""
        return self._view("passage")

    @property
    def candidates(self) -> Candidates | None:
        return None if self.encoded is None else self.encoded.candidates


@dataclass
class WeightOptimizer:
    """A non-model optimizer over weight tensors (e.g. log-alpha in tDRO)."""

    name: str
    params: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    scheduler: Any = None
    max_norm: float | None = None          # clip the gradient vector to this L2 norm before stepping
    average_accumulation: bool = True      # divide the accumulated gradient by the micro-batch count

    def step(self, grad_accum: int) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.average_accumulation and grad_accum > 1:
            for g in grads:
                g.div_(grad_accum)
        if self.max_norm is not None and grads:
            torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=False)

    def state_dict(self) -> dict[str, Any]:
        return {"params": [p.detach().clone() for p in self.params], "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for p, saved in zip(self.params, state["params"]):
                p.copy_(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])


@dataclass
class FrozenModel:
    model: torch.nn.Module
    tokenizer: Any
    encoding: dict[str, Any]


@dataclass
class TrainContext:
    spec: TrainSpec
    data: TrainingData
    model: torch.nn.Module                 # the unwrapped EmbeddingModel being trained
    tokenizer: Any
    device: torch.device
    options: dict[str, Any] = field(default_factory=dict)
    sampler: WeightedSampler | None = None
    rank: int = 0
    world_size: int = 1
    step: int = 0                          # optimizer steps completed
    micro_step: int = 0                    # index of the current micro-batch within the step
    batch: Batch | None = None
    encoding: dict[str, Any] = field(default_factory=dict)   # pooling / normalize / append_eos of the model
    gradcache: bool = False
    autocast: Callable[[], Any] | None = None
    weight_optimizers: dict[str, WeightOptimizer] = field(default_factory=dict)
    # The finished stages the method declared (harness.train.stages), by name, and the values its
    # ``prepare`` handed over: what hooks read instead of state stashed before training.
    stages: Mapping[str, StageResult] = field(default_factory=dict)
    prepared: Mapping[str, Any] = field(default_factory=dict)
    # Token ids per text, one cache per tokenizer (harness.train.tokens): not state, a resumed run refills it.
    token_caches: list[TokenCache] = field(default_factory=list, repr=False)

    def token_cache(self, tokenizer: Any) -> TokenCache:
        """The run's :class:`~harness.train.tokens.TokenCache` of ``tokenizer`` (made on first use)."""
        for cache in self.token_caches:
            if cache.tokenizer is tokenizer:
                return cache
        self.token_caches.append(TokenCache(tokenizer))
        return self.token_caches[-1]

    @property
    def is_boundary(self) -> bool:
        """True on the last micro-batch of an optimizer step."""
        return self.micro_step == self.spec.grad_accum - 1

    def query_batch(self) -> TrainBatch:
        """The current micro-batch as query/passage rows; ConfigError outside a step or for a method-built batch."""
        if self.batch is None:
            raise ConfigError("no micro-batch: query/passage services are only available inside a training step")
        if not isinstance(self.batch, TrainBatch):
            raise ConfigError(f"the micro-batch is a {type(self.batch).__name__} with views "
                              f"{', '.join(self.batch.views)}, not query/passage rows: the InfoNCE "
                              "candidates need the default batch (or a method's own losses)")
        return self.batch

    def batch_group_ids(self) -> torch.Tensor:
        """The group (source) id of each local sample of the current micro-batch, on this device."""
        if self.batch is None:
            raise ConfigError("no micro-batch: group ids are only available inside a training step")
        return torch.as_tensor(self.batch.group_ids, device=self.device)

    # ---------------------------------------------------------------- collectives
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenate ``tensor`` (same shape on every rank) over ranks, without gradient."""
        return D.all_gather_nograd(tensor)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return D.all_reduce_sum(tensor)

    # ---------------------------------------------------------------- parameters and gradients
    def named_parameters(self, pattern: str) -> list[tuple[str, torch.nn.Parameter]]:
        """Trainable parameters whose names match the regex ``pattern`` (``re.search``)."""
        regex = re.compile(pattern)
        found = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad and regex.search(n)]
        if not found:
            raise ConfigError(f"no trainable parameter name matches {pattern!r}")
        return found

    def group_gradients(self, losses: torch.Tensor, group_ids: torch.Tensor, params: Sequence[torch.Tensor],
                        groups: Sequence[int] | None = None) -> dict[int, torch.Tensor]:
        """``{g: flat grad of mean(losses[group_ids == g]) w.r.t. params}`` for each present group.

        The graph is retained, so the training loss can still be backpropagated.
        Needs the full autograd graph, hence not available with the gradient cache.
        """
        if self.gradcache:
            raise ConfigError("per-group gradients need the model graph; turn off gradcache_chunk_size")
        params = list(params)
        present = torch.unique(group_ids).tolist() if groups is None else list(groups)
        out: dict[int, torch.Tensor] = {}
        for g in present:
            mask = group_ids == g
            if not bool(mask.any()):
                continue
            grads = torch.autograd.grad(losses[mask].mean(), params, retain_graph=True, allow_unused=True)
            out[int(g)] = torch.cat([(torch.zeros_like(p) if gr is None else gr).reshape(-1)
                                     for p, gr in zip(params, grads)])
        return out

    # ---------------------------------------------------------------- weight optimizers and sampler
    def add_weight_optimizer(self, name: str, params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer,
                             scheduler: Any = None, max_norm: float | None = None,
                             average_accumulation: bool = True) -> WeightOptimizer:
        if name in self.weight_optimizers:
            raise ConfigError(f"weight optimizer {name!r} is registered twice")
        wo = WeightOptimizer(name, list(params), optimizer, scheduler, max_norm, average_accumulation)
        self.weight_optimizers[name] = wo
        return wo

    def set_sampler_weights(self, weights: Sequence[float]) -> None:
        """New sampling weights (one per source, any positive scale) from the next micro-batch on."""
        if self.sampler is None:
            raise ConfigError("the sampler does not exist yet")
        self.sampler.set_weights([float(w) for w in weights])

    # ---------------------------------------------------------------- frozen second model
    def load_frozen_model(self, name: str) -> FrozenModel:
        """Load a frozen encoder (alias, path, trained folder or LoRA adapter) on this device."""
        model, tokenizer, enc = load_frozen_model(name, self.spec)
        return FrozenModel(model.to(self.device), tokenizer, enc)

    @torch.no_grad()
    def frozen_embeddings(self, frozen: FrozenModel) -> tuple[torch.Tensor, torch.Tensor]:
        """The frozen model's query and passage embeddings of the current micro-batch."""
        batch = self.query_batch()
        view = TrainBatch(batch.queries, batch.passages, batch.group_ids, batch.only_hn,
                          batch.passage_valid, batch.passages_per_query)
        tokenize_batch(view, frozen.tokenizer, self.spec, frozen.encoding["append_eos"],
                       self.token_cache(frozen.tokenizer))
        chunk = self.spec.gradcache_chunk_size
        q, _ = encode_chunks(frozen.model, view.features["query"], chunk, self.device, grad=False,
                             autocast=self.autocast)
        p, _ = encode_chunks(frozen.model, view.features["passage"], chunk, self.device, grad=False,
                             autocast=self.autocast)
        return q, p

    @torch.no_grad()
    def frozen_losses(self, frozen: FrozenModel, *, in_batch: bool | None = None,
                      cross_batch: bool | None = None) -> torch.Tensor:
        """Per-sample InfoNCE of the frozen model on the current micro-batch (spec settings by default)."""
        q, p = self.frozen_embeddings(frozen)
        return self.per_sample_losses(q, p, in_batch=in_batch, cross_batch=cross_batch, gather=D.all_gather_nograd)

    def info_nce_losses(self, encoded: EncodedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(per-sample InfoNCE, source ids)`` of the default batch under the spec's negatives
        (METHODS.md 0.1); keeps the candidates on ``encoded`` for later hooks."""
        batch = self.query_batch()
        cand = self.candidates(encoded["query"], encoded["passage"])
        encoded.candidates = cand
        losses = candidate_info_nce(cand.sim, cand.allowed, cand.targets, self.spec.temperature)
        return losses, torch.as_tensor(batch.group_ids, device=self.device)

    def per_sample_losses(self, q: torch.Tensor, p: torch.Tensor, *, in_batch: bool | None = None,
                          cross_batch: bool | None = None, gather: Callable = D.all_gather_with_grad
                          ) -> torch.Tensor:
        """InfoNCE per local query under the spec (or the given negative settings)."""
        cand = self.candidates(q, p, in_batch=in_batch, cross_batch=cross_batch, gather=gather)
        return candidate_info_nce(cand.sim, cand.allowed, cand.targets, self.spec.temperature)

    def candidates(self, q: torch.Tensor, p: torch.Tensor, *, in_batch: bool | None = None,
                   cross_batch: bool | None = None, gather: Callable = D.all_gather_with_grad) -> Candidates:
        """The InfoNCE candidates of the local queries: their similarities to the passages of the
        group, the local batch, or every rank (gathered with gradient), with the candidate mask."""
        spec, batch = self.spec, self.query_batch()
        in_batch = spec.in_batch_negatives if in_batch is None else in_batch
        cross_batch = spec.cross_batch_negatives if cross_batch is None else cross_batch
        valid = torch.as_tensor(batch.passage_valid, device=p.device)
        offset = 0
        if in_batch and cross_batch and D.is_distributed():
            p = gather(p)
            valid = D.all_gather_nograd(valid.to(torch.uint8)).bool()   # gloo has no bool
            offset = D.rank() * len(batch)
        dtype = torch.promote_types(torch.promote_types(q.dtype, p.dtype), torch.float32)
        sim = similarity_scores(q.to(dtype), p.to(dtype), spec.similarity)
        allowed, targets = candidate_mask(len(q), sim.shape[1], batch.passages_per_query, query_offset=offset,
                                          in_batch=in_batch, only_hn=torch.as_tensor(batch.only_hn, device=q.device),
                                          passage_valid=valid, device=q.device)
        return Candidates(sim, allowed, targets)
