"""Layout kind ``cluster-gain``: paper 001's Figure 5(c) (§5.5 "Influence of Implicit DRO").

Paper 001 §5.5: "we find MARCO query clusters closest to queries in each BEIR task (based on average dot product
in COCO-DR embeddings).  Then we plot the improvements of iDRO on BEIR tasks (zero-shot NDCG@10) and on their
closest source clusters (training loss)".  The paper says no more, and the clusters a DRO run keeps
(``method/dro_trace.npz``) are per run and per episode, so two runs' clusters are not the same clusters.  This
layout therefore recomputes one fixed clustering of the training queries and measures both runs on it:

1. **Triples.**  The training data of the ``with`` row's cell (the suite's data entries, loaded as the run loads
   them), one triple per training query that has a negative: (query, its first positive, its first negative);
   at most ``max_queries`` of them, a seeded sample (``seed``) when there are more (a CPU cap; MS MARCO has
   ~500k training queries).
2. **Clusters.**  The sampled queries embedded by the ``with`` row's finished model (COCO-DR: coco-idro) with
   the run's pooling, raw (un-normalised) representations as the run clusters them, then K-means into K
   clusters with :func:`methods.clusters.kmeans_assign`: K, the K-means metric, ``niter`` and ``nredo`` are
   the ``with`` run's method options (paper scale: K = 50, faiss L2 as the released code).
3. **Nearest cluster of a task.**  The task's queries (pooled over an aggregate's benchmarks: CQADupStack)
   embedded the same way; the nearest cluster is the argmax over clusters of the mean dot product between the
   task's query embeddings and the cluster's query embeddings, i.e. the dot product of the two mean
   embeddings (:func:`nearest_clusters`).
4. **Training loss on a cluster.**  The mean over the cluster's triples of the released per-sample loss,
   :func:`methods.clusters.triplet_losses` (softmax over [positive, one negative]) under the run's similarity
   and temperature (paper scale: dot product of [CLS], no temperature), once with each row's finished model;
   improvement = (loss_without - loss_with) / loss_without (:func:`loss_improvement`; positive: iDRO lowered the
   loss).
5. **Gain on a task.**  The ``with`` row's stored zero-shot metric (the column's, nDCG@10) minus the
   ``without`` row's: the per-query means of the finished suite.

Options: ``with`` / ``without`` (variant ids; default ``coco-idro`` / ``coco``: COCO-DR and COCO-DR without
iDRO), ``max_queries`` (default 10,000), ``seed`` (default 0), ``batch_size`` (encoding, default 64).  The table
has one row per task (the layout's columns: ``{benchmark, metric}``), the notes the Pearson and Spearman
correlations of loss improvement and gain over the tasks; the figure is the scatter of the two.  Paper 001
prints no numbers for Figure 5(c) (only "iDRO improved the training loss on ... 12 out of 18" clusters), so
nothing is printed beside ours.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.ablation.axes import FinishedSuite, systems_of
from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.layout import (
    LayoutKind,
    TableLayout,
    check_column_benchmarks,
    check_known_options,
    register_layout_kind,
)
from harness.ablation.layouts.alignment import encoder_model
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from harness.method import get_method
from reports.table import Cell, Column, Row, Table

OPTIONS = ("with", "without", "max_queries", "seed", "batch_size")
DEFAULTS: dict[str, Any] = {"with": "coco-idro", "without": "coco", "max_queries": 10000, "seed": 0,
                            "batch_size": 64}
# methods whose options name the query clusters (k, kmeans_metric, niter, nredo: methods.clusters)
CLUSTER_METHODS = ("idro", "groupdro", "dro-erm")


def _opt(layout: TableLayout, name: str) -> Any:
    return layout.options.get(name, DEFAULTS[name])


def nearest_clusters(task: np.ndarray, queries: np.ndarray, labels: np.ndarray, k: int) -> tuple[int, np.ndarray]:
    """``(nearest cluster, mean dot product per cluster)`` of one task: for each cluster ``c`` the mean over the
    task's query embeddings ``task`` and the cluster's training query embeddings ``queries[labels == c]`` of
    their dot product (an empty cluster: -inf), which is the dot product of the two mean embeddings."""
    task_mean = np.asarray(task, dtype=np.float64).mean(axis=0)
    scores = np.full(k, -np.inf)
    for c in range(k):
        members = np.asarray(queries, dtype=np.float64)[labels == c]
        if len(members):
            scores[c] = float(task_mean @ members.mean(axis=0))
    return int(np.argmax(scores)), scores


def loss_improvement(loss_without: float, loss_with: float) -> float:
    """iDRO's relative improvement of a training loss: ``(loss_without - loss_with) / loss_without``."""
    if loss_without <= 0:
        raise ValueError(f"the loss without iDRO must be positive, got {loss_without}")
    return (loss_without - loss_with) / loss_without


