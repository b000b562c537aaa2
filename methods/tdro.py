"""tDRO (paper 000): task-level DRO learns dataset weights with a small proxy model,
then transfers them into retriever fine-tuning (METHODS.md section 1).

Two registered methods, one per stage:

``tdro-weights`` (stage 1, :mod:`methods.tdro_weights`)
    a trainable proxy and a frozen reference (the uniform baseline's checkpoint,
    declared as a stage (:class:`~harness.train.stages.Stage`) keyed like a suite cell, so a
    suite's baseline cell is reused), batches that mix every dataset per example (probability 1/k),
    hard-negative-only InfoNCE, per-sample losses of both models, a per-group
    measurement M and an exponentiated-gradient step on log alpha once per
    optimizer step; the proxy minimises the alpha-weighted loss.  It exports the
    final/mean/EMA weights, Top-p% / Bottom-50% selections, the trajectory and a
    bar chart (like the paper's Figure 3).
``tdro`` (stage 2, this module)
    declares stage 1 as a stage the engine trains first, turns its exported weights into a
    transfer plan (``prepare``) and fine-tunes with the uniform recipe (task-homogeneous batches, HN + IBN + CBN)
    using them: ``transfer: top|bottom`` (the top / bottom ``percent``% datasets at
    1/n each), ``ratio`` (alpha as the sampling distribution) or ``loss`` (uniform
    sampling, the loss of a batch from dataset g multiplied by k * alpha_g, the
    recommended form of METHODS.md 1.3).

The math is in plain, public functions that take and return tensors, pinned by the
oracles T1-T9 of METHODS.md 1.7: :func:`group_measurements`,
:func:`update_weights`, :func:`weighted_proxy_loss`, :func:`select_top`,
:func:`select_bottom`.

Design choices (and why):

* The stage-2 spec *is* the uniform baseline's spec plus ``method_options``, so the
  reference model of stage 1 is the suite's baseline cell (same content key):
  trained once, shared by every tDRO variant.  The stage-1 spec is derived from it
  (mixed sampling, HN only, ``stage1`` overrides such as 7 hard negatives and 4
  accumulation steps) and carries the full reference spec in its options, so its
  key changes whenever the reference would.
* Measurement ``mode="code"`` (default) follows the released code, which produced
  the published weights; ``mode="paper"`` is the paper's ratio of group means
  (METHODS.md 1.5 item 1, 1.6).
* Variants that differ only in how the weights are transferred share one stage-1
  run; the three measurements are three stage-1 runs.  The ``proxy`` measurement
  needs no reference, so it neither trains nor loads one.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import ConfigError
from harness.io import atomic_write_json
from harness.method import Method, get_method, register_method
from harness.recipe import BaseLossOptions, option
from harness.train.api import DataStage, Prepared, Stage, StageResult, TrainSpec
from methods.uniform import Uniform

if TYPE_CHECKING:
    import torch

    from harness.data.collections import TrainingData

MEASURES = ("relative", "excess", "proxy")
MODES = ("code", "paper")
TRANSFERS = ("top", "bottom", "ratio", "loss")
WEIGHT_SOURCES = ("final", "mean", "ema")
REF_FLOOR = 1e-4            # normalised reference losses below this count as 1 (released code)
CLIP_EPS = 1e-6             # torch.nn.utils.clip_grad_norm_'s epsilon
TOP_PERCENTS = tuple(range(20, 100, 10))
# What stage 1 always changes in the fine-tuning recipe: per-example mixing, no in-batch negatives.
STAGE1_FIXED = {"sampling": "mixed", "in_batch_negatives": False, "cross_batch_negatives": False,
                "dataset_weights": None}
# The released stage-1 script: 1 positive + 7 hard negatives, 4 accumulation steps (METHODS.md 1.4).
STAGE1_DEFAULTS = {"n_hard_negatives": 7, "grad_accum": 4}


# ---------------------------------------------------------------------------------------------- math
def group_measurements(proxy_loss: torch.Tensor, ref_loss: torch.Tensor | None, group_ids: torch.Tensor,
                       num_groups: int, measure: str = "relative", mode: str = "code") -> torch.Tensor:
    """The per-group measurement vector M (length ``num_groups``) of one (gathered) micro-batch.

    ``proxy_loss``/``ref_loss`` are per-sample losses, ``group_ids`` their dataset
    indices.  ``measure`` is ``relative`` (proxy over reference), ``excess`` (proxy
    minus reference) or ``proxy`` (proxy only; ``ref_loss`` may be None).

    ``mode="code"`` (the released code): per-sample values, then group means.
    relative: ``m_i = l^p_i / r_i`` with ``r_i = l^r_i / sum_j l^r_j`` and
    ``r_i := 1`` wherever ``r_i < 1e-4``; excess: ``m_i = l^p_i - l^r_i``; proxy:
    ``m_i = l^p_i``; then ``m_i := max(m_i, 0)``.
    ``mode="paper"``: group means first: relative ``mean(l^p_g) / mean(l^r_g)``,
    excess ``mean(l^p_g) - mean(l^r_g)``, proxy ``mean(l^p_g)`` (no clamping; a
    zero reference mean is floored at 1e-12).

    A group absent from the batch gets M_g = 0 (released code).  No gradient flows.
    """
    import torch

    if measure not in MEASURES:
        raise ConfigError(f"unknown tDRO measure {measure!r}; choose one of {', '.join(MEASURES)}")
    if mode not in MODES:
        raise ConfigError(f"unknown tDRO measurement mode {mode!r}; choose one of {', '.join(MODES)}")
    with torch.no_grad():
        proxy = proxy_loss.detach().to(torch.float32).reshape(-1)
        ids = group_ids.detach().to(device=proxy.device, dtype=torch.long).reshape(-1)
        if ids.shape != proxy.shape:
            raise ConfigError(f"group_ids has {ids.numel()} entries for {proxy.numel()} losses")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_groups):
            raise ConfigError(f"group ids must lie in [0, {num_groups}), got {ids.min()}..{ids.max()}")
        ref: torch.Tensor | None = None
        if measure != "proxy":
            if ref_loss is None:
                raise ConfigError(f"measure {measure!r} needs the reference model's losses")
            ref = ref_loss.detach().to(device=proxy.device, dtype=torch.float32).reshape(-1)
            if ref.shape != proxy.shape:
                raise ConfigError(f"ref_loss has {ref.numel()} entries for {proxy.numel()} proxy losses")
        counts = torch.zeros(num_groups, device=proxy.device).index_add_(0, ids, torch.ones_like(proxy))
        present = counts > 0
        counts = counts.clamp(min=1)

        def group_mean(values: torch.Tensor) -> torch.Tensor:
            return torch.zeros(num_groups, device=proxy.device).index_add_(0, ids, values) / counts

        if mode == "code":
            if measure == "proxy" or ref is None:
                per_sample = proxy
            elif measure == "excess":
                per_sample = proxy - ref
            else:
                scaled = ref / ref.abs().sum().clamp(min=1e-12)    # L1 normalisation over the batch
                scaled = torch.where(scaled < REF_FLOOR, torch.ones_like(scaled), scaled)
                per_sample = proxy / scaled
            return group_mean(per_sample.clamp(min=0.0))
        proxy_mean = group_mean(proxy)
        if measure == "proxy" or ref is None:
            out = proxy_mean
        elif measure == "excess":
            out = proxy_mean - group_mean(ref)
        else:
            out = proxy_mean / group_mean(ref).clamp(min=1e-12)
        return torch.where(present, out, torch.zeros_like(out))


def clip_to_norm(vector: torch.Tensor, max_norm: float = 1.0) -> torch.Tensor:
    """``vector * min(1, max_norm / (||vector||_2 + 1e-6))``: ``clip_grad_norm_`` on one vector."""
    import torch

    norm = torch.linalg.vector_norm(vector.to(torch.float32))
    return vector * torch.clamp(max_norm / (norm + CLIP_EPS), max=1.0)


def update_weights(log_weights: torch.Tensor, measurements: torch.Tensor, lr: float = 0.02,
                   max_norm: float | None = 1.0) -> torch.Tensor:
    """One exponentiated-gradient step on log-weights, as released (METHODS.md 1.2 step 4).

    ``measurements`` is M of one micro-batch, or a (micro-batches, k) stack whose mean
    is taken (gradient-accumulation averaging).  The step: clip M to L2 norm
    ``max_norm`` (None: no clipping), ascend ``log_weights + lr * M``, renormalise.
    Returns the new log-weights, ``log_softmax``-normalised (``exp`` sums to 1).
    """
    import torch

    grad = measurements.detach().to(torch.float32)
    if grad.dim() == 2:
        grad = grad.mean(dim=0)
    log_weights = log_weights.detach().to(torch.float32)
    if grad.shape != log_weights.shape:
        raise ConfigError(f"measurements of shape {tuple(grad.shape)} do not match weights {tuple(log_weights.shape)}")
    if max_norm is not None:
        grad = clip_to_norm(grad, max_norm)
    return torch.log_softmax(log_weights + lr * grad, dim=0)


def weighted_proxy_loss(losses: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The proxy's training loss: ``sum_i w_i l_i`` with ``w_i = alpha_g(i) / sum_j alpha_g(j)``
    (weights normalised by their in-batch sum, METHODS.md 1.5 item 4).  Differentiable in ``losses``."""
    import torch

    alpha = weights.detach().to(device=losses.device, dtype=losses.dtype)[group_ids.to(losses.device).long()]
    total = alpha.sum()
    if not bool(total > 0):
        raise ConfigError("every sample of the batch has weight 0")
    return (alpha / total * losses).sum() if losses.numel() else torch.zeros((), device=losses.device)


