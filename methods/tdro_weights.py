"""tDRO stage 1 (``tdro-weights``): learn dataset weights with a proxy against a frozen reference.

Per micro-batch (METHODS.md 1.2), through the trainer's hooks:

* ``observe``: per-sample HN-only InfoNCE of the proxy (``out.losses``) and of the
  frozen reference on the same inputs (no grad), all-gathered with the group ids;
  the measurement M (:func:`methods.tdro.group_measurements`) is added to the
  gradient of log alpha;
* on the last micro-batch of an optimizer step the trainer's weight optimizer
  averages the accumulated gradient, clips it to norm ``max_norm`` and takes an SGD
  ascent step of rate ``lr_alpha`` (constant); ``on_weight_step`` renormalises
  (log-softmax) and updates the running mean and the EMA (0.1) of alpha;
* ``reduce``: the alpha-weighted proxy loss with the current (just updated) alpha,
  normalised by the in-batch sum (:func:`methods.tdro.weighted_proxy_loss`).

The sequence equals repeated :func:`methods.tdro.update_weights` calls (tested).
The reference is the uniform baseline: ``reference`` (a TrainSpec dict) is trained
or reused as the ``reference`` stage (:class:`~harness.train.stages.Stage`), or ``reference_model`` names a
finished model folder; the ``proxy`` measurement uses neither.  When the reference
tokenizes exactly like the proxy (same tokenizer pipeline, padding side and EOS
rule), its forward reuses the micro-batch's token ids instead of re-tokenizing.

Exports (``<run>/method/``), named as the released code names them: ``curr_weights.json``
(final alpha), ``mean_weights.json``, ``ema_weights.json``, ``top{20..90}_weights.json``,
``bottom50_weights.json``, ``weights.json`` (final alpha, the convention suite
layouts read), ``weights_trajectory.jsonl`` (alpha after every update) and
``weights.png``/``weights.pdf`` (bars per dataset: uniform start, final, mean, EMA).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.io import atomic_write, atomic_write_json
from harness.method import Method, register_method, thawed
from harness.recipe import Preset, option, rebased
from harness.train.api import DataStage, Stage, TrainSpec, all_gather_nograd, encode_chunks, resolved_encoding
from methods.tdro import (
    STAGE1_DEFAULTS,
    STAGE1_FIXED,
    TOP_PERCENTS,
    TdroWeightsOptions,
    group_measurements,
    select_bottom,
    select_top,
    spec_with,
    weighted_proxy_loss,
)
from methods.uniform import Uniform

EMA_FACTOR = 0.1
TRAJECTORY_FILE = "weights_trajectory.jsonl"


def _stage1_preset(scale: str) -> Preset:
    return rebased(Uniform.presets[scale], {**thawed(Uniform.presets[scale]), **STAGE1_FIXED, **STAGE1_DEFAULTS},
                   "tdro-llm/tdro scripts/s1_tdro.sh (METHODS.md 1.4: mixed batches, hard negatives only, 1 + 7 "
                   "passages, 4 accumulation steps)")


def same_tokenization(a: Any, b: Any) -> bool:
    """True when two (fast) tokenizers turn text into the same ids and padding."""
    import json

    backend_a, backend_b = getattr(a, "backend_tokenizer", None), getattr(b, "backend_tokenizer", None)
    if backend_a is None or backend_b is None:
        return False

    def pipeline(backend) -> dict:
        # Truncation and padding are per-call state (every tokenize call sets them), not the pipeline.
        return {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}

    return (pipeline(backend_a) == pipeline(backend_b) and a.padding_side == b.padding_side
            and a.pad_token_id == b.pad_token_id and a.eos_token_id == b.eos_token_id)


@dataclass(frozen=True)
class StageOneOptions(TdroWeightsOptions):
    """``tdro-weights``'s options: the measurement and weight step, and the reference run it compares with."""

    reference: dict[str, object] | None = option(None, doc="the reference run's spec (set by tdro; null: the uniform "
                                                           "recipe on this spec)",
                                                 source="paper 000 (reference = the s0 uniform baseline)")
    reference_model: str | None = option(None, doc="a trained reference model to load instead of training one",
                                         source="harness default: none, the reference run is trained or reused")