def sample_triples(rows: list[Any], max_queries: int, seed: int) -> list[tuple[str, str, str]]:
    """(query, first positive, first negative) of each training row with a positive and a negative; a seeded
    sample of ``max_queries`` (in data order) when there are more."""
    triples = [(r.query, r.pos[0], r.neg[0]) for r in rows if r.pos and r.neg]
    if len(triples) > max_queries:
        keep = np.sort(np.random.default_rng(seed).choice(len(triples), size=max_queries, replace=False))
        triples = [triples[i] for i in keep]
    return triples


def correlations(x: list[float], y: list[float]) -> dict[str, float]:
    """Pearson and Spearman correlations (with p values, scipy) of ``x`` and ``y``; NaN where undefined
    (fewer than 3 points, or a constant side)."""
    out = {"n": float(len(x)), "pearson": math.nan, "pearson_p": math.nan, "spearman": math.nan,
           "spearman_p": math.nan}
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return out
    from scipy import stats  # lazy (start-up speed)

    pearson = stats.pearsonr(x, y)
    spearman = stats.spearmanr(x, y)
    out.update(pearson=float(pearson[0]), pearson_p=float(pearson[1]), spearman=float(spearman[0]),
               spearman_p=float(spearman[1]))
    return out


@register_layout_kind("cluster-gain")
class ClusterGainLayout(LayoutKind):
    """Target tasks as rows: iDRO's training-loss improvement on the nearest source query cluster and its gain."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        where = f"layout {layout.name!r} (cluster-gain)"
        check_known_options(layout, OPTIONS, where)
        variants = {v.id: v for v in suite.variants}
        for side in ("with", "without"):
            name = _opt(layout, side)
            if name not in variants:
                raise ConfigError(f"{where}: option {side} {name!r} is not a variant")
            if variants[name].sweep is not None:
                raise ConfigError(f"{where}: option {side} {name!r} is a swept variant; name one model")
        if _opt(layout, "with") == _opt(layout, "without"):
            raise ConfigError(f"{where}: options with and without name the same variant")
        method = variants[_opt(layout, "with")].method
        if method not in CLUSTER_METHODS:
            raise ConfigError(f"{where}: the with variant {_opt(layout, 'with')!r} is trained by {method!r}, which "
                              f"names no query clusters ({', '.join(CLUSTER_METHODS)} do)")
        for name in ("max_queries", "batch_size"):
            value = _opt(layout, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}: {name!r} must be a positive integer, got {value!r}")
        if isinstance(_opt(layout, "seed"), bool) or not isinstance(_opt(layout, "seed"), int):
            raise ConfigError(f"{where}: 'seed' must be an integer, got {_opt(layout, 'seed')!r}")
        if not layout.columns:
            raise ConfigError(f"{where}: the columns name no target task")
        check_column_benchmarks(layout, suite, scale, where)
        for col in layout.columns:
            if col.metric not in suite.metrics:
                raise ConfigError(f"{where}: column {col.benchmark!r}: metric {col.metric!r} is not one of the "
                                  f"suite's metrics ({', '.join(suite.metrics)})")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return cluster_gain_table(cluster_gain_points(suite, scale, results_root, layout), layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.plots_dro import cluster_gain_figure  # lazy (start-up speed): imports matplotlib

        result = cluster_gain_points(suite, scale, results_root, layout)
        return cluster_gain_figure(result["tasks"], correlations(*_xy(result["tasks"])), title=layout.caption or None)


def _task_queries(suite: AblationSuite, scale: str, name: str) -> list[str]:
    """The queries of a benchmark, or pooled over an aggregate's benchmarks."""
    config = suite.scale(scale)
    refs = {b.id: b for b in config.benchmarks}
    leaves = config.aggregate_leaves(name) if name in config.aggregates else [name]
    texts: list[str] = []
    for leaf in leaves:
        texts += list(load_benchmark_ref(refs[leaf], suite.metrics).dataset.queries.texts)
    return texts