def selection_size(k: int, percent: float) -> int:
    """``floor(k * percent / 100)`` datasets (25 x 70% -> 17), at least one."""
    if not 0 < percent <= 100:
        raise ConfigError(f"percent must be in (0, 100], got {percent}")
    n = math.floor(k * percent / 100 + 1e-9)   # the epsilon keeps e.g. 10 x 70% at 7 despite rounding
    if n < 1:
        raise ConfigError(f"{percent}% of {k} datasets selects none")
    return n


def _selection(weights: Sequence[float] | np.ndarray, n: int, top: bool) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    # Stable sort: ties keep dataset order, so the choice is deterministic.
    order = np.argsort(-w if top else w, kind="stable")[:n]
    out = np.zeros_like(w)
    out[order] = 1.0 / n
    return out


def select_top(weights: Sequence[float] | np.ndarray, percent: float) -> np.ndarray:
    """Top-``percent``% selection: the ``floor(k p / 100)`` highest-weighted datasets at 1/n each, others 0."""
    return _selection(weights, selection_size(len(weights), percent), top=True)


def select_bottom(weights: Sequence[float] | np.ndarray, percent: float = 50) -> np.ndarray:
    """Bottom-``percent``% selection: the lowest-weighted datasets at 1/n each, others 0."""
    return _selection(weights, selection_size(len(weights), percent), top=False)


