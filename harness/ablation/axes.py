"""Suite axes: a declared variant expanded into systems (sweep points) and replicates (seeds).

A *system* is one row of a suite table: a declared variant, or one point of its
``sweep``.  A *replicate* is one training run of a system: one per seed of its
``seeds`` axis, or the single run of a system without one.  Checkpoints are not
separate runs: the runner evaluates a replicate's kept intermediate checkpoints as
extra evaluation cells (``<replicate>@step=<n>``).

Everything here is derived from the suite file alone (no data, no models), so the
pytest plug-in can name its items and a dry run can list the cells cheaply.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.ablation.paths import cell_result_dir, read_summary, report_dir
from harness.ablation.resolve import resolve_option_value
from harness.ablation.spec import AblationSuite, Checkpoints, Sweep, Variant
from harness.errors import ConfigError
from harness.store import is_result_dir, load_result
from reports.table import RANKED_KINDS, Cell, format_number, round_display

_SAFE = re.compile(r"[A-Za-z0-9._+-]+")


def value_text(value: Any) -> str:
    """A sweep value as written in ids and labels (``0.001``, ``8``, ``true``, ``cos``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class System:
    """One table row: a declared variant (``point`` None) or one point of its sweep."""

    id: str
    label: str
    variant: Variant
    point: int | None = None           # index into variant.sweep.values

    @property
    def sweep(self) -> Sweep | None:
        return self.variant.sweep

    @property
    def value(self) -> Any:
        """The sweep value of this point (None for a system without a sweep)."""
        sweep = self.variant.sweep
        return None if sweep is None or self.point is None else sweep.values[self.point]


@dataclass(frozen=True)
class Replicate:
    """One training run of a system (one seed of its ``seeds`` axis, or its only run)."""

    system: System
    seed: int | None                   # None: the TrainSpec's own seed
    checkpoints: Checkpoints | None

    @property
    def id(self) -> str:
        return self.system.id if self.seed is None else f"{self.system.id}@seed={self.seed}"

    @property
    def label(self) -> str:
        return self.system.label if self.seed is None else f"{self.system.label} [seed {self.seed}]"

    def variant(self) -> Variant:
        """The declared variant under this replicate's id and label (what a training cell carries)."""
        if self.seed is None and self.system.point is None:
            return self.system.variant
        return dataclasses.replace(self.system.variant, id=self.id, label=self.label)


def systems_of(variant: Variant) -> list[System]:
    """The systems of one declared variant: itself, or one per sweep value."""
    sweep = variant.sweep
    if sweep is None:
        return [System(variant.id, variant.label, variant)]
    out = []
    for i, value in enumerate(sweep.values):
        text = value_text(value)
        token = text if _SAFE.fullmatch(text) else f"v{i + 1}"
        out.append(System(f"{variant.id}@{sweep.name}={token}", f"{variant.label} ({sweep.name}={text})",
                          variant, i))
    return out


def suite_systems(suite: AblationSuite) -> list[System]:
    """Every system of the suite in file order (a swept variant's points in value order)."""
    return [s for v in suite.variants for s in systems_of(v)]


def baseline_system(suite: AblationSuite) -> System:
    """The baseline row: the baseline variant, or the first point of its sweep."""
    return systems_of(suite.variant(suite.baseline))[0]


def replicates(suite: AblationSuite, system: System, scale: str) -> list[Replicate]:
    seeds = suite.seeds_for(system.variant, scale)
    checkpoints = suite.checkpoints_for(system.variant, scale)
    runs: list[int | None] = list(seeds) if seeds else [None]
    return [Replicate(system, s, checkpoints) for s in runs]


def suite_replicates(suite: AblationSuite, scale: str) -> list[Replicate]:
    return [r for s in suite_systems(suite) for r in replicates(suite, s, scale)]


def expand_rows(suite: AblationSuite, variant_ids: list[str]) -> list[System]:
    """Systems of the declared variant ids (a layout's rows); a system id names one point directly."""
    by_id = {s.id: s for s in suite_systems(suite)}
    out: list[System] = []
    for vid in variant_ids:
        if vid in by_id and by_id[vid].point is not None:
            out.append(by_id[vid])
            continue
        out += systems_of(suite.variant(vid))
    return out


def apply_axes(overrides: dict[str, Any], replicate: Replicate) -> dict[str, Any]:
    """TrainSpec overrides of one replicate: the variant's, then its sweep value, then its seed."""
    out = dict(overrides)
    system = replicate.system
    sweep = system.sweep
    if sweep is not None and system.point is not None:
        if sweep.section == "train":
            out[sweep.name] = system.value
        else:
            out["method_options"] = {**out.get("method_options", {}), sweep.name: resolve_option_value(system.value)}
    if replicate.seed is not None:
        out["seed"] = replicate.seed
    return out


def keep_checkpoints(spec: Any, checkpoints: Checkpoints | None) -> Any:
    """The spec with ``save_every``/``keep_checkpoints`` set so that every requested intermediate step is
    saved and none is pruned (neither field is part of a run's key).  Refuses steps past the run's end."""
    if checkpoints is None:
        return spec
    steps = checkpoints.at(spec.steps)
    late = [s for s in checkpoints.steps if s > spec.steps]
    if late:
        raise ConfigError(f"checkpoint step(s) {', '.join(map(str, late))} lie beyond the run's {spec.steps} steps")
    if not steps:
        return spec
    import math

    # step 0 (the model before training: a learning curve's start) is its own save, not a multiple of save_every
    every = math.gcd(*(s for s in steps if s > 0)) if any(s > 0 for s in steps) else spec.save_every
    # every save the run can make, episodes included, stays: at most one per step plus the final one
    return spec.replace(save_every=every, save_initial=spec.save_initial or 0 in steps,
                        keep_checkpoints=max(spec.keep_checkpoints, spec.steps + 1))


def replicate_table(table: Any, replicated: dict[str, dict[str, list[Any]]], metrics: list[str],
                    aggregates: dict[str, list[str]], grouped: bool = True) -> Any:
    """A comparison table whose rows with replicates show ``mean ± sd`` over the seeds.

    ``replicated`` is ``{dataset label: {row label: [each seed's result]}}``; a column key is
    ``<dataset>/<metric>`` (the comparison table's).  Best values stay bold (by the displayed
    mean, set explicitly since a ``±`` cell is text), and a note states the test used."""
    import dataclasses as dc

    # lazy (start-up speed): imports scipy
    from harness.stats.replicates import (
        REPLICATE_TEST_NOTE,
        aggregate_replicate_means,
        replicate_means,
        replicate_spread,
    )

    keys = {c.key for c in table.columns}
    means: dict[tuple[int, str], float] = {}
    rows = []
    for i, row in enumerate(table.rows):
        cells = dict(row.cells)
        for key, cell in row.cells.items():
            if isinstance(cell.value, (int, float)) and not isinstance(cell.value, bool):
                means[(i, key)] = float(cell.value)
        for dataset in [*replicated, *aggregates]:
            for metric in metrics:
                key = f"{dataset}/{metric}" if grouped else metric
                cell = cells.get(key)
                if key not in keys or cell is None:
                    continue
                if dataset in aggregates:
                    leaves = _leaves(aggregates, dataset)
                    if not all(row.label in replicated.get(d, {}) for d in leaves):
                        continue
                    values = aggregate_replicate_means({d: replicated[d][row.label] for d in leaves}, metric,
                                                       aggregates, dataset)
                elif row.label in replicated[dataset]:
                    values = replicate_means(replicated[dataset][row.label], metric)
                else:
                    continue
                mean, sd = replicate_spread(values)
                means[(i, key)] = mean
                cells[key] = value_cell(mean, sd, table.scale, table.decimals, delta=cell.delta, marks=cell.marks,
                                        note=cell.note, decimals=cell.decimals)
        rows.append(dc.replace(row, cells=cells))
    counts = sorted({len(runs) for per in replicated.values() for runs in per.values()})
    note = f"{REPLICATE_TEST_NOTE} Replicates per row: {'/'.join(map(str, counts))}."
    return bold_by_value(dc.replace(table, rows=rows, notes=[*table.notes, note]), means)


def _leaves(aggregates: dict[str, list[str]], name: str) -> list[str]:
    out: list[str] = []
    for member in aggregates[name]:
        out += _leaves(aggregates, member) if member in aggregates else [member]
    return out


# ---------------------------------------------------------------------------------------------- finished suites
class FinishedSuite:
    """The stored results of a finished suite at one scale, by system, replicate and checkpoint."""

    def __init__(self, suite: AblationSuite, scale: str, results_root: Any):
        self.suite, self.scale, self.root = suite, scale, results_root
        self.config = suite.scale(scale)
        self.summary = read_summary(suite, scale, results_root)
        self.cells = {c["variant"]: c for c in self.summary["cells"]}
        self._cache: dict[tuple[str, str], Any] = {}

    def stored(self, cell_id: str, bench: str) -> Any:
        """The stored result of one evaluated model (``<replicate>`` or ``<replicate>@step=<n>``)."""
        if (cell_id, bench) not in self._cache:
            path = cell_result_dir(report_dir(self.root, self.suite.name, self.scale), cell_id, bench)
            if not is_result_dir(path):
                raise ConfigError(f"{path}: no stored result for {cell_id} on {bench} (rerun: harness run "
                                  f"{self.suite.name} --scale {self.scale} --results-root {self.root}; finished "
                                  "cells are reused)")
            self._cache[(cell_id, bench)] = load_result(path)
        return self._cache[(cell_id, bench)]

    def runs(self, system: System, bench: str, step: int | None = None) -> list[Any]:
        """One stored result per replicate of ``system`` (at checkpoint ``step``; None: the finished run)."""
        suffix = "" if step is None else f"@step={step}"
        return [self.stored(r.id + suffix, bench) for r in replicates(self.suite, system, self.scale)]

    def evaluation(self, system: System, bench: str, step: int | None = None) -> Any:
        """The system's result on ``bench``: the run itself, or the per-query mean of its replicates."""
        from harness.stats.replicates import average_replicates  # lazy (start-up speed): imports scipy

        runs = self.runs(system, bench, step)
        return runs[0] if len(runs) == 1 else average_replicates(runs, what=f"{system.id} on {bench}")

    def steps(self, system: System) -> tuple[list[int], int | None]:
        """``(intermediate checkpoint steps, final step)`` of a system's runs (from the summary)."""
        first = replicates(self.suite, system, self.scale)[0]
        cell = self.cells.get(first.id, {})
        return list(cell.get("steps") or []), cell.get("final_step")

    def columns(self, benchmark: str) -> tuple[list[str], dict[str, list[str]]]:
        """``(leaf benchmarks, aggregates needed)`` of a layout column (a benchmark or an aggregate)."""
        cfg = self.config
        if benchmark in cfg.aggregates:
            return cfg.aggregate_leaves(benchmark), cfg.aggregate_closure([benchmark])
        if not any(b.id == benchmark for b in cfg.benchmarks):
            raise ConfigError(f"{benchmark!r} is neither a benchmark nor an aggregate of scale {self.scale!r}")
        return [benchmark], {}

    def value(self, system: System, benchmark: str, metric: str, step: int | None = None
              ) -> tuple[float, float, np.ndarray]:
        """``(mean, sd over replicates or NaN, each replicate's value)`` of a column for one system."""
        # lazy (start-up speed): imports scipy
        from harness.stats.replicates import leaf_weights, replicate_means, replicate_spread

        leaves, aggregates = self.columns(benchmark)
        weights = leaf_weights(benchmark, aggregates)
        per_rep = sum(w * replicate_means(self.runs(system, leaf, step), metric) for leaf, w in weights.items())
        values = np.atleast_1d(np.asarray(per_rep, dtype=np.float64))
        mean, sd = replicate_spread(values)
        return mean, sd, values

    def ci(self, system: System, benchmark: str, metric: str, step: int | None = None,
           level: float = 0.95) -> tuple[float, float, float]:
        """``(mean, low, high)``: bootstrap CI of the column's mean from the (seed-averaged) per-query scores."""
        from harness.stats.replicates import leaf_weights, weighted_mean_ci  # lazy (start-up speed): imports scipy

        leaves, aggregates = self.columns(benchmark)
        weights = leaf_weights(benchmark, aggregates)
        scores = {leaf: _evaluation_of(self.evaluation(system, leaf, step)).per_query[metric] for leaf in weights}
        options = self.suite.stats_options()
        return weighted_mean_ci(scores, weights, level=level, resamples=max(1000, options.resamples // 10),
                                seed=options.seed, scope=(benchmark, metric))


def _evaluation_of(value: Any) -> Any:
    return getattr(value, "evaluation", value)


def value_cell(mean: float, sd: float, table_scale: float, places: int, **kwargs: Any) -> Any:
    """A table cell: the number, or ``mean ± sd`` text when ``sd`` is finite (a row with replicates), both
    shown at the table's ``table_scale`` and ``places`` decimals; ``kwargs`` go to the Cell."""
    import math

    if math.isnan(sd):
        return Cell(mean, **kwargs)
    return Cell(f"{format_number(mean, table_scale, places)} ± {format_number(sd, table_scale, places)}", **kwargs)


def bold_by_value(table: Any, means: dict[tuple[int, str], float], along: str = "column") -> Any:
    """Best values bold by the displayed mean (``means[(row index, column key)]``), set explicitly so that
    text cells (``mean ± sd``) take part; ``along="row"`` ranks along a row (systems as columns)."""
    import dataclasses as dc

    flags: dict[tuple[int, str], bool] = {}
    groups: dict[Any, list[tuple[tuple[int, str], Any]]] = {}
    for (i, key), mean in means.items():
        if table.rows[i].kind not in RANKED_KINDS or not np.isfinite(mean):
            continue
        shown = round_display(mean, table.scale, table.decimals)
        groups.setdefault(i if along == "row" else key, []).append(((i, key), shown))
    higher = {c.key: c.higher_is_better for c in table.columns}
    for members in groups.values():
        if len(members) < 2:
            continue
        shown_values = [v for _, v in members]
        best = max(shown_values) if higher[members[0][0][1]] else min(shown_values)
        for where, shown in members:
            flags[where] = shown == best
    rows = [dc.replace(r, cells={k: dc.replace(c, bold=c.bold or flags.get((i, k), False))
                                 for k, c in r.cells.items()}) for i, r in enumerate(table.rows)]
    return dc.replace(table, rows=rows, bold_best=False, underline_second=False)