def cluster_gain_points(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout
                        ) -> dict[str, Any]:
    """The measurement of the module docstring: ``{"tasks": [one record per column: label, benchmark, metric,
    cluster, size, loss_without, loss_with, improvement, score_without, score_with, gain], "clusters": {k,
    metric, queries (triples used), assignment (cluster of each triple), losses_with, losses_without (per
    triple)}, "models": {with, without}}``."""
    import torch  # lazy (start-up speed)

    from harness.ablation.cells import expand_train_cells  # lazy (start-up speed): loads the training data
    from harness.data.collections import load_training_data
    from harness.encoders.hf import load_encoder  # lazy (start-up speed): imports torch
    from methods.clusters import kmeans_assign, triplet_losses

    with_id, without_id = str(_opt(layout, "with")), str(_opt(layout, "without"))
    batch = int(_opt(layout, "batch_size"))
    finished = FinishedSuite(suite, scale, results_root)     # first: a suite not run yet fails before encoding
    cells = {c.variant.id: c for c in expand_train_cells(suite, scale)}
    cell = cells[with_id]
    if not cell.trains:
        raise ConfigError(f"layout {layout.name!r}: variant {with_id!r} trains nothing at {scale!r}")
    spec = cell.train_spec
    options = get_method(cell.method).resolve_options(dict(spec.method_options))
    k, metric = int(options["k"]), str(options["kmeans_metric"])
    data = load_training_data(cell.data_entries)
    triples = sample_triples([r for src in data.sources for r in src.rows], int(_opt(layout, "max_queries")),
                             int(_opt(layout, "seed")))
    if len(triples) < k:
        raise ConfigError(f"layout {layout.name!r}: {len(triples)} training triples with a negative for k={k} "
                          "clusters; raise max_queries")
    models = {side: encoder_model(suite, scale, results_root, {"variant": v}, cells)[0]
              for side, v in (("with", with_id), ("without", without_id))}

    def encoder(model: str) -> Any:
        # raw representations under the run's pooling, no instruction (COCO-DR trains with none)
        return load_encoder(model, pooling=spec.pooling, normalize=False, query_prompt="", doc_prompt="",
                            query_max_length=spec.query_max_length, doc_max_length=spec.doc_max_length,
                            batch_size=batch)

    queries, passages = [q for q, _, _ in triples], [t for _, p, n in triples for t in (p, n)]
    losses: dict[str, np.ndarray] = {}
    query_emb: np.ndarray | None = None
    with_encoder = None
    for side, model in models.items():
        enc = encoder(model)
        q = enc.encode_queries(queries, progress=False)
        p = enc.encode_docs(passages, progress=False)
        losses[side] = triplet_losses(torch.as_tensor(q), torch.as_tensor(p), spec.similarity,
                                      spec.temperature).double().numpy()
        if side == "with":
            query_emb, with_encoder = q, enc
    assert query_emb is not None and with_encoder is not None
    assignment = kmeans_assign(query_emb, k, int(options["niter"]), int(options["nredo"]),
                               seed=int(_opt(layout, "seed")), metric=metric)
    systems = {side: systems_of(suite.variant(v))[0] for side, v in (("with", with_id), ("without", without_id))}
    labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
    tasks = []
    for col in layout.columns:
        task = with_encoder.encode_queries(_task_queries(suite, scale, col.benchmark), progress=False)
        nearest, _ = nearest_clusters(task, query_emb, assignment, k)
        members = assignment == nearest
        loss_without, loss_with = float(losses["without"][members].mean()), float(losses["with"][members].mean())
        score_with = finished.value(systems["with"], col.benchmark, col.metric)[0]
        score_without = finished.value(systems["without"], col.benchmark, col.metric)[0]
        tasks.append({"label": col.label or labels.get(col.benchmark) or col.benchmark, "benchmark": col.benchmark,
                      "metric": col.metric, "cluster": nearest, "size": int(members.sum()),
                      "loss_without": loss_without, "loss_with": loss_with,
                      "improvement": loss_improvement(loss_without, loss_with),
                      "score_without": float(score_without), "score_with": float(score_with),
                      "gain": float(score_with - score_without)})
    return {"tasks": tasks, "models": models,
            "clusters": {"k": k, "metric": metric, "queries": len(triples), "assignment": assignment,
                         "losses_with": losses["with"], "losses_without": losses["without"],
                         "pooling": spec.pooling, "similarity": spec.similarity, "temperature": spec.temperature},
            "variants": {"with": suite.variant(with_id).label, "without": suite.variant(without_id).label}}


