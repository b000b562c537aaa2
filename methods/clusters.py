"""What iDRO and GroupDRO share (METHODS.md 2.2, 2.3): query clusters recomputed at each episode, a
per-sample loss, cluster statistics, and checkpointed weights.

* **Clusters.**  Before step 0 and then every ``episode_every`` steps (the trainer's episode hook),
  every training query is encoded by the current model (``encode_texts``: eval mode, no
  gradient, raw un-normalised representations as the released code) and clustered with
  ``faiss.Kmeans`` (L2, as the code; ``k``, ``niter``, ``nredo`` from the options, seeded by the
  run seed and the step, one faiss thread so a redone episode gives the same clusters).  Each
  query goes to its nearest centroid.  The assignment is method state (checkpointed), so a run
  killed during an episode redoes it and continues identically.
* **Per-sample loss.**  ``loss: "triplet"`` (the code's): softmax over [positive, one negative],
  no in-batch negatives, the spec's similarity and temperature (the presets: dot product on
  [CLS], temperature 1, i.e. none); ``loss: "trainer"``: the trainer's InfoNCE (HN/IBN/CBN).
  The group id of each sample is its query's cluster.
* **ANCE negatives** (``ance_refresh_steps`` N > 0): the engine's
  :class:`~harness.train.negatives.AnceNegatives` re-mines each query's negatives from the current
  checkpoint's top ``ance_depth`` (200) over the training corpus, ``ance_keep`` (30) kept at random,
  before step 0 (warm-up: ``ance_warmup`` ``data``, the collection's BM25 negatives, or ``bm25``) and
  every N steps; the clusters are recomputed in the same episodes unless ``episode_every`` sets
  their own schedule.  The negatives are method state (checkpointed).
* **Trace**: per optimizer step, the weights after the update, this rank's cluster mean losses
  (NaN when absent), counts in the batch and cluster sizes among the training queries, kept in the
  state and written to ``method/dro_trace.npz`` (plotted by ``reports.plots_dro``).
* **COCO first** (option ``coco``: ``{preset, train, options}``): the fine-tuning starts from a
  ``coco`` run on the named corpora, declared as a stage the engine trains first (keyed by content, shared by
  every variant with the same COCO settings); the "+COCO" rows of paper 001.
* **Parameters for per-cluster gradients** (iDRO): the regex ``params``, or by default the last
  ``blocks`` transformer blocks (names ``layer.<i>.`` / ``layers.<i>.``; LoRA parameters only, when
  the model has LoRA adapters).

Subclasses implement ``robust_loss(out, ctx)`` and their own weight state.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from harness.errors import ConfigError
from harness.io.atomic import atomic_write
from harness.method import Method
from harness.recipe import BaseLossOptions, defaults, option, rebased
from harness.train.api import AnceNegatives, DataStage, Stage, encode_texts
from methods.coco import Coco
from methods.uniform import _PAPER, _SMALL, _TINY, Uniform

if TYPE_CHECKING:
    from harness.train.api import Batch, EncodedBatch, LossOutput, TrainContext, TrainSpec

LOSSES = ("triplet", "trainer")
_BLOCK = re.compile(r"(?:^|\.)layers?\.(\d+)\.")

# The released fine-tuning: [CLS], dot product, no temperature, 1 ANCE negative per query, no in-batch negatives
# (lr 5e-6, 64 queries per GPU, K = 50 in the paper; ANCE episodes through the ance_* options).
_CLUSTER = {"pooling": "cls", "similarity": "dot", "temperature": 1.0, "normalize": False, "n_hard_negatives": 1,
            "in_batch_negatives": False, "cross_batch_negatives": False, "sampling": "mixed", "use_instructions": False,
            "append_eos": False}
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {**_PAPER, **_CLUSTER, "model": "Luyu/co-condenser-marco", "lr": 5e-6, "batch_size": 512,
              "schedule": "linear", "warmup_steps": 3000, "steps": 45000, "min_lr_ratio": 0.0,
              "weight_decay": 0.0, "precision": "fp16", "query_max_length": 64, "doc_max_length": 512},
    "small": {**_SMALL, **_CLUSTER, "pooling": "mean", "batch_size": 32, "steps": 120, "warmup_steps": 12},
    "tiny": {**_TINY, **_CLUSTER, "batch_size": 16, "steps": 40, "warmup_steps": 4},
}
# COCO-DR Large: the same recipe on BERT-large (the paper's coCondenser-pretrained BERT-large is not public).
PRESETS["paper-large"] = {**PRESETS["paper"], "model": "bert-large-uncased"}
_ANCE = "OpenMatch/COCO-DR ANCE/README.md, ANCE/model/models.py (METHODS.md 2.2)"
_PAPER_PRESET = rebased(Uniform.presets["paper"], PRESETS["paper"], _ANCE, [
    ("paper 001 (coCondenser init)", ["model"]),
    ("harness default: the paper's batch as one global batch", ["batch_size"]),
])
_SMALL_PRESET = rebased(_PAPER_PRESET, PRESETS["small"], "harness default: the uniform small recipe (MiniLM, CPU) "
                                                         "with the released loss setup")
SOURCED_PRESETS = {
    "paper": _PAPER_PRESET, "small": _SMALL_PRESET,
    "tiny": rebased(_SMALL_PRESET, PRESETS["tiny"], "harness default: the uniform tiny recipe with the released "
                                                     "loss setup"),
    "paper-large": rebased(_PAPER_PRESET, PRESETS["paper-large"], "harness default: bert-large-uncased (the "
                                                                   "coCondenser BERT-large is not public)"),
}
_README = "OpenMatch/COCO-DR ANCE/README.md"
_KMEANS = "OpenMatch/COCO-DR ANCE/drivers/run_ann_data_gen.py faiss.Kmeans(dim, 50, niter=500, nredo=5)"
ANCE_WARMUPS = ("data", "bm25", "model")
_WARMUP_NEGATIVES = ("OpenMatch/COCO-DR warmup/commands/run_bm25_warmup.sh (trains on triples.train.small.tsv: the "
                     "collection's BM25 negatives, none re-mined)")
_WARMUP_SCHEDULE = ("OpenMatch/COCO-DR warmup/drivers/run_bm25_warmup.py (one get_linear_schedule_with_warmup over the "
                    "run: the warm-up has no ANCE episodes)")
KMEANS_METRICS = ("l2", "dot")
OPTIMIZERS = ("adamw", "lamb")
EPISODE_LRS = ("single", "restart")
_RUN_ANN = "OpenMatch/COCO-DR ANCE/drivers/run_ann.py"


@dataclass(frozen=True)
class ClusterDROOptions(BaseLossOptions):
    """The options iDRO, GroupDRO and their ERM baseline share: clusters, per-sample loss, ANCE negatives, COCO."""

    k: int = option(50, doc="number of K-means query clusters", bounds="[1, inf)",
                    source="paper 001 (K = 50; METHODS.md 2.2) / " + _README + " (n_groups 50)")
    niter: int = option(500, doc="K-means iterations", bounds="[1, inf)", source=_KMEANS)
    nredo: int = option(5, doc="K-means restarts (the best is kept)", bounds="[1, inf)", source=_KMEANS)
    episode_every: int = option(0, doc="re-cluster every N optimizer steps (0: with the ANCE refreshes, or once "
                                       "before step 0)", unit="optimizer steps", bounds="[0, inf)",
                                source="harness default: the code re-clusters when negatives are refreshed")
    loss: str = option("triplet", doc="per-sample loss: the code's triplet softmax [d+, one negative], or the "
                                      "trainer's InfoNCE (HN/IBN/CBN)", choices=LOSSES,
                       source="OpenMatch/COCO-DR ANCE/model/models.py (triplet softmax, no in-batch negatives)")
    params: str = option("", doc="regex of the parameters for per-cluster gradients (empty: the last `blocks` "
                                 "transformer blocks)", source="harness default: empty, so `blocks` decides")
    blocks: int = option(3, doc="last transformer blocks whose parameters give the per-cluster gradients",
                         bounds="[1, inf)", source="OpenMatch/COCO-DR ANCE/model/dro_loss.py (layer.9-11, BERT-base)")
    ance_refresh_steps: int = option(0, doc="re-mine ANCE negatives every N steps (0: keep the data's negatives)",
                                     unit="optimizer steps", bounds="[0, inf)",
                                     source="harness default: off, so tiny runs need no re-encoding of the corpus")
    ance_depth: int = option(200, doc="ANCE candidates: the current checkpoint's top N over the training corpus",
                             bounds="[1, inf)", source="OpenMatch/COCO-DR ANCE/drivers/run_ann_data_gen.py (top 200)")
    ance_keep: int = option(30, doc="ANCE negatives kept per query, drawn at random from the candidates",
                            bounds="[1, inf)", source="OpenMatch/COCO-DR ANCE/drivers/run_ann_data_gen.py (30)")
    ance_warmup: str = option("data", doc="negatives before the first ANCE episode: the collection's (data), BM25, "
                                          "or mined with the starting model (model: the released episode 1 after "
                                          "the BM25 warm-up stage)",
                              choices=ANCE_WARMUPS,
                              source="harness default: the collection's negatives (the code warms up on BM25)")
    kmeans_metric: str = option("l2", doc="K-means of the query clusters: faiss L2 (the code) or dot product "
                                          "(spherical K-means, assignment by inner product: the paper)",
                                choices=KMEANS_METRICS,
                                source=_KMEANS + " (L2; paper 001 §4.2 says dot product: mode dot)")
    coco: dict[str, object] | None = option(None, doc="COCO pretraining first: {preset, train, options} "
                                                      "(the +COCO rows)",
                                            source="harness default: none (plain fine-tuning rows of paper 001)")
    optimizer: str = option("adamw", doc="the model's optimizer: AdamW (paper 001 §5.1) or LAMB (the released "
                                         "warm-up and ANCE commands: --optimizer lamb; methods.lamb)",
                            choices=OPTIMIZERS,
                            source="paper 001 §5.1 (AdamW); the released scripts use LAMB: optimizer lamb")
    episode_lr: str = option("single", doc="learning rate and optimizer over the ANCE episodes: one schedule and "
                                           "optimizer over the run (single), or each episode a fresh run (restart: "
                                           "optimizer state and cluster weights reset, warm-up of warmup_steps, "
                                           "linear decay to 0 at "
                                           "restart_horizon steps into the episode, peak lr x max(restart_floor, "
                                           "1 - episode start / restart_total))",
                             choices=EPISODE_LRS,
                             source="harness default: the spec's one schedule, so existing keys and results are "
                                    "unchanged; the released driver runs each episode as a new process ("
                                    + _RUN_ANN + " with --single_warmup --round i): mode restart")
    restart_horizon: int = option(60000, doc="restart mode: steps into an episode at which its linear decay "
                                             "reaches 0", unit="optimizer steps", bounds="[1, inf)",
                                  source=_RUN_ANN + " (--num_training_steps default 60000, the "
                                         "get_linear_schedule_with_warmup horizon; ANCE/README.md sets none)")
    restart_total: int = option(300000, doc="restart mode: an episode starting at step s peaks at lr x max("
                                            "restart_floor, 1 - s / restart_total)",
                                unit="optimizer steps", bounds="[1, inf)",
                                source=_RUN_ANN + " (--total_training_steps default 300000; ANCE/README.md sets "
                                       "none)")
    restart_floor: float = option(0.2, doc="restart mode: the lowest peak of an episode, as a share of lr",
                                  bounds="[0, 1]",
                                  source=_RUN_ANN + " (learning_rate = max(0.2, 1 - global_step / "
                                         "total_training_steps) x learning_rate when continuing from a checkpoint)")
    warmup: dict[str, object] | None = option(None, doc="BM25 warm-up stage first: {preset, train, options} of a "
                                                        "dro-erm run on the collection's BM25 negatives (the "
                                                        "released warmup/ stage); COCO, when set, runs before it",
                                              source="harness default: none (no separate warm-up stage)")


CLUSTER_OPTIONS = defaults(ClusterDROOptions)   # the plain defaults, for callers that read them as a dict
TRACE_FILE = "dro_trace.npz"
TRACE_KEYS = ("weights", "losses", "counts", "sizes")


def triplet_losses(q: torch.Tensor, p: torch.Tensor, similarity: str = "dot", temperature: float = 1.0
                   ) -> torch.Tensor:
    """Per-query ``-log softmax([s(q, d+), s(q, d-)])[0]``: ``p`` holds [positive, negative] per query."""
    if p.shape[0] != 2 * q.shape[0]:
        raise ConfigError(f"the triplet loss needs exactly 1 positive + 1 negative per query; got {p.shape[0]} "
                          f"passages for {q.shape[0]} queries (set n_hard_negatives: 1)")
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, p = q.to(dtype), p.to(dtype).view(q.shape[0], 2, -1)
    if similarity == "cos":
        q, p = F.normalize(q, dim=-1), F.normalize(p, dim=-1)
    scores = torch.einsum("bd,bkd->bk", q, p) / temperature
    return F.cross_entropy(scores, torch.zeros(len(q), dtype=torch.long, device=q.device), reduction="none")


def restarted_linear_factor(step: int, starts: list[int], warmup: int, horizon: int, total: int,
                            floor: float) -> float:
    """The multiplier of the peak rate at optimizer step ``step`` (0-based) when every stretch beginning
    at one of ``starts`` is a fresh run, as each round of the released ANCE driver is.

    The stretch beginning at ``s`` (the last start <= ``step``; 0 before the first) peaks at
    ``max(floor, 1 - s / total)``; within it the rate warms up linearly over ``warmup`` steps from 0,
    then decays linearly to 0 at ``horizon`` steps after ``s`` and stays there, which is
    ``transformers.get_linear_schedule_with_warmup``.  Written out rather than chaining transformers'
    schedulers so the whole run is one ``LambdaLR`` whose state (the step count) resumes anywhere."""
    begin = max([s for s in starts if s <= step], default=0)
    peak = max(floor, 1.0 - begin / total)
    local = step - begin
    if local < warmup:
        return peak * local / max(1, warmup)
    return peak * max(0.0, (horizon - local) / max(1, horizon - warmup))


def kmeans_assign(x: np.ndarray, k: int, niter: int, nredo: int, seed: int, metric: str = "l2") -> np.ndarray:
    """Nearest-centroid cluster of each row after ``faiss.Kmeans``; one faiss thread for determinism.

    ``metric`` ``l2``: L2 K-means and nearest centroid under L2 (the released code); ``dot``: spherical
    K-means (unit-norm centroids, each row assigned to the centroid of largest inner product: faiss's
    ``spherical`` clustering searches an inner-product index), the dot-product clustering paper 001 §4.2 names."""
    import faiss

    if metric not in KMEANS_METRICS:
        raise ConfigError(f"unknown K-means metric {metric!r}; choose one of {', '.join(KMEANS_METRICS)}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if k > len(x):
        raise ConfigError(f"cannot form k={k} query clusters from {len(x)} training queries; lower 'k'")
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        km = faiss.Kmeans(x.shape[1], k, niter=niter, nredo=nredo, seed=seed, verbose=False,
                          spherical=metric == "dot")
        km.train(x)
        _, labels = km.index.search(x, 1)
    finally:
        faiss.omp_set_num_threads(threads)
    return labels[:, 0].astype(np.int64)


def last_block_pattern(names: list[str], blocks: int) -> str:
    """A regex for the parameters of the last ``blocks`` transformer blocks among ``names``."""
    indices = sorted({int(m.group(1)) for n in names if (m := _BLOCK.search(n))})
    if not indices:
        raise ConfigError("no transformer blocks (parameters named layer.<i>. or layers.<i>.) found; "
                          "name the parameters for per-cluster gradients with the 'params' option")
    chosen = "|".join(str(i) for i in indices[-blocks:])
    return rf"(?:^|\.)layers?\.(?:{chosen})\."


class ClusterDRO(Method):
    """Base of the cluster-reweighting methods: clusters, per-sample loss, state; subclasses weigh clusters."""

    presets = SOURCED_PRESETS
    Options = ClusterDROOptions
    # episode_lr restart: the steps whose episode starts the DRO state afresh (set by configure; none before it)
    restarts: frozenset[int] = frozenset()

    @staticmethod
    def _schedule(every: int, steps: int) -> list[int]:
        return [0, *range(every, steps, every)] if every > 0 else [0]

    def schedules(self, spec: TrainSpec) -> tuple[list[int], list[int]]:
        """``(cluster steps, negative-refresh steps)``.  With ANCE negatives and no ``episode_every`` the
        clusters are recomputed in the same episodes as the negatives (as the released runs)."""
        opts = self.resolve_options(dict(spec.method_options))
        every, ance = int(opts["episode_every"]), int(opts["ance_refresh_steps"])
        if every < 0 or ance < 0:
            raise ConfigError(f"method {self.name!r}: episode_every and ance_refresh_steps must be >= 0; got "
                              f"{every}, {ance}")
        ance_steps = self._schedule(ance, spec.steps) if ance > 0 else []
        cluster_steps = self._schedule(every, spec.steps) if every > 0 or not ance else ance_steps
        return cluster_steps, ance_steps

    def episode_steps(self, spec: TrainSpec) -> list[int]:
        clusters, negatives = self.schedules(spec)
        return sorted({*clusters, *negatives})

    def episode_starts(self, spec: TrainSpec) -> list[int] | None:
        """The ANCE episodes' first steps under ``episode_lr: restart`` (each a fresh run), else None."""
        opts = self.resolve_options(dict(spec.method_options))
        if opts["episode_lr"] != "restart":
            return None
        _, negatives = self.schedules(spec)
        if not negatives:
            raise ConfigError(f"method {self.name!r}: episode_lr restart restarts at each ANCE episode; set "
                              "ance_refresh_steps (or episode_lr single)")
        return negatives

    def lr_factor(self, spec: TrainSpec) -> Callable[[int], float] | None:
        """``episode_lr: restart``: the released ANCE driver's schedule (:func:`restarted_linear_factor`).

        Each round of ``run_ann.py --single_warmup --round i`` is a new process: a fresh
        ``get_linear_schedule_with_warmup(warmup_steps, num_training_steps)`` counted from the round's
        first step, and a peak scaled by ``max(0.2, 1 - global_step / total_training_steps)`` where
        ``global_step`` is the step of the checkpoint it continues from (0 for the first round)."""
        starts = self.episode_starts(spec)
        if starts is None:
            return None
        opts = self.resolve_options(dict(spec.method_options))
        horizon, total, floor = int(opts["restart_horizon"]), int(opts["restart_total"]), float(opts["restart_floor"])
        warmup = spec.warmup_steps
        return lambda step: restarted_linear_factor(step, starts, warmup, horizon, total, floor)

    def optimizer_restarts(self, spec: TrainSpec) -> list[int]:
        """``episode_lr: restart``: every episode after the first starts with a fresh optimizer (the released
        driver builds a new one per round and does not load the previous state: no --load_optimizer_scheduler)
        and fresh cluster weights (:meth:`run_episode`)."""
        starts = self.episode_starts(spec)
        return [s for s in starts if s > 0] if starts is not None else []

    # ------------------------------------------------------------------ COCO first ("+COCO" rows), warm-up
    def coco_spec(self, spec: TrainSpec) -> TrainSpec | None:
        """The COCO pretraining run this fine-tuning starts from (option ``coco``), or None.

        ``coco: {preset: tiny|small|paper, train: {TrainSpec overrides}, options: {corpora: [...], ...}}``;
        the backbone and the seed are the fine-tuning run's unless ``train`` names a ``model`` (the paper's
        COCO starts from Condenser, its fine-tuning baselines from coCondenser)."""
        coco = self.stage_option(spec, "coco")
        if coco is None:
            return None
        train = dict(coco.get("train") or {})
        # a smoke run's caps hold for the pretraining it starts from as well
        limits = {"limits": spec.limits} if spec.limits else {}
        return Coco.spec(str(coco.get("preset", "tiny")), **{"model": spec.model, "seed": spec.seed, **train,
                                                              "method_options": dict(coco.get("options") or {}),
                                                              **limits})

    def warmup_spec(self, spec: TrainSpec) -> TrainSpec | None:
        """The BM25 warm-up run this fine-tuning starts from (option ``warmup``), or None.

        ``warmup: {preset, train, options}``: a ``dro-erm`` run (uniform loss, the same per-sample loss) on the
        collection's own negatives (BM25: no ANCE refresh), from the fine-tuning's backbone and seed; the
        fine-tuning's ``coco`` option moves into it, so COCO, warm-up and fine-tuning run in that order."""
        warm = self.stage_option(spec, "warmup")
        if warm is None:
            return None
        own = dict(spec.method_options)
        options = {**{k: own[k] for k in ("coco", "loss", "optimizer") if k in own}, "ance_refresh_steps": 0,
                   "ance_warmup": "data", **dict(warm.get("options") or {})}
        limits = {"limits": spec.limits} if spec.limits else {}
        return self.named("dro-erm").spec(str(warm.get("preset", "tiny")), **{"model": spec.model, "seed": spec.seed,
                                                               **dict(warm.get("train") or {}),
                                                               "method_options": options, **limits})

    @staticmethod
    def _given_sources(option: str, given: Mapping[str, Any] | None) -> dict[str, str]:
        """Stage settings the suite's option sets: their source is that option (``--dry-run`` shows it)."""
        if not given:
            return {}
        out = {f: f"the suite's {option} option (train.{f})" for f in dict(given.get("train") or {})}
        out.update({f"options.{f}": f"the suite's {option} option (options.{f})"
                    for f in dict(given.get("options") or {})})
        if "preset" in given:
            out.update({"preset": f"the suite's {option} option (preset)"})
        return out

    def stages(self, spec: TrainSpec) -> list[Stage | DataStage]:
        """The BM25 warm-up when ``warmup`` is set (it runs COCO first when ``coco`` is set), else COCO
        pretraining when ``coco`` is set: fine-tuning starts from that stage's model."""
        warm = self.warmup_spec(spec)
        if warm is not None:
            sources = {f"options.{name}": _WARMUP_NEGATIVES for name in ("ance_refresh_steps", "ance_warmup")}
            sources["options.episode_lr"] = _WARMUP_SCHEDULE
            sources.update(self._given_sources("warmup", self.stage_option(spec, "warmup")))
            return [Stage("warmup", "BM25 warm-up (dro-erm)", "dro-erm", warm, starts_from=True, sources=sources)]
        coco = self.coco_spec(spec)
        return [] if coco is None else [Stage("coco", "COCO pretraining (coco)", "coco", coco, starts_from=True,
                                              sources=self._given_sources("coco", self.stage_option(spec, "coco")))]

    def make_optimizer(self, spec: TrainSpec, groups: list[dict[str, Any]]) -> torch.optim.Optimizer | None:
        """LAMB (:mod:`methods.lamb`) with the spec's lr, betas and eps when the option ``optimizer`` is ``lamb``;
        else the trainer's AdamW."""
        if self.resolve_options(dict(spec.method_options))["optimizer"] != "lamb":
            return None
        from methods.lamb import Lamb

        return Lamb(groups, lr=spec.lr, betas=spec.adam_betas, eps=spec.adam_eps)

    def configure(self, ctx: TrainContext) -> None:
        opts = ctx.options
        self.k = int(opts["k"])
        n_queries = sum(ctx.data.sizes)
        if not 1 <= self.k <= n_queries:
            raise ConfigError(f"method {self.name!r}: k={self.k} clusters for {n_queries} training queries; "
                              "k must lie between 1 and the number of queries")
        if opts["loss"] == "triplet" and ctx.spec.n_hard_negatives != 1:
            raise ConfigError(f"method {self.name!r}: the triplet loss uses 1 negative per query; "
                              f"the spec has n_hard_negatives={ctx.spec.n_hard_negatives}")
        self.offsets = np.concatenate([[0], np.cumsum(ctx.data.sizes)]).astype(np.int64)
        self.assignment = np.zeros(n_queries, dtype=np.int64)
        self.episodes = 0
        self.last: dict[str, float] = {}
        self.device = ctx.device
        self.negatives: AnceNegatives | None = None
        if int(opts["ance_refresh_steps"]) > 0:
            warmup = str(opts["ance_warmup"])
            self.negatives = AnceNegatives(ctx.data, depth=int(opts["ance_depth"]), keep=int(opts["ance_keep"]),
                                           warmup="data" if warmup == "model" else warmup, seed=ctx.spec.seed)
            self.mine_first = warmup == "model"
        self.cluster_steps, self.negative_steps = (set(s) for s in self.schedules(ctx.spec))
        self.trace: dict[str, list[np.ndarray]] = {key: [] for key in TRACE_KEYS}
        self.init_weights(ctx)
        # episode_lr restart: each later episode starts the cluster weights (and GroupDRO's EMAs) afresh, as each
        # round of the released driver does (its DRO loss module, add_group_loss, is built after from_pretrained,
        # so the buffers saved with the previous round's checkpoint are not loaded)
        self.fresh_state = {"weights": self.weights.detach().cpu().clone(), **self.extra_state()}
        self.restarts = frozenset(self.optimizer_restarts(ctx.spec))

    def init_weights(self, ctx: TrainContext) -> None:
        raise NotImplementedError

    def cluster_params(self, ctx: TrainContext) -> list[torch.nn.Parameter]:
        """The parameters of the per-cluster gradients (``params`` regex or the last ``blocks`` blocks)."""
        pattern = str(ctx.options["params"])
        if not pattern:
            names = [n for n, p in ctx.model.named_parameters() if p.requires_grad]
            pattern = last_block_pattern(names, int(ctx.options["blocks"]))
            if any("lora_" in n for n in names):
                pattern = rf"{pattern}.*lora_"
        try:
            return [p for _, p in ctx.named_parameters(pattern)]
        except ConfigError as exc:
            raise ConfigError(f"method {self.name!r}: option params: {exc}") from None

    # ------------------------------------------------------------------ episodes: clusters
    def run_episode(self, ctx: TrainContext, directory: Path) -> None:
        if self.negatives is not None and ctx.step in self.negative_steps:
            if ctx.step == 0 and not getattr(self, "mine_first", False):
                self.negatives.warmup(ctx, directory)
            else:
                self.negatives.refresh(ctx, directory)
        if ctx.step in self.cluster_steps:
            self.recluster(ctx, directory)
        if ctx.step in self.restarts:
            self.weights = self.fresh_state["weights"].clone().to(self.device)
            self.load_extra_state(self.fresh_state)

    def recluster(self, ctx: TrainContext, directory: Path) -> None:
        """K-means of every training query's representation from the current model."""
        queries = [row.query for src in ctx.data.sources for row in src.rows]
        emb = encode_texts(ctx, queries, ctx.spec.query_max_length).numpy()
        opts = ctx.options
        self.assignment = kmeans_assign(emb, self.k, int(opts["niter"]), int(opts["nredo"]),
                                        seed=ctx.spec.seed * 1000 + ctx.step, metric=str(opts["kmeans_metric"]))
        self.episodes += 1
        if ctx.rank == 0:
            np.save(directory / "clusters.npy", self.assignment)

    def clusters_of(self, examples: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
        idx = np.array([self.offsets[s] + r for s, r in examples], dtype=np.int64)
        return torch.as_tensor(self.assignment[idx], device=device)

    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> Batch:
        if self.negatives is not None:
            return self.negatives.make_batch(examples, ctx, micro_index)
        return super().make_batch(examples, ctx, micro_index)

    # ------------------------------------------------------------------ losses
    def losses(self, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        if ctx.options["loss"] == "trainer":
            losses, groups = ctx.info_nce_losses(encoded)
        else:
            losses = triplet_losses(encoded["query"], encoded["passage"], ctx.spec.similarity, ctx.spec.temperature)
            groups = ctx.batch_group_ids()
        return losses, self.regroup(losses, groups, ctx)

    def regroup(self, losses: torch.Tensor, group_ids: torch.Tensor, ctx: TrainContext) -> torch.Tensor:
        """Reweighted by query cluster, whatever per-sample loss (own, or a ``base`` method's) it is."""
        return self.clusters_of(ctx.query_batch().examples, losses.device)

    def cluster_means(self, out: LossOutput) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(means with graph, counts, present)`` per cluster of this rank's samples (absent: 0)."""
        ids = out.group_ids
        sums = torch.zeros(self.k, dtype=out.losses.dtype, device=ids.device).index_add(0, ids, out.losses)
        counts = torch.bincount(ids, minlength=self.k).to(out.losses.dtype)
        return sums / counts.clamp(min=1), counts, counts > 0

    def reduce(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        means, counts, present = self.cluster_means(out)
        loss = self.robust_loss(out, means, counts, present, ctx)
        self.last = {"present_clusters": float(present.sum()),
                     "worst_cluster_loss": float(means.detach()[present].max()),
                     "weight_max": float(self.weights.max()), "weight_min": float(self.weights.min())}
        if ctx.is_boundary:
            # The per-step trace (weights after the step's update, this rank's cluster means and counts,
            # the clusters' sizes among the training queries): method/dro_trace.npz, reports.plots_dro.
            absent = torch.full_like(means, float("nan"))
            self.trace["weights"].append(self.weights.detach().cpu().numpy().astype(np.float32))
            self.trace["losses"].append(torch.where(present, means.detach(), absent).cpu().numpy().astype(np.float32))
            self.trace["counts"].append(counts.detach().cpu().numpy().astype(np.int32))
            self.trace["sizes"].append(np.bincount(self.assignment, minlength=self.k).astype(np.int32))
        return loss

    def robust_loss(self, out: LossOutput, means: torch.Tensor, counts: torch.Tensor, present: torch.Tensor,
                    ctx: TrainContext) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    weights: torch.Tensor

    def scalars(self) -> dict[str, float]:
        return dict(self.last)

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        state = {"weights": self.weights.detach().cpu().clone(),
                 "assignment": torch.from_numpy(self.assignment.copy()), "episodes": self.episodes,
                 "trace": {key: torch.from_numpy(np.stack(rows)) if rows else None for key, rows in self.trace.items()},
                 **self.extra_state()}
        if self.negatives is not None:
            state["negatives"] = self.negatives.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = state["weights"].clone().to(self.device)
        self.assignment = state["assignment"].numpy().astype(np.int64)
        self.episodes = int(state["episodes"])
        trace = state.get("trace") or {}
        self.trace = {key: [] if trace.get(key) is None else list(trace[key].numpy()) for key in TRACE_KEYS}
        if self.negatives is not None:
            if "negatives" not in state:
                raise ConfigError(f"method {self.name!r}: the checkpoint holds no ANCE negatives but the run "
                                  "refreshes them (ance_refresh_steps)")
            self.negatives.load_state_dict(state["negatives"])
        self.load_extra_state(state)

    def export(self, ctx: TrainContext, directory: Path) -> None:
        np.save(directory / "cluster_weights.npy", self.weights.detach().cpu().numpy())
        np.save(directory / "clusters.npy", self.assignment)
        if ctx.rank == 0 and self.trace["weights"]:
            write_trace(directory / TRACE_FILE, {key: np.stack(rows) for key, rows in self.trace.items()})


def write_trace(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """The per-step trace as one ``.npz`` (rows = optimizer steps 1..n), written atomically."""
    with atomic_write(path, "wb", encoding=None) as handle:
        payload: dict[str, Any] = {"steps": np.arange(1, len(arrays["weights"]) + 1), **arrays}
        np.savez(handle, **payload)