def transfer_plan(weights: Sequence[float] | np.ndarray, transfer: str, percent: float = 70
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(sampling weights, loss multipliers)`` of stage 2 for learned weights alpha.

    top/bottom: the selection as sampling weights; ratio: alpha; loss: uniform
    sampling with multipliers ``k * alpha_g`` (mean multiplier 1).  Multipliers are 1
    except for ``loss``.
    """
    if transfer not in TRANSFERS:
        raise ConfigError(f"unknown tDRO transfer {transfer!r}; choose one of {', '.join(TRANSFERS)}")
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ConfigError(f"learned weights must be finite, >= 0 and not all 0; got {w.tolist()}")
    w = w / w.sum()
    k = len(w)
    ones = np.ones(k)
    if transfer == "top":
        return select_top(w, percent), ones
    if transfer == "bottom":
        return select_bottom(w, percent), ones
    if transfer == "ratio":
        return w, ones
    return np.full(k, 1.0 / k), k * w


# ---------------------------------------------------------------------------------------------- specs
def spec_with(spec: TrainSpec, changes: Mapping[str, Any], method_options: dict[str, Any]) -> TrainSpec:
    """``spec`` with ``changes`` and *replaced* method options (``TrainSpec.replace`` would merge them)."""
    data = spec.to_dict()
    for key, value in changes.items():
        if key == "lora" and isinstance(value, Mapping) and data.get("lora"):
            data["lora"] = {**data["lora"], **value}
        else:
            data[key] = value
    data["method_options"] = method_options
    return TrainSpec.from_dict(data)


def reference_spec(spec: TrainSpec, options: Mapping[str, Any]) -> TrainSpec:
    """The uniform run stage 1 measures against: this run's recipe without the tDRO options
    (equal to the suite's baseline cell), on the proxy backbone, with ``reference`` overrides."""
    changes: dict[str, Any] = {"dataset_weights": None}
    if options.get("proxy_model"):
        changes["model"] = options["proxy_model"]
    changes.update(options.get("reference") or {})
    return spec_with(spec, changes, {})


def stage1_spec(spec: TrainSpec, options: Mapping[str, Any]) -> TrainSpec:
    """The stage-1 (``tdro-weights``) spec of a stage-2 run: mixed batches, HN-only, ``stage1`` overrides."""
    changes: dict[str, Any] = {**STAGE1_FIXED, **(options.get("stage1") or {})}
    if options.get("proxy_model"):
        changes["model"] = options["proxy_model"]
    measure = options["measure"]
    stage1_options = {"measure": measure, "mode": options["mode"], "lr_alpha": options["lr_alpha"],
                      "max_norm": options["max_norm"],
                      "reference": None if measure == "proxy" else reference_spec(spec, options).config_dict()}
    return spec_with(spec, changes, stage1_options)


def read_learned_weights(method_dir: str | Path, source: str = "final") -> dict[str, float]:
    """``{dataset: weight}`` a stage-1 run exported (``final``, ``mean`` or ``ema``)."""
    if source not in WEIGHT_SOURCES:
        raise ConfigError(f"unknown weight source {source!r}; choose one of {', '.join(WEIGHT_SOURCES)}")
    path = Path(method_dir) / f"{'curr' if source == 'final' else source}_weights.json"
    if not path.exists():
        raise ConfigError(f"{path}: the stage-1 run exported no {source} weights")
    return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


# ---------------------------------------------------------------------------------------------- stage 2
_S1 = "tdro-llm/tdro scripts/s1_tdro.sh (METHODS.md 1.4)"


@dataclass(frozen=True)
class TdroWeightsOptions:
    """The stage-1 options (``tdro-weights``); ``tdro`` passes its own values of these to stage 1."""

    measure: str = option("relative", doc="group measurement: loss relative to the reference, the excess over it, "
                                          "or the proxy's loss alone", choices=MEASURES,
                          source="paper 000 (relative loss, the method; excess and proxy are its ablations)")
    mode: str = option("code", doc="measurement as released (code) or as the paper writes it (paper)", choices=MODES,
                       source="METHODS.md 1.6: the released code produced the published weights")
    lr_alpha: float = option(0.02, doc="step size of the exponentiated-gradient update of log alpha",
                             bounds="(0, inf)", source="paper 000 / " + _S1 + " (2e-2, constant, SGD)")
    max_norm: float = option(1.0, doc="clip norm of the alpha-gradient (the paper's gradient normalization)",
                             source=_S1 + " (grad-norm clip 1.0; METHODS.md 1.5 item 2)")


@dataclass(frozen=True)
class TdroOptions(TdroWeightsOptions, BaseLossOptions):
    """tDRO stage 2's options: how the learned weights are transferred, and what stage 1 runs with."""

    transfer: str = option("ratio", doc="top / bottom: the top or bottom `percent`% datasets at 1/n each; ratio: "
                                        "alpha as the sampling distribution; loss: uniform sampling, batch losses "
                                        "times k * alpha_g", choices=TRANSFERS,
                           source="harness default: sample-ratio reweighting, alpha used directly "
                                  "(tdro-llm/tdro scripts/s2_train_optimized_model.sh; METHODS.md 1.3)")
    percent: float = option(70, doc="share of the datasets kept by the top / bottom transfers", unit="%",
                            source="paper 000 (top70, its best selection; METHODS.md 1.3)")
    source: str = option("final", doc="which exported weights to transfer: the final, mean or EMA alpha",
                         choices=WEIGHT_SOURCES, source="paper 000 (alpha_final; METHODS.md 1.3)")
    stage1: dict[str, object] = option(dict(STAGE1_DEFAULTS), doc="TrainSpec overrides of stage 1",
                                       source=_S1 + ": 1 + 7 hard negatives, 4 accumulation steps")
    proxy_model: str | None = option(None, doc="stage-1 proxy backbone (null: this run's model)",
                                     source="harness default: this run's backbone (paper 000's proxy is "
                                            "Qwen1.5-0.5B base; METHODS.md 1.4)")
    reference: dict[str, object] | None = option({}, doc="TrainSpec overrides of the reference run (stage 1's "
                                                         "frozen model; empty: the uniform baseline)",
                                                 source="paper 000 (reference = the s0 uniform baseline)")
    weights: dict[str, float] | None = option(None, doc="{dataset: weight} to transfer instead of running stage 1 "
                                                        "(e.g. published weights)",
                                              source="harness default: none, stage 1 learns them")


@register_method("tdro")
class Tdro(Method):
    """tDRO stage 2: the uniform recipe fine-tuned with stage-1 dataset weights (see the module docstring).

    Options: ``transfer`` (top/bottom/ratio/loss), ``percent`` (top/bottom),
    ``measure`` and ``mode`` (stage-1 measurement), ``source`` (final/mean/ema
    weights), ``lr_alpha`` and ``max_norm`` (stage-1 weight step), ``stage1``
    (TrainSpec overrides of stage 1), ``proxy_model`` (stage-1 backbone, default this
    run's), ``reference`` (TrainSpec overrides of the reference run), ``weights``
    (``{dataset: weight}``: transfer these and skip stage 1, e.g. published weights).
    """

    description = "tDRO: dataset weights learned by a proxy vs a reference, transferred to fine-tuning"
    presets = Uniform.presets
    Options = TdroOptions

    def __init__(self) -> None:
        self._multipliers: np.ndarray | None = None
        self._multiplier_tensor: Any = None     # the multipliers on the loss's device (torch imported lazily)

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        opts = super().resolve_options(options)
        if opts["transfer"] in ("top", "bottom"):
            selection_size(100, float(opts["percent"]))       # validates the range
        return opts

    # ------------------------------------------------------------------ stage 1
    def stages(self, spec: TrainSpec) -> list[Stage | DataStage]:
        """Stage 1 (``tdro-weights``, which declares its own reference run), unless ``weights`` are given."""
        opts = self.resolve_options(dict(spec.method_options))
        if opts["weights"] is not None:
            return []

        s1 = stage1_spec(spec, opts)
        given = dict(opts.get("stage1") or {})
        sources = {name: "METHODS.md 1.4 (the released stage-1 script: mixed batches, hard negatives only)"
                   for name in STAGE1_FIXED if name not in given}
        sources.update({name: "the suite's tdro option stage1" for name in given})
        sources["options.reference"] = ("METHODS.md 1.4 (the reference is the uniform baseline run on the proxy "
                                        "backbone)")
        if opts.get("proxy_model"):
            sources["model"] = ("the suite's tdro option proxy_model (paper 000 §3: the proxy is initialised "
                                "from a small LM, Qwen1.5-0.5B)")
        return [Stage("stage1", f"stage 1 (tdro-weights, {opts['measure']})", "tdro-weights", s1,
                      get_method("tdro-weights").frozen_forwards(s1), sources=sources)]

    def validate(self, spec: TrainSpec) -> None:
        if spec.dataset_weights is not None:
            raise ConfigError("tdro learns its dataset weights; remove dataset_weights from the spec")

    def learned_weights(self, spec: TrainSpec, data: TrainingData,
                        stages: Mapping[str, StageResult]) -> tuple[np.ndarray, dict[str, Any]]:
        """Alpha per source (in ``data`` order) and where it came from: given, or stage 1's export."""
        opts = self.resolve_options(dict(spec.method_options))
        if opts["weights"] is not None:
            given = {str(k): float(v) for k, v in dict(opts["weights"]).items()}
            provenance = {"weights": "given"}
        else:
            stage1 = stages["stage1"]
            given = read_learned_weights(stage1.path / "method", opts["source"])
            provenance = {"weights": f"stage 1 ({opts['source']})", "stage1_run": str(stage1.path)}
        missing = [n for n in data.names if n not in given]
        extra = sorted(set(given) - set(data.names))
        if missing or extra:
            raise ConfigError(f"tdro: learned weights do not match the training sources (missing "
                              f"{', '.join(missing) or 'none'}; unknown {', '.join(extra) or 'none'})")
        return np.array([given[n] for n in data.names], dtype=np.float64), provenance

    def prepare(self, spec: TrainSpec, data: TrainingData, stages: Mapping[str, StageResult]) -> Prepared:
        """The transfer plan from the learned weights: sampling weights for the sampler, loss multipliers."""
        opts = self.resolve_options(dict(spec.method_options))
        learned, provenance = self.learned_weights(spec, data, stages)
        sampling, multipliers = transfer_plan(learned, opts["transfer"], float(opts["percent"]))
        return Prepared(data, sampling, {"learned": learned, "sampling": sampling, "multipliers": multipliers,
                                         "provenance": provenance})

    # ------------------------------------------------------------------ trainer hooks
    def configure(self, ctx) -> None:
        if "multipliers" not in ctx.prepared:
            raise ConfigError("tdro: the transfer weights come from its stages (harness.train.stages.train_run); "
                              "do not hand this method to a Trainer directly")
        self._multipliers = np.asarray(ctx.prepared["multipliers"], dtype=np.float64)
        self._multiplier_tensor = None

    def dataset_weights(self, spec, data):
        """Before stage 1 exists (a plan): the uniform start; training uses the prepared sampling weights."""
        return np.full(len(data), 1.0 / len(data))

    def reduce(self, out, ctx):
        if self._multipliers is None or np.allclose(self._multipliers, 1.0):
            return out.losses.mean()
        import torch

        if self._multiplier_tensor is None or self._multiplier_tensor.device != out.losses.device:
            self._multiplier_tensor = torch.as_tensor(self._multipliers, dtype=out.losses.dtype,
                                                      device=out.losses.device)
        return (self._multiplier_tensor[out.group_ids] * out.losses).mean()

    def export(self, ctx, directory: Path) -> None:
        opts, prepared = ctx.options, ctx.prepared
        names = list(ctx.data.names)
        sampling = prepared["sampling"]
        atomic_write_json(directory / "weights.json", dict(zip(names, map(float, sampling))))
        atomic_write_json(directory / "transfer.json", {
            "transfer": opts["transfer"], "percent": opts["percent"], "measure": opts["measure"],
            "mode": opts["mode"], "source": opts["source"], **prepared["provenance"],
            "learned": dict(zip(names, map(float, prepared["learned"]))),
            "sampling": dict(zip(names, map(float, sampling))),
            "loss_multipliers": dict(zip(names, map(float, prepared["multipliers"])))})


__all__ = ["MEASURES", "MODES", "TRANSFERS", "Tdro", "clip_to_norm", "spec_with", "group_measurements",
           "read_learned_weights", "reference_spec", "select_bottom", "select_top", "selection_size", "stage1_spec",
           "transfer_plan", "update_weights", "weighted_proxy_loss"]