def _xy(tasks: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    return [t["improvement"] for t in tasks], [t["gain"] for t in tasks]


def _number(value: float, places: int = 3) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{places}f}"


def cluster_gain_table(result: dict[str, Any], layout: TableLayout) -> Any:
    """One row per task: the nearest cluster and its size, the two training losses and the improvement (%),
    the two scores and the gain; the notes give the definition and the correlations."""
    tasks, clusters, variants = result["tasks"], result["clusters"], result["variants"]
    metric = tasks[0]["metric"] if tasks else ""
    group_loss, group_score = "Training loss on the nearest cluster", f"Zero-shot {metric}"
    columns = [Column("cluster", "id", group="Nearest source cluster"),
               Column("size", "queries", group="Nearest source cluster"),
               Column("loss_without", "without", group=group_loss, higher_is_better=False),
               Column("loss_with", "with", group=group_loss, higher_is_better=False),
               Column("improvement", "improvement %", group=group_loss),
               Column("score_without", "without", group=group_score),
               Column("score_with", "with", group=group_score),
               Column("gain", "gain", group=group_score)]
    rows = []
    for t in tasks:
        rows.append(Row(t["label"], {
            "cluster": Cell(str(t["cluster"])), "size": Cell(str(t["size"])),
            "loss_without": Cell(t["loss_without"], decimals=4), "loss_with": Cell(t["loss_with"], decimals=4),
            "improvement": Cell(100.0 * t["improvement"], decimals=2),
            "score_without": Cell(t["score_without"], decimals=4), "score_with": Cell(t["score_with"], decimals=4),
            "gain": Cell(t["gain"], decimals=4)}))
    corr = correlations(*_xy(tasks))
    improved = sum(t["improvement"] > 0 for t in tasks)
    notes = [f"Paper 001 Figure 5(c) (§5.5): with = {variants['with']}, without = {variants['without']}. The paper "
             "prints no numbers for Figure 5(c) (only that iDRO lowered the training loss on 12 of the 18 clusters "
             "nearest to the BEIR tasks), so nothing is printed beside ours.",
             f"Definition (the paper gives no more detail): {clusters['queries']} training triples (query, first "
             "positive, first negative; a seeded sample when the data has more) embedded by the with row's finished "
             f"model; K-means of their queries into K = {clusters['k']} clusters ({clusters['metric']}, the run's "
             f"method options; {clusters['pooling']} pooling, raw representations); a task's nearest cluster "
             "maximises the mean dot product between the task's queries and the cluster's queries; loss = mean "
             "per-sample triplet loss (softmax over [positive, one negative], the run's similarity "
             f"{clusters['similarity']} and temperature {clusters['temperature']:g}) over the cluster's triples "
             "under each finished model; improvement = (loss without - loss with) / loss without; gain = the "
             "stored per-query mean with minus without.",
             f"Correlation of loss improvement and gain over n = {len(tasks)} tasks: Pearson r = "
             f"{_number(corr['pearson'])} (p = {_number(corr['pearson_p'])}), Spearman rho = "
             f"{_number(corr['spearman'])} (p = {_number(corr['spearman_p'])}); the loss improved on the nearest "
             f"cluster of {improved} of {len(tasks)} tasks.",
             "Models: " + "; ".join(f"{side} = {m}" for side, m in result["models"].items()) + "."]
    return Table(columns=columns, rows=rows,
                 caption=layout.caption or "iDRO's gain on each target task against its loss improvement on the "
                                           "nearest source cluster",
                 label=f"tab:{layout.name}", notes=notes, decimals=4, scale=1.0, bold_best=False,
                 row_header="Task")
