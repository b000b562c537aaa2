"""Many systems x metrics x datasets against one baseline, corrected over a declared family.

:func:`compare_suite` is the entry point behind ``harness compare`` and the suite
tables: it pairs every non-baseline system with the baseline on every metric and
dataset (and on declared aggregates such as a BEIR average), then adjusts the
p-values for multiple comparisons.

The **family** over which p-values are corrected is declared, never implied:

* ``all`` (default): every comparison in the report, i.e. every significance
  marker in the table it renders;
* ``metric`` / ``dataset`` / ``system``: one family per metric, per dataset (an
  aggregate is its own dataset) or per system;
* a callable ``Comparison -> key`` for anything else.

The method and family are recorded on every comparison (``correction``,
``family``, ``family_size``) and stated in every output.

Monte Carlo tests share their draws across systems (:mod:`harness.stats.shared`)
and their count ``B`` is raised for large families so that the smallest
attainable p ``1/(B+1)`` stays well below ``alpha/m`` (rule ``B >= 20 m/alpha``
over the largest family, :mod:`harness.stats.floor`); a table of a large family
says so in a note.  A randomization decision still within Monte Carlo error of
its corrected threshold is decided from its data alone (exact p, exact bounds or
the saddlepoint, :mod:`harness.stats.resolve`), so no decision depends on the
seed; the report lists those (``resolved``) and a table note names them.

An aggregate may list other aggregates among its members (BEIR-15 with CQADupStack
averaged over its 12 forums first): a nested member counts as one dataset whose
value is its own macro average.  For the tests it enters its parent as one dataset
of its members' queries, each weighted ``N / (k n_i)`` (``k`` members, ``n_i``
queries in member ``i``, ``N`` in all), so the member's mean is exactly its macro
average: under ``macro`` the parent's test sees that average, under ``pooled`` the
weighted per-query differences.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.io.readers import read_json_object
from harness.io.results_layout import COMPARISONS_FILE
from harness.stats.aggregate import AGGREGATE_DESCRIPTIONS, AGGREGATE_METHODS, compare_aggregate_group
from harness.stats.align import PairedScores, align
from harness.stats.compare import DEFAULT_OPTIONS, Comparison, StatsOptions, compare_group
from harness.stats.correction import CORRECTION_CONTROLS, CORRECTION_NAMES, CORRECTIONS, adjust_pvalues
from harness.stats.floor import floor_note, monte_carlo_bounds, resamples_for_family
from harness.stats.resolve import KIND_NAMES, Resolution, resolve_sign_flip

FAMILIES = ("all", "metric", "dataset", "system")
Family = str | Callable[[Comparison], Any]
# Results by dataset, then system.  Dataset keys are names, or None for one unnamed dataset; the key is
# typed Any because a Mapping's key type is invariant (a dict[str, ...] is no Mapping[str | None, ...]).
SuiteResults = Mapping[Any, Mapping[str, Any]]


@dataclass(frozen=True)
class ResolvedDecision:
    """A comparison whose decision lay within Monte Carlo error of its threshold, decided without that error.

    ``kind`` is ``exact`` (exact permutation p on the metric's grid), ``bounded``
    (exact bounds on p decide it) or ``saddlepoint`` (the bounds straddle the
    threshold; the Lugannani-Rice value decides), see :mod:`harness.stats.resolve`.
    """

    comparison: Comparison
    kind: str
    p_low: float
    p_high: float
    saddlepoint: float
    monte_carlo_p: float        # the p it replaces, from B = resamples sign flips
    resamples: int | None
    grid: str

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {"dataset": c.dataset, "system": c.system, "metric": c.metric, "method": self.kind,
                "p_value": c.p_value, "p_low": self.p_low, "p_high": self.p_high, "saddlepoint": self.saddlepoint,
                "monte_carlo_p": self.monte_carlo_p, "resamples": self.resamples, "grid": self.grid}


@dataclass
class ComparisonReport:
    """All comparisons of one table, with the settings that produced them."""

    comparisons: list[Comparison]
    baseline: str
    systems: list[str]                  # baseline first
    metrics: list[str]
    datasets: list[str | None]
    aggregates: dict[str, list[str]] = field(default_factory=dict)
    options: StatsOptions = field(default_factory=StatsOptions)
    correction: str = "holm"
    alpha: float = 0.05
    family: str = "all"
    aggregate_method: str = "pooled"
    test_resamples: int | None = None   # the test's B when a large family raised it above options.resamples
    # Comparisons whose decision is still within Monte Carlo error of its threshold at max_resamples.
    unsettled: list[Comparison] = field(default_factory=list)
    # Randomization-test decisions that lay within Monte Carlo error of their threshold, decided from the data.
    resolved: list[ResolvedDecision] = field(default_factory=list)

    def get(self, system: str, metric: str, dataset: str | None = None) -> Comparison:
        for c in self.comparisons:
            if c.system == system and c.metric == metric and c.dataset == dataset:
                return c
        raise KeyError((system, metric, dataset))

    def describe(self) -> list[str]:
        """Sentences stating test, interval, correction, family and alpha (for legends and logs)."""
        sizes = sorted({c.family_size for c in self.comparisons})
        size_text = "/".join(str(s) for s in sizes) if sizes else "0"
        lines = [
            f"Test: {self.options.describe(self.test_resamples)}.",
            f"Correction: {CORRECTION_NAMES[self.correction]} (controls the {CORRECTION_CONTROLS[self.correction]}) "
            f"over family '{self.family}' ({size_text} comparisons per family); "
            f"significant if adjusted p < {self.alpha:g}.",
        ]
        note = self.floor_note()
        if note:
            lines.append(note)
        repeats = dict.fromkeys((c.system, c.same_as) for c in self.comparisons if c.same_as)
        if repeats:
            lines.append("Same run: " + "; ".join(f"{a} repeats {b}" for a, b in repeats) + " (one training run "
                         "shown under two names, or runs with identical per-query results): its cells are the "
                         "other's comparison, tested and counted once in the family, not two results.")
        if self.unsettled:
            names = "; ".join(f"{c.system} on {c.metric}" + (f" ({c.dataset})" if c.dataset else "")
                              for c in self.unsettled)
            lines.append(f"Warning: {len(self.unsettled)} decision(s) lie within Monte Carlo error of their corrected "
                         f"threshold even at B={self.options.max_resamples} (another seed may decide them the "
                         f"other way): {names}.")
        if self.resolved:
            lines.append(self.resolved_note())
        if self.aggregates:
            lines.append(f"Aggregates: {AGGREGATE_DESCRIPTIONS[self.aggregate_method]}.")
            nested = [f"{m} in {name}" for name, members in self.aggregates.items() for m in members
                      if m in self.aggregates]
            if nested:
                lines.append(f"Nested aggregates ({', '.join(nested)}) count once, as their own macro average.")
        missing = sum(c.missing_in_base + c.missing_in_system for c in self.comparisons)
        if missing:
            lines.append(f"Missing queries scored as 0: {missing} (query, comparison) pairs.")
        return lines

    def floor_note(self) -> str | None:
        """The Monte Carlo floor note of a large family (family size and the B used), else ``None``."""
        monte_carlo = [c for c in self.comparisons if _is_monte_carlo(c)]
        if self.correction == "none" or not monte_carlo:
            return None
        size = max(c.family_size for c in self.comparisons)
        b = min(c.resamples or self.options.resamples for c in monte_carlo)
        return floor_note(size, self.alpha, b, CORRECTION_NAMES[self.correction])

    def resolved_note(self) -> str:
        """Which decisions lay within Monte Carlo error of their threshold, and how each was decided instead."""
        counts = {k: sum(r.kind == k for r in self.resolved) for k in KIND_NAMES}
        how = ", ".join(f"{n} by {KIND_NAMES[k]}" for k, n in counts.items() if n)
        names = "; ".join(f"{r.comparison.system} on {r.comparison.metric}"
                          + (f" ({r.comparison.dataset})" if r.comparison.dataset else "") + f" [{r.kind}]"
                          for r in self.resolved)
        draws = "/".join(str(b) for b in sorted({r.resamples for r in self.resolved if r.resamples}))
        return (f"Decided without Monte Carlo error: {len(self.resolved)} decision(s) lay within Monte Carlo error "
                f"of their corrected threshold at B={draws or '-'} sign flips (cap {self.options.max_resamples}); "
                f"their p-values were computed from the data alone and are the same under every seed: {how}: "
                f"{names}.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "systems": list(self.systems),
            "metrics": list(self.metrics),
            "datasets": list(self.datasets),
            "aggregates": {k: list(v) for k, v in self.aggregates.items()},
            "aggregate_method": self.aggregate_method if self.aggregates else None,
            "test": self.options.test,
            "correction": self.correction,
            "family": self.family,
            "alpha": self.alpha,
            "options": {"resamples": self.options.resamples, "seed": self.options.seed,
                        "ci_level": self.options.ci_level, "exact_max_n": self.options.exact_max_n,
                        "missing": self.options.missing,
                        "max_resamples": self.options.max_resamples,
                        "test_resamples": self.test_resamples or self.options.resamples},
            "description": self.describe(),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "unsettled": [[c.dataset, c.system, c.metric] for c in self.unsettled],
            "resolved": [r.to_dict() for r in self.resolved],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ComparisonReport:
        """The report :meth:`to_dict` wrote (``description`` is derived again, not read)."""
        raw_options = dict(data.get("options") or {})
        test_resamples = raw_options.pop("test_resamples", None)
        options = StatsOptions(test=data.get("test", DEFAULT_OPTIONS.test), **raw_options)
        comparisons = [Comparison.from_dict(c) for c in data.get("comparisons") or []]
        report = cls(comparisons=comparisons, baseline=data["baseline"], systems=list(data["systems"]),
                     metrics=list(data["metrics"]), datasets=list(data["datasets"]),
                     aggregates={k: list(v) for k, v in (data.get("aggregates") or {}).items()},
                     options=options, correction=data.get("correction", "holm"), alpha=float(data.get("alpha", 0.05)),
                     family=data.get("family", "all"), aggregate_method=data.get("aggregate_method") or "pooled",
                     test_resamples=test_resamples if test_resamples != options.resamples else None)
        report.unsettled = [report.get(system, metric, dataset)
                            for dataset, system, metric in data.get("unsettled") or []]
        report.resolved = [ResolvedDecision(report.get(r["system"], r["metric"], r["dataset"]), r["method"],
                                            r["p_low"], r["p_high"], r["saddlepoint"], r["monte_carlo_p"],
                                            r["resamples"], r["grid"]) for r in data.get("resolved") or []]
        return report

    @classmethod
    def load(cls, path: str | Path) -> ComparisonReport:
        """Read a stored report: a ``comparisons.json`` file, or a suite's report folder holding one."""
        path = Path(path)
        if path.is_dir():
            path = path / COMPARISONS_FILE
        data = read_json_object(path, "suite comparisons")
        if not isinstance(data.get("comparisons"), list) or not isinstance(data.get("systems"), list):
            raise InputError(path, "'comparisons' and 'systems' must be lists; rerun the suite to rewrite it")
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError, ConfigError) as exc:
            raise InputError(path, f"not a comparison report ({type(exc).__name__}: {exc}); "
                                   "rerun the suite to rewrite it") from None