@register_method("tdro-weights")
class TdroWeights(Method):
    """Stage 1 of tDRO: proxy + frozen reference, exponentiated-gradient dataset weights."""

    description = "tDRO stage 1: learn dataset weights (proxy vs frozen uniform reference)"
    presets = {scale: _stage1_preset(scale) for scale in ("tiny", "small", "paper")}
    Options = StageOneOptions

    def __init__(self) -> None:
        self.reference_path: str | None = None
        # set by configure(): the frozen reference (FrozenModel or None) and log alpha (a tensor); torch is
        # imported lazily here, so they are typed Any
        self.frozen: Any = None
        self.reuse_tokens = False
        self.log_alpha: Any = None
        self.mean: Any = None
        self.ema: Any = None
        self.initial: Any = None
        self.updates = 0
        self.trajectory: list[list[float]] = []
        self.last_measurement: list[float] = []
        self.group_losses: dict[str, float] = {}
        self.names: list[str] = []

    # ------------------------------------------------------------------ reference
    def default_reference(self, spec) -> dict[str, Any]:
        """The uniform recipe's batching and negatives on this spec (used when ``reference`` is not given)."""
        changes = {"sampling": "homogeneous", "in_batch_negatives": True, "cross_batch_negatives": True,
                   "n_hard_negatives": 1, "grad_accum": 1, "dataset_weights": None}
        return spec_with(spec, changes, {}).config_dict()

    def stages(self, spec) -> list[Stage | DataStage]:
        """The uniform reference run (unless ``measure: proxy`` or a finished ``reference_model``)."""
        opts = self.resolve_options(dict(spec.method_options))
        if opts["measure"] == "proxy" or opts["reference_model"]:
            return []
        given = opts["reference"]
        why = ("the suite's tdro option reference" if given
               else "METHODS.md 1.4 (the reference is the uniform baseline run: homogeneous batches, 1 hard "
                    "negative, in-batch and cross-batch negatives, grad-accum 1)")
        reference = TrainSpec.from_dict(given or self.default_reference(spec))
        changed = {f for f, v in reference.config_dict().items() if spec.config_dict().get(f) != v}
        return [Stage("reference", "reference (uniform)", "uniform", reference,
                      sources={name: why for name in changed})]

    def frozen_forwards(self, spec) -> int:
        return 0 if self.resolve_options(dict(spec.method_options))["measure"] == "proxy" else 1

    def reference_model(self, ctx) -> str | None:
        """The frozen reference's model folder: the reference stage's, a given ``reference_model``, or none."""
        opts = ctx.options
        if opts["measure"] == "proxy":
            return None
        if opts["reference_model"]:
            return str(opts["reference_model"])
        return str(ctx.stages["reference"].model)

    # ------------------------------------------------------------------ hooks
    def configure(self, ctx) -> None:
        import torch

        opts = ctx.options
        self.names = list(ctx.data.names)
        start = np.asarray(self.dataset_weights(ctx.spec, ctx.data), dtype=np.float64)
        if np.any(start <= 0):
            raise ConfigError("tdro-weights: every initial dataset weight must be > 0 (log alpha)")
        start = start / start.sum()
        self.initial = start
        self.mean, self.ema = start.copy(), start.copy()
        self.updates, self.trajectory = 0, []
        self.log_alpha = torch.tensor(np.log(start), dtype=torch.float32, device=ctx.device, requires_grad=True)
        sgd = torch.optim.SGD([self.log_alpha], lr=float(opts["lr_alpha"]), maximize=True)
        max_norm = opts["max_norm"]
        ctx.add_weight_optimizer("alpha", [self.log_alpha], sgd, max_norm=None if max_norm is None else float(max_norm))
        self.frozen = None
        self.reference_path = self.reference_model(ctx)     # which reference this run measured against
        if self.reference_path is not None:
            self.frozen = ctx.load_frozen_model(self.reference_path)
            self.reuse_tokens = (same_tokenization(self.frozen.tokenizer, ctx.tokenizer)
                                 and self.frozen.encoding["append_eos"] == _append_eos(ctx))

    def reference_losses(self, ctx):
        """Per-sample losses of the frozen reference on the current micro-batch (no grad)."""
        import torch

        if not self.reuse_tokens:
            return ctx.frozen_losses(self.frozen)
        feats, chunk = ctx.query_batch().features, ctx.spec.gradcache_chunk_size
        with torch.no_grad():
            q, _ = encode_chunks(self.frozen.model, feats["query"], chunk, ctx.device, grad=False,
                                 autocast=ctx.autocast)
            p, _ = encode_chunks(self.frozen.model, feats["passage"], chunk, ctx.device, grad=False,
                                 autocast=ctx.autocast)
            return ctx.per_sample_losses(q, p, gather=all_gather_nograd)

    def observe(self, out, ctx) -> None:
        proxy = out.losses.detach()
        ref = self.reference_losses(ctx) if self.frozen is not None else None
        gathered_ref = None if ref is None else ctx.all_gather(ref.detach())
        m = group_measurements(ctx.all_gather(proxy), gathered_ref, ctx.all_gather(out.group_ids), len(ctx.data),
                               measure=ctx.options["measure"], mode=ctx.options["mode"])
        self._log_group_losses(ctx, proxy, ref, out.group_ids)
        m = m.to(self.log_alpha.device)
        if self.log_alpha.grad is None:
            self.log_alpha.grad = m.clone()
        else:
            self.log_alpha.grad.add_(m)
        self.last_measurement = m.tolist()

    def _log_group_losses(self, ctx, proxy, ref, group_ids) -> None:
        """Per-dataset mean losses of this micro-batch (proxy and reference), for the training log."""
        import torch

        k = len(ctx.data)
        ids = group_ids.to(proxy.device).long()
        counts = torch.zeros(k, device=proxy.device).index_add_(0, ids, torch.ones_like(proxy))
        present = (counts > 0).tolist()
        per_group = counts.clamp(min=1)
        means = {"proxy_loss": torch.zeros(k, device=proxy.device).index_add_(0, ids, proxy.float()) / per_group}
        if ref is not None:
            means["ref_loss"] = torch.zeros(k, device=proxy.device).index_add_(0, ids, ref.float()) / per_group
        self.group_losses = {f"{kind}/{name}": float(v) for kind, values in means.items()
                             for name, v, here in zip(ctx.data.names, values.tolist(), present) if here}

    def on_weight_step(self, name: str, ctx) -> None:
        import torch

        with torch.no_grad():
            self.log_alpha.copy_(torch.log_softmax(self.log_alpha, dim=0))
        alpha = self.alpha()
        # Running mean starts at the first update (count 0), the EMA at the initial weights (released code).
        self.mean = (self.mean * self.updates + alpha) / (self.updates + 1)
        self.ema = self.ema * (1 - EMA_FACTOR) + alpha * EMA_FACTOR
        self.updates += 1
        self.trajectory.append(alpha.tolist())

    def reduce(self, out, ctx):
        import torch

        alpha = torch.softmax(self.log_alpha.detach(), dim=0)
        return weighted_proxy_loss(out.losses, out.group_ids, alpha)

    def alpha(self) -> np.ndarray:
        import torch

        return torch.softmax(self.log_alpha.detach().float(), dim=0).cpu().numpy().astype(np.float64)

    def scalars(self) -> dict[str, float]:
        if self.log_alpha is None:
            return {}
        alpha = self.alpha()
        out = {"alpha_max": float(alpha.max()), "alpha_min": float(alpha.min()),
               "alpha_entropy": float(-(alpha * np.log(np.clip(alpha, 1e-30, None))).sum())}
        out.update({f"alpha/{name}": float(a) for name, a in zip(self.names, alpha)})
        out.update({f"M/{name}": float(m) for name, m in zip(self.names, self.last_measurement)})
        out.update(self.group_losses)
        return out

    # ------------------------------------------------------------------ state and outputs
    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "ema": self.ema.tolist(), "updates": self.updates,
                "trajectory": self.trajectory, "initial": self.initial.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.ema = np.asarray(state["mean"]), np.asarray(state["ema"])
        self.initial = np.asarray(state["initial"])
        self.updates, self.trajectory = int(state["updates"]), [list(x) for x in state["trajectory"]]

    def export(self, ctx, directory: Path) -> None:
        import json

        from reports.plots import dataset_weight_figure, save_figure  # lazy (start-up speed): imports matplotlib

        names = list(ctx.data.names)
        final = self.alpha()

        def named(values) -> dict[str, float]:
            return {n: float(v) for n, v in zip(names, values)}

        atomic_write_json(directory / "curr_weights.json", named(final))
        atomic_write_json(directory / "weights.json", named(final))
        atomic_write_json(directory / "mean_weights.json", named(self.mean))
        atomic_write_json(directory / "ema_weights.json", named(self.ema))
        atomic_write_json(directory / "initial_weights.json", named(self.initial))
        for p in TOP_PERCENTS:
            if len(names) * p // 100 >= 1:
                atomic_write_json(directory / f"top{p}_weights.json", named(select_top(final, p)))
        if len(names) >= 2:
            atomic_write_json(directory / "bottom50_weights.json", named(select_bottom(final, 50)))
        with atomic_write(directory / TRAJECTORY_FILE) as handle:
            for step, alpha in enumerate(self.trajectory, start=1):
                handle.write(json.dumps({"update": step, "weights": named(alpha)}) + "\n")
        fig = dataset_weight_figure({"uniform start": named(self.initial), "tDRO final": named(final),
                                     "mean": named(self.mean), "EMA": named(self.ema)},
                                    datasets=sorted(names, key=lambda n: -final[names.index(n)]),
                                    title=f"tDRO weights ({ctx.options['measure']}, {ctx.options['mode']} mode, "
                                          f"{self.updates} updates)", reference=1.0 / len(names))
        save_figure(fig, directory / "weights")


def _append_eos(ctx) -> bool:
    return bool(resolved_encoding(ctx.spec)["append_eos"])