def family_groups(comparisons: Sequence[Comparison],
                  family: Family = "all") -> tuple[str, dict[Any, list[Comparison]]]:
    """The family name and ``{family key: its comparisons}``."""
    if callable(family):
        key_of, family_name = family, getattr(family, "__name__", "custom")
    elif family in FAMILIES:
        family_name = family
        key_of = {"all": lambda c: "all", "metric": lambda c: c.metric,
                  "dataset": lambda c: c.dataset or "", "system": lambda c: c.system}[family]
    else:
        raise ConfigError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)} or pass a function")
    groups: dict[Any, list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault(key_of(c), []).append(c)
    return family_name, groups


def apply_correction(comparisons: Sequence[Comparison], method: str, family: Family = "all") -> str:
    """Set ``p_adjusted``, ``correction``, ``family`` and ``family_size`` in place; returns the family name."""
    if method not in CORRECTIONS:
        raise ConfigError(f"unknown correction {method!r}; choose one of {', '.join(CORRECTIONS)}")
    family_name, groups = family_groups(comparisons, family)
    for key, members in groups.items():
        adjusted = adjust_pvalues([c.p_value for c in members], method)
        label = family_name if family_name == "all" else f"{family_name}={key}"
        for c, p in zip(members, adjusted):
            c.p_adjusted = float(p)
            c.correction = method
            c.family = label
            c.family_size = len(members)
    return family_name


def _evaluation(value: Any) -> EvaluationResult:
    evaluation = getattr(value, "evaluation", value)   # a StoredResult carries one
    if not isinstance(evaluation, EvaluationResult):
        raise ConfigError(f"expected an EvaluationResult or a stored result, got {type(value).__name__}")
    return evaluation


def compare_suite(results: SuiteResults, metrics: Sequence[str], *,
                  baseline: str | None = None, aggregates: Mapping[str, Sequence[str]] | None = None,
                  aggregate_method: str = "pooled", options: StatsOptions = DEFAULT_OPTIONS,
                  correction: str = "holm", alpha: float = 0.05, family: Family = "all",
                  cells: Collection[tuple[Any, str]] | None = None,
                  same_as: Mapping[str, str] | None = None) -> ComparisonReport:
    """Compare every system with the baseline on every dataset, metric and aggregate.

    ``results`` maps dataset name (``None`` for a single unnamed dataset) to
    ``{system name: EvaluationResult or StoredResult}``; the first system of the
    first dataset is the baseline unless ``baseline`` is given.  ``aggregates`` maps
    an aggregate name (e.g. ``"BEIR avg"``) to the datasets it averages.
    ``cells`` restricts the comparisons to these ``(dataset or aggregate, metric)`` pairs (a table
    that shows some of them): the family, the draw count it needs and the resolution of close
    decisions are then those of exactly the shown cells, in one pass.
    ``same_as`` maps a system to another that is the same run (one training run shown under two names,
    or runs whose results are identical): it is not tested again; its comparisons are the other's, marked
    ``same_as``, and the correction family counts the run once (:func:`same_results` finds identical ones).
    """
    if not results:
        raise ConfigError("nothing to compare: no results given")
    if aggregate_method not in AGGREGATE_METHODS:
        raise ConfigError(f"unknown aggregate method {aggregate_method!r}; "
                          f"choose one of {', '.join(AGGREGATE_METHODS)}")
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    if not metrics:
        raise ConfigError("no metrics to compare")
    datasets = list(results)
    systems: list[str] = []
    for per_system in results.values():
        systems += [s for s in per_system if s not in systems]
    baseline = baseline if baseline is not None else systems[0]
    if baseline not in systems:
        raise ConfigError(f"baseline {baseline!r} is not among the systems: {', '.join(systems)}")
    every_other = [s for s in systems if s != baseline]
    if not every_other:
        raise ConfigError(f"nothing to compare: only the baseline {baseline!r} was given")
    same_as = dict(same_as or {})
    for alias, original in same_as.items():
        if alias not in every_other or original not in every_other or original in same_as:
            raise ConfigError(f"same_as: {alias!r} -> {original!r} must map a compared system to another compared "
                              f"system that is itself no alias (systems: {', '.join(every_other)})")
    others = [s for s in every_other if s not in same_as]
    for dataset, per_system in results.items():
        absent = [s for s in systems if s not in per_system]
        if absent:
            raise ConfigError(f"dataset {dataset!r} has no result for {', '.join(absent)}")

    # A dataset is compared on the metrics its protocol produced (an MKQA-style set has Acc@k but no
    # relevance judgements, so no nDCG); a metric no dataset has is an error, as before.
    measured = {d: [m for m in metrics if m in _evaluation(results[d][baseline]).per_query] for d in datasets}
    never = [m for m in metrics if not any(m in measured[d] for d in datasets)]
    if never:
        raise ConfigError(f"no dataset has metric(s) {', '.join(never)} (measured: "
                          f"{', '.join(sorted({m for d in datasets for m in measured[d]})) or 'none'})")
    pairs: dict[tuple[str | None, str, str], PairedScores] = {}
    for dataset in datasets:
        base_eval = _evaluation(results[dataset][baseline])
        for system in others:
            sys_eval = _evaluation(results[dataset][system])
            for metric in measured[dataset]:
                pairs[(dataset, system, metric)] = align(base_eval, sys_eval, metric=metric, missing=options.missing,
                                                         base_name=baseline, system_name=system)
    for name, members in (aggregates or {}).items():
        unknown = [d for d in members if d not in results and d not in (aggregates or {})]
        if unknown:
            raise ConfigError(f"aggregate {name!r} names datasets without results: {', '.join(map(str, unknown))}")
        if name in results:
            raise ConfigError(f"aggregate name {name!r} is also a dataset name")
    _check_nesting(aggregates or {})

    def leaves(name: Any) -> list[Any]:
        return [x for m in (aggregates or {})[name] for x in (leaves(m) if m in (aggregates or {}) else [m])]

    # An aggregate is compared on the metrics all its datasets have.
    for name in aggregates or {}:
        measured[name] = [m for m in metrics if all(m in measured[d] for d in leaves(name))]
    if cells is not None:
        wanted = set(cells)
        absent_cells = sorted(f"{w}/{m}" for w, m in wanted if m not in measured.get(w, []))
        if absent_cells:
            raise ConfigError(f"no comparison for {', '.join(absent_cells)}: not a dataset or aggregate with that "
                              f"metric")
        measured = {w: [m for m in ms if (w, m) in wanted] for w, ms in measured.items()}
    order = [(dataset, system, metric) for dataset in datasets for system in others for metric in measured[dataset]]
    order += [(name, system, metric) for name in (aggregates or {}) for system in others for metric in measured[name]]
    test_b = _test_resamples(order, {a: aggregate_method for a in aggregates or {}}, baseline, options, correction,
                             alpha, family)
    members_of = {name: list(members) for name, members in (aggregates or {}).items()}

    def paired(member: Any, system: str, metric: str) -> PairedScores:
        if member in members_of:
            return nested_scores({m: paired(m, system, metric) for m in members_of[member]}, str(member))
        return pairs[(member, system, metric)]

    def run(where: Any, metric: str, systems: Sequence[str], b: int) -> dict[str, Comparison]:
        if where in members_of:
            return compare_aggregate_group({s: {d: paired(d, s, metric) for d in members_of[where]} for s in systems},
                                           name=where, metric=metric, baseline=baseline, method=aggregate_method,
                                           options=options, resamples=b)
        return compare_group({s: pairs[(where, s, metric)] for s in systems}, metric=metric, baseline=baseline,
                             dataset=where, options=options, resamples=b)

    done: dict[tuple[Any, str, str], Comparison] = {}
    for where in [*datasets, *members_of]:
        for metric in measured[where]:
            done.update({(where, s, metric): c for s, c in run(where, metric, others, test_b).items()})
    comparisons = [done[key] for key in order]

    def test_vector(index: int) -> np.ndarray:
        """The vector the randomization test of ``order[index]`` flipped signs of."""
        where, system, metric = order[index]
        if where in members_of:
            members = [paired(d, system, metric) for d in members_of[where]]
            if aggregate_method == "macro":
                return np.array([p.system.mean() - p.base.mean() for p in members])
            return np.concatenate([p.diff for p in members])
        return pairs[(where, system, metric)].diff

    def redraw(indices: Sequence[int], b: int) -> list[Comparison]:
        """The Monte Carlo tests of ``indices`` again with ``b`` draws (the streams extend each other)."""
        redo: dict[tuple[Any, str], list[str]] = {}
        for i in indices:
            where, system, metric = order[i]
            redo.setdefault((where, metric), []).append(system)
        for (where, metric), systems in redo.items():
            done.update({(where, s, metric): c for s, c in run(where, metric, systems, b).items()})
        return [done[order[i]] for i in indices]

    resolved: list[ResolvedDecision] = []
    if options.test != "ttest" and correction != "none":
        comparisons, resolved = settle_decisions(
            comparisons, redraw, test_vector if options.test == "randomization" else None, correction=correction,
            family=family, alpha=alpha, resamples=test_b, max_resamples=options.max_resamples)
    unsettled: list[Comparison] = []
    if options.test != "ttest" and correction != "none":
        unsettled = [comparisons[i] for i in unsettled_decisions(comparisons, correction, family, alpha)]
    family_name = apply_correction(comparisons, correction, family)
    if same_as:
        tested = {(c.dataset, c.system, c.metric): c for c in comparisons}
        full = [(where, system, metric) for where in [*datasets, *(aggregates or {})] for system in every_other
                for metric in measured[where]]
        comparisons = [tested[key] if key[1] not in same_as else
                       dataclasses.replace(tested[(key[0], same_as[key[1]], key[2])], system=key[1],
                                           same_as=same_as[key[1]]) for key in full]
    return ComparisonReport(comparisons, baseline, [baseline, *every_other], list(metrics), datasets,
                            {k: list(v) for k, v in (aggregates or {}).items()}, options, correction, alpha,
                            family_name, aggregate_method, test_b, unsettled, resolved)


def same_runs(keys: Mapping[str, Collection[str]], results: SuiteResults, systems: Sequence[str]) -> dict[str, str]:
    """``same_as`` for :func:`compare_suite`: each of ``systems`` (the compared ones, baseline excluded) that
    repeats an earlier one, first by its training runs' ``keys`` (one run shown as two rows), then by identical
    results (:func:`same_results`); every alias points at a system that is itself none."""
    out: dict[str, str] = {}
    first: dict[frozenset[str], str] = {}
    for system in systems:
        own = frozenset(keys.get(system, ()))
        if own and own in first:
            out[system] = first[own]
        elif own:
            first[own] = system
    rest = [s for s in systems if s not in out]
    out.update(same_results(results, rest))
    return out


def same_results(results: SuiteResults, systems: Sequence[str]) -> dict[str, str]:
    """``{system: earlier system}`` for systems whose per-query scores equal an earlier one's on every dataset and
    metric (the same numbers under two names: e.g. two selections that keep the same datasets at a small scale)."""
    def signature(system: str) -> tuple:
        parts = []
        for dataset, per_system in results.items():
            evaluation = _evaluation(per_system[system])
            scores = tuple(sorted((m, np.asarray(v, dtype=np.float64).tobytes())
                                  for m, v in evaluation.per_query.items()))
            parts.append((dataset, tuple(evaluation.query_ids), scores))
        return tuple(parts)

    seen: dict[tuple, str] = {}
    out: dict[str, str] = {}
    for system in systems:
        sig = signature(system)
        if sig in seen:
            out[system] = seen[sig]
        else:
            seen[sig] = system
    return out


def settle_decisions(comparisons: Sequence[Comparison], redraw: Callable[[Sequence[int], int], list[Comparison]],
                     test_vector: Callable[[int], np.ndarray] | None, *, correction: str, family: Family,
                     alpha: float, resamples: int, max_resamples: int,
                     confidence: float = 0.999) -> tuple[list[Comparison], list[ResolvedDecision]]:
    """Make every corrected decision independent of the Monte Carlo draws, as far as the data allow.

    A decision is *unsettled* when it differs between the lower and the upper ends
    (jointly) of the p-values' intervals: Clopper-Pearson (``confidence``) for a Monte
    Carlo p, exact bounds once computed (:func:`harness.stats.resolve.resolve_sign_flip`,
    randomization test only: ``test_vector`` gives the vector it flips signs of).

    1. Each unsettled randomization comparison gets its exact p (metric on a grid) or
       exact bounds; bounds that settle the decision decide it (``exact``/``bounded``).
    2. The rest are redrawn with 10x the draws, up to ``max_resamples``, while that
       can still narrow them (interval: Clopper-Pearson within the exact bounds; a
       comparison whose bounds are already narrower than the Clopper-Pearson interval
       at the cap is not redrawn: more draws cannot settle it).
    3. Randomization decisions still unsettled after that are decided by the
       Lugannani-Rice saddlepoint value clipped into their exact bounds (``saddlepoint``).

    Resolved comparisons report that deterministic p (a function of their data only),
    so their decisions are the same under every seed.  Bootstrap decisions have no
    exact bounds; the ones still unsettled at the cap are left to the caller to report.
    Returns new comparison objects (the input is not modified) and the resolved list.
    """
    out = list(comparisons)
    bounds: dict[int, Resolution] = {}
    b = resamples

    def pending(use_draws: bool) -> list[int]:
        return unsettled_decisions(out, correction, family, alpha, confidence,
                                   bounds={i: (r.low, r.high) for i, r in bounds.items()}, use_draws=use_draws)

    while True:
        unsettled = pending(True)
        new = [i for i in unsettled if i not in bounds and _is_monte_carlo(out[i])] if test_vector else []
        if test_vector is not None and new:
            for i in new:
                bounds[i] = resolve_sign_flip(test_vector(i))
            continue
        helpful = [i for i in unsettled if _is_monte_carlo(out[i])
                   and (i not in bounds or _wider_than_draws(bounds[i], max_resamples, confidence))]
        if not helpful or b >= max_resamples:
            break
        b = min(10 * b, max_resamples)
        for i, c in zip(helpful, redraw(helpful, b)):
            out[i] = c
    if not bounds:
        return out, []
    # Settled by the exact bounds alone (no Monte Carlo interval of theirs used), or left to the saddlepoint.
    by_bounds = set(pending(False))
    kinds = {}
    for i, res in bounds.items():
        if res.kind == "exact":
            kinds[i] = "exact"
        elif i not in by_bounds:
            kinds[i] = "bounded"
        elif i in unsettled:
            kinds[i] = "saddlepoint"
        # else: settled by more draws within its bounds; it stays a Monte Carlo comparison
    previous = {i: out[i] for i in kinds}
    for i, kind in kinds.items():
        out[i] = _with_resolution(out[i], bounds[i], kind)
    resolved = [ResolvedDecision(out[i], kinds[i], bounds[i].low, bounds[i].high, bounds[i].saddlepoint,
                                 previous[i].p_value, previous[i].resamples, bounds[i].grid) for i in sorted(kinds)]
    return out, resolved


def _wider_than_draws(res: Resolution, max_resamples: int, confidence: float) -> bool:
    """Whether Monte Carlo at ``max_resamples`` would pin p down more tightly than the exact bounds."""
    low, high = monte_carlo_bounds(res.p_value, max_resamples, confidence)
    return res.high - res.low > high - low


def _with_resolution(c: Comparison, res: Resolution, kind: str) -> Comparison:
    prefix = c.test_method.split("randomization (")[0]     # "pooled: " / "macro: " of an aggregate
    return dataclasses.replace(c, p_value=res.p_value, p_adjusted=res.p_value, test_method=prefix + res.method(kind))


def nested_scores(members: Mapping[str, PairedScores], name: str) -> PairedScores:
    """An aggregate as one dataset of its parent: its members' queries, each weighted ``N / (k n_i)`` so that
    the mean of either side is the members' macro average (the value the aggregate reports)."""
    if not members:
        raise ConfigError(f"aggregate {name!r} has no members")
    empty = [m for m, p in members.items() if p.n == 0]
    if empty:
        raise ConfigError(f"aggregate {name!r}: member(s) {', '.join(empty)} have no queries")
    total, k = sum(p.n for p in members.values()), len(members)
    ids, base, system = [], [], []
    for m, p in members.items():
        weight = total / (k * p.n)
        ids.append(np.array([f"{m}\x1f{q}" for q in p.query_ids.tolist()], dtype=str))
        base.append(p.base * weight)
        system.append(p.system * weight)
    return PairedScores(np.concatenate(ids), np.concatenate(base), np.concatenate(system),
                        missing_in_base=sum(p.missing_in_base for p in members.values()),
                        missing_in_system=sum(p.missing_in_system for p in members.values()))


def _check_nesting(aggregates: Mapping[str, Sequence[str]]) -> None:
    """Refuse aggregates that contain themselves (directly or through others)."""
    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ConfigError(f"aggregates contain each other: {' -> '.join([*path[path.index(name):], name])}")
        for member in aggregates.get(name, ()):
            if member in aggregates:
                visit(member, (*path, name))

    for name in aggregates:
        visit(name, ())


def unsettled_decisions(comparisons: Sequence[Comparison], correction: str, family: Family, alpha: float,
                        confidence: float = 0.999, *, bounds: Mapping[int, tuple[float, float]] | None = None,
                        use_draws: bool = True) -> list[int]:
    """Indices of comparisons whose decision could change with more draws.

    Every Monte Carlo p is replaced by the lower, then the upper end of its
    Clopper-Pearson interval (``confidence``); a comparison whose corrected decision
    differs between the two is unsettled.  Exact and t-test p-values are fixed.
    ``bounds`` gives exact bounds on some comparisons' p: the interval is then the
    Clopper-Pearson one within them, or the bounds alone with ``use_draws=False``.
    """
    low, high = [], []
    for i, c in enumerate(comparisons):
        lo, hi = monte_carlo_bounds(c.p_value, c.resamples, confidence) if _is_monte_carlo(c) else (c.p_value,) * 2
        if bounds and i in bounds:
            exact_lo, exact_hi = bounds[i]
            if use_draws and max(lo, exact_lo) <= min(hi, exact_hi):
                lo, hi = max(lo, exact_lo), min(hi, exact_hi)
            else:
                lo, hi = exact_lo, exact_hi
        low.append(lo)
        high.append(hi)
    at_low = corrected_decisions(comparisons, low, correction, family, alpha)
    at_high = corrected_decisions(comparisons, high, correction, family, alpha)
    return [i for i, (a, b) in enumerate(zip(at_low, at_high)) if a != b]


def corrected_decisions(comparisons: Sequence[Comparison], p_values: Sequence[float], correction: str,
                        family: Family, alpha: float) -> list[bool]:
    """Whether each comparison is significant when its p-value is ``p_values[i]`` (corrected per family)."""
    index = {id(c): i for i, c in enumerate(comparisons)}
    out = [False] * len(comparisons)
    for group in family_groups(comparisons, family)[1].values():
        members = [index[id(c)] for c in group]
        for i, a in zip(members, adjust_pvalues([p_values[i] for i in members], correction)):
            out[i] = bool(a < alpha)
    return out


def _is_monte_carlo(c: Comparison) -> bool:
    return "Monte Carlo" in c.test_method or "bootstrap (" in c.test_method


def _test_resamples(order: Sequence[tuple[Any, str, str]], aggregate_methods: dict[str, str], baseline: str,
                    options: StatsOptions, correction: str, alpha: float, family: Family) -> int:
    """The test's B: ``options.resamples`` raised for the largest family (``harness.stats.floor``)."""
    if options.test == "ttest":
        return options.resamples
    size = 1
    if correction != "none":
        # The family of a comparison depends only on its labels, so sizes are known before any test runs.
        planned = [Comparison(metric=m, system=s, baseline=baseline, test=options.test, n=0, mean_base=math.nan,
                            mean=math.nan, delta=math.nan, p_value=math.nan, p_adjusted=math.nan, ci_low=math.nan,
                            ci_high=math.nan, effect_size=math.nan, wins=0, ties=0, losses=0, dataset=d,
                            aggregate=aggregate_methods.get(d)) for d, s, m in order]
        size = max(len(members) for members in family_groups(planned, family)[1].values())
    return resamples_for_family(size, alpha, options.resamples, options.max_resamples)


def compare_systems(results: Mapping[str, Any], metrics: Sequence[str], *, baseline: str | None = None,
                    options: StatsOptions = DEFAULT_OPTIONS, correction: str = "holm", alpha: float = 0.05,
                    family: Family = "all", dataset: str | None = None) -> ComparisonReport:
    """Compare systems evaluated on one dataset: ``{system name: EvaluationResult or StoredResult}``."""
    return compare_suite({dataset: results}, metrics, baseline=baseline, options=options,
                         correction=correction, alpha=alpha, family=family)
