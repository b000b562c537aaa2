"""The ablation-suite file format (YAML), parsed and validated.

The format's typed schema (one dataclass per section, ``table:`` layouts included) and the reader its
type hints drive are :mod:`harness.ablation.schema`; this module turns a read file into an
:class:`AblationSuite` and checks what spans sections (ids, the baseline, aggregates).

A suite file (``suites/ablations/<name>.yaml``)::

    name: quickstart
    version: 1                      # bump when the suite's meaning changes
    description: ...
    baseline: uniform               # a variant id
    variants:                       # table rows
      - id: uniform
        method: uniform             # a registered method, or "none" (evaluate the untrained model)
        options: {}                 # method options (TrainSpec.method_options)
        train: {}                   # TrainSpec overrides for this variant at every scale
        scales: {tiny: {train: {}}} # ... or at one scale (also model:, options:, seeds:, ...)
    metrics: [ndcg@10]              # table columns per benchmark
    stats: {test: randomization, correction: holm, alpha: 0.05, seed: 0, aggregate: pooled}
    scales:
      tiny:
        model: synthetic:tiny-bert  # alias, path, hub id, or synthetic:<kind>
        data: [synthetic:default]   # training collections (see harness.data.collections); an entry may
                                    # rename its files' keys: {path: ..., map: {question: query}}
        train: {steps: 60}          # TrainSpec overrides shared by every variant
        seeds: [1, 2, 3]            # replicates at this scale (see "Axes" below)
        benchmarks:                 # table column groups
          - {id: easy, suite: synthetic, dataset_dir: "synthetic:default/eval/easy-en"}
        aggregates:                 # macro averages; a member may itself be an aggregate
          Avg: [easy, ...]
          CQADupStack: [cqa-android, cqa-english, ...]        # the forums averaged first
          BEIR-15: [trec-covid, ..., CQADupStack]             # CQADupStack counts once
      quick:                        # a scale named outside the methods' presets (tiny, small, paper)
        preset: tiny                # must name the preset it extends: refused at validation otherwise
        ...                         # model, data, benchmarks as above

Baseline rows: a variant with ``method: none`` trains nothing and evaluates ``model:``
(default: the scale's model) under the same protocol cards: ``model: bm25`` (the
lexical baseline; ``bm25_ties`` and the analyzer come from the benchmark's card), an
alias (``minilm``, ``smollm2``, ...), a model folder or a hub id.  A trained variant may
name its own backbone too, per scale when the backbones differ (a decoder row in an
encoder suite): ``scales: {tiny: {model: tiny-decoder-untied}, paper: {model: ...}}``.

Axes (one declared variant becomes several cells; :mod:`harness.ablation.axes`):

* ``sweep: {param: options.k, values: [2, 4, 8]}`` on a variant (any method option,
  ``options.<name>``, or TrainSpec field, ``train.<field>``): one system per value, with
  the id ``<variant>@<name>=<value>`` and the label ``<label> (<name>=<value>)``; the
  ``sweep`` layout kind renders it as a table and a line plot.
* ``seeds: [1, 2, 3]`` at the top level, in a scale, on a variant or a variant's scale
  (the most specific wins; untrained variants have no replicates): one training run
  per seed (TrainSpec ``seed``), cell ids ``<system>@seed=<s>``; tables show the mean
  ± sd over the replicates and test the per-query scores averaged over the seeds.
* ``checkpoints: [20, 40]`` or ``checkpoints: {every: 20}`` on a variant (or a variant's
  scale): the run keeps the checkpoints of those steps (``save_every``, nothing pruned;
  neither changes the cell's key) and each is evaluated as ``<cell>@step=<n>`` without
  retraining (step 0: the model before the first step, e.g. the stage the run starts from;
  ``save_initial``); the ``curve`` layout kind draws the learning curves.  A run that already
  finished without them is refused with the folder to delete.

A swept baseline's first value is the baseline row.  ``harness run`` writes, for a suite
with a sweep or checkpoints, ``sweep.md``/``curve.md`` (and ``.tex``, ``.png``, ``.pdf``)
next to ``table.md`` over its aggregates (else every benchmark) and appends both tables
to ``table.md``; ``--only`` takes a declared variant (all its cells) or a cell id.

Strings may use ``{shared}`` (the real-data root: ``$HARNESS_SHARED_DATA`` or
``../shared/data`` beside the repository) and ``synthetic:<preset>[/sub/path]``
(the synthetic world of that preset, generated on first use).  The same file runs
at every scale; a scale a suite does not define is refused with a clear error.

Names that become folders under the results root (the suite ``name``, variant and
benchmark ``id``s, scale names, layout names, training-data ``name``s, and the cell
ids the axes generate from them) must each be one safe path component
(:func:`harness.io.paths.check_component`: ASCII letters, digits and ``. _ - + @ =``,
not starting with ``.`` or ``-``, at most 128 characters); anything else is a problem
reported at its line with the file's other problems, before anything is run.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ablation.problems import KeyPath, Problems
from harness.ablation.schema import (  # noqa: F401 (re-exported: the schema's names as the suite format's)
    EVALUATION_KEYS,
    EXTENSION_PREFIX,
    SWEEP_SECTIONS,
    TOP_KEYS,
    Checkpoints,
    ScaleEntry,
    SchemaReader,
    SuiteFile,
    Sweep,
    TableSection,
    VariantEntry,
    VariantScaleEntry,
    closest,
    encoding_kwargs,
    given,
    show,
)
from harness.ablation.yamlsafe import load_yaml
from harness.errors import ConfigError, InputError

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites" / "ablations"
NO_TRAINING = "none"
STATS_KEYS_ORDER = ("test", "correction", "alpha", "seed", "aggregate", "resamples", "missing")
STATS_KEYS = set(STATS_KEYS_ORDER)


@dataclass
class Variant:
    id: str
    method: str
    label: str
    options: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    scales: dict[str, dict[str, Any]] = field(default_factory=dict)
    model: str | None = None           # evaluate this model instead (e.g. "bm25" with method none)
    sweep: Sweep | None = None
    seeds: list[int] | None = None
    checkpoints: Checkpoints | None = None
    # evaluation settings (EVALUATION_KEYS): encoding options, sparse backend, quantisation
    evaluation: dict[str, Any] = field(default_factory=dict)

    def model_at(self, scale: str) -> str | None:
        """The variant's own model at ``scale`` (``scales: {<scale>: {model: ...}}``, else ``model:``);
        None: the scale's model."""
        return self.scales.get(scale, {}).get("model") or self.model


@dataclass
class BenchmarkRef:
    id: str
    suite: str
    dataset_dir: str
    label: str
    options: dict[str, Any] = field(default_factory=dict)   # passed to suite.load (split, language, ...)
    max_queries: int | None = None                          # seeded query subset (small scales)
    corpus_sample: int | None = None                        # judged docs + this many random others


@dataclass
class ScaleConfig:
    name: str
    model: str
    data: list[Any]
    train: dict[str, Any]
    benchmarks: list[BenchmarkRef]
    aggregates: dict[str, list[str]] = field(default_factory=dict)
    dry_run_only: bool = False        # "paper" scales that only make sense on GPUs
    seeds: list[int] | None = None
    evaluation: dict[str, Any] = field(default_factory=dict)   # EVALUATION_KEYS for every variant
    # A smoke scale: the recipe of scale ``recipe`` (method presets and every variant's settings there)
    # with each model named in ``stand_ins`` replaced by its stand-in and each run capped by ``limits``.
    recipe: str | None = None
    stand_ins: dict[str, str] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    preset: str | None = None         # the method preset this scale extends (``preset: tiny``)

    @property
    def preset_scale(self) -> str:
        """The method preset this scale's runs start from: its ``preset``, else its ``recipe``'s, else its
        own name (a name that is no preset of a method is refused at validation)."""
        return self.preset or self.recipe or self.name

    def stand_in(self, value: Any) -> Any:
        """``value`` with every string that names a model of ``stand_ins`` replaced (nested options too)."""
        if not self.stand_ins:
            return value
        if isinstance(value, str):
            return self.stand_ins.get(value, value)
        if isinstance(value, dict):
            return {k: self.stand_in(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.stand_in(v) for v in value)
        return value

    def aggregate_leaves(self, name: str) -> list[str]:
        """The benchmarks an aggregate covers, nested aggregates expanded (in order, each once)."""
        out: list[str] = []
        for member in self.aggregates[name]:
            for leaf in (self.aggregate_leaves(member) if member in self.aggregates else [member]):
                if leaf not in out:
                    out.append(leaf)
        return out

    def aggregate_closure(self, names: list[str]) -> dict[str, list[str]]:
        """``{aggregate: members}`` of ``names`` and every aggregate nested in them (members first)."""
        out: dict[str, list[str]] = {}

        def visit(name: str) -> None:
            for member in self.aggregates[name]:
                if member in self.aggregates and member not in out:
                    visit(member)
            out[name] = list(self.aggregates[name])

        for name in names:
            if name not in out:
                visit(name)
        return out


@dataclass
class AblationSuite:
    name: str
    version: int
    description: str
    baseline: str
    variants: list[Variant]
    metrics: list[str]
    stats: dict[str, Any]
    scales: dict[str, ScaleConfig]
    path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    seeds: list[int] | None = None
    # the ``table:`` section, read by the schema (harness.ablation.layout consumes it)
    table: TableSection = field(default_factory=TableSection, compare=False, repr=False)
    # provenance: the line of every key path of the file (``("variants", 1, "options", "k")``)
    lines: dict[KeyPath, int] = field(default_factory=dict, compare=False, repr=False)
    columns: dict[KeyPath, int] = field(default_factory=dict, compare=False, repr=False)   # of each key path

    def source(self, keypath: KeyPath) -> str | None:
        """Where the value at ``keypath`` was written: ``<suite file>:<line>``, or None (not from the file)."""
        line = self.lines.get(tuple(keypath))
        if line is None:
            return None
        return f"{self.path.name if self.path is not None else '<suite>'}:{line}"

    def seeds_for(self, variant: Variant, scale: str) -> list[int] | None:
        """The replicate seeds of ``variant`` at ``scale`` (variant's scale > variant > scale > suite);
        None: one run with the spec's own seed.  Untrained variants have no replicates."""
        if variant.method == NO_TRAINING:
            return None
        at_scale = variant.scales.get(scale, {}).get("seeds")
        for seeds in (at_scale, variant.seeds, self.scale(scale).seeds, self.seeds):
            if seeds is not None:
                return list(seeds)
        return None

    def checkpoints_for(self, variant: Variant, scale: str) -> Checkpoints | None:
        """The intermediate checkpoints of ``variant`` to evaluate at ``scale`` (variant's scale > variant)."""
        at_scale = variant.scales.get(scale, {}).get("checkpoints")
        return at_scale if at_scale is not None else variant.checkpoints

    def scale(self, name: str) -> ScaleConfig:
        if name not in self.scales:
            hint = closest(name, self.scales)
            raise ConfigError(f"suite {self.name!r} has no scale {name!r}"
                              + (f" (did you mean {hint!r}?)" if hint else "")
                              + f"; scales: {', '.join(self.scales)}")
        return self.scales[name]

    def variant(self, vid: str) -> Variant:
        for v in self.variants:
            if v.id == vid:
                return v
        raise ConfigError(f"suite {self.name!r} has no variant {vid!r}")

    def stats_options(self):
        """The :class:`harness.stats.StatsOptions` of the suite's ``stats`` section (test, seed, resamples,
        missing); the section's ``correction``, ``alpha`` and ``aggregate`` are read where they apply."""
        from harness.stats import StatsOptions  # lazy (start-up speed): imports scipy

        stats = self.stats
        given: dict[str, Any] = {}   # the section's values; StatsOptions' defaults stand for the rest
        if "resamples" in stats:
            given["resamples"] = int(stats["resamples"])
        if "missing" in stats:
            given["missing"] = stats["missing"]
        return StatsOptions(test=stats.get("test", "randomization"), seed=int(stats.get("seed", 0)), **given)


def list_suite_files(directory: Path = SUITES_DIR) -> dict[str, Path]:
    """``{suite name: file}`` for every suite file shipped with the project."""
    return {p.stem: p for p in sorted(directory.glob("*.yaml"))}


def load_suite(name_or_path: str | Path, problems: Problems | None = None) -> AblationSuite:
    """Load a suite by name (``suites/ablations/<name>.yaml``) or from a path.  With ``problems``, the
    file's problems are added there (for the caller to report with the plan's) instead of raised."""
    path = Path(name_or_path)
    if not path.suffix:
        known = list_suite_files()
        if str(name_or_path) not in known:
            hint = closest(str(name_or_path), known)
            raise ConfigError(f"unknown suite {str(name_or_path)!r}{f' (did you mean {hint!r}?)' if hint else ''}; "
                              f"known suites: {', '.join(known) or '(none)'}")
        path = known[str(name_or_path)]
    if not path.exists():
        raise InputError(path, "suite file does not exist")
    columns: dict[KeyPath, int] = {}
    raw, lines = load_yaml(path, columns=columns)
    return parse_suite(raw, path, lines, problems, columns)


def parse_suite(raw: Any, path: Path | None = None, lines: dict | None = None,
                problems: Problems | None = None, columns: dict | None = None) -> AblationSuite:
    """Build an :class:`AblationSuite` from a loaded suite file; every problem of the file (unknown keys
    with the closest known key, wrong types, dangling ids, bad stats settings) is reported at once.

    The file is read by the typed schema (:class:`harness.ablation.schema.SuiteFile`); the checks across
    sections (duplicate ids, the baseline, aggregates, what an untrained variant may not set) follow.
    With ``problems`` they are added there and the suite is returned as far as it could be built
    (entries without their required keys left out), so plan validation can add its own."""
    collect = problems is not None
    if problems is None:
        problems = Problems(path, lines, columns)
    else:
        problems.path, problems.lines, problems.columns = path, lines or {}, columns or {}
    r = SchemaReader(problems)
    file = r.section(SuiteFile, raw, ())
    if file is None:
        problems.raise_if_any()
    variants = [v for v in (_variant(item, ("variants", i), r) for i, item in enumerate(file.variants)) if v]
    ids = [v.id for v in variants]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        problems.add(("variants",), f"duplicate variant id(s): {', '.join(dup)}")
    baseline = file.baseline
    if baseline and variants and baseline not in ids:
        hint = closest(baseline, ids)
        problems.add(("baseline",), f"baseline {baseline!r} is not a variant id"
                     + (f" (did you mean {hint!r}?)" if hint else "") + f" ({', '.join(ids)})")
    if isinstance(raw.get("scales"), dict) and not raw["scales"]:
        problems.add(("scales",), "'scales' must map scale names (tiny, small, paper) to their settings")
    scales = {name: _scale(name, entry, r) for name, entry in file.scales.items() if entry is not None}
    _borrow_recipes(scales, variants, r)
    for i, v in enumerate(variants):
        for extra in sorted(set(v.scales) - set(scales)):
            if scales:
                hint = closest(extra, scales)
                problems.add(("variants", i, "scales", extra), f"variant {v.id!r} configures unknown scale "
                             f"{extra!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; scales: {', '.join(scales)}")
    if not collect:
        problems.raise_if_any()
    stats = dict(raw["stats"]) if isinstance(raw.get("stats"), dict) else {}
    raw = {k: v for k, v in raw.items() if not str(k).startswith(EXTENSION_PREFIX)}
    return AblationSuite(name=file.name, version=file.version, description=str(file.description or "").strip(),
                         baseline=baseline, variants=variants, metrics=list(file.metrics), stats=stats,
                         scales=scales, path=path, raw=raw, seeds=file.seeds, table=file.table or TableSection(),
                         lines=dict(lines or {}), columns=dict(columns or {}))


def _variant(entry: VariantEntry, keypath: KeyPath, r: SchemaReader) -> Variant | None:
    """A variant of its file entry, and what an untrained variant may not set."""
    vid, method = entry.id, entry.method
    scales = {s: _variant_scale(cfg or VariantScaleEntry()) for s, cfg in entry.scales.items()}
    if vid is None or method is None:
        return None
    if method == NO_TRAINING:
        for key in ("sweep", "seeds", "checkpoints"):
            if key in given(entry) or any(key in given(c) for c in entry.scales.values() if c is not None):
                r.problem(keypath + (key,), f"variant {vid!r} trains nothing (method {NO_TRAINING!r}): "
                                            f"'{key}' needs a trained variant")
    if entry.sweep is not None and entry.sweep.param == "train.seed" and (
            entry.seeds is not None or any(c.get("seeds") for c in scales.values())):
        r.problem(keypath + ("sweep",), f"variant {vid!r} sweeps train.seed and sets 'seeds': use one")
    return Variant(id=vid, method=method, label=entry.label or vid, options=dict(entry.options),
                   train=entry.train, scales=scales, model=entry.model, sweep=entry.sweep, seeds=entry.seeds,
                   checkpoints=entry.checkpoints, evaluation=entry.evaluation())


def _variant_scale(entry: VariantScaleEntry) -> dict[str, Any]:
    return {"model": entry.model, "train": entry.train, "options": dict(entry.options), "seeds": entry.seeds,
            "checkpoints": entry.checkpoints, "evaluation": entry.evaluation()}


def _scale(name: str, cfg: ScaleEntry, r: SchemaReader) -> ScaleConfig:
    """A scale of its file entry: duplicate benchmark ids, aggregates naming what exists, without cycles."""
    keypath = ("scales", name)
    benchmarks = [BenchmarkRef(id=b.id, suite=b.suite, dataset_dir=b.dataset_dir, label=b.label or b.id,
                               options=dict(b.options), max_queries=b.max_queries, corpus_sample=b.corpus_sample)
                  for b in cfg.benchmarks if b.id is not None and b.suite is not None and b.dataset_dir is not None]
    ids = [b.id for b in benchmarks]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        r.problem(keypath + ("benchmarks",), f"duplicate benchmark id(s): {', '.join(dup)}")
    aggregates = cfg.aggregates
    for agg, members in aggregates.items():
        where = keypath + ("aggregates", agg)
        if agg in ids:
            r.problem(where, f"aggregate {agg!r} has the id of a benchmark")
        # a member is a benchmark or another aggregate (averaged first: CQADupStack's forums in BEIR-15)
        missing = [m for m in members if m not in ids and m not in aggregates]
        if missing and benchmarks:
            known = [*ids, *aggregates]
            hints = "".join(f" ({m!r}: did you mean {h!r}?)" for m in missing if (h := closest(m, known)))
            r.problem(where, f"aggregate {agg!r} names unknown benchmark(s) {', '.join(missing)}{hints}")
        dup = sorted({m for m in members if members.count(m) > 1})
        if dup:
            r.problem(where, f"aggregate {agg!r} lists {', '.join(dup)} more than once")
    cycle = _aggregate_cycle(aggregates)
    if cycle:
        r.problem(keypath + ("aggregates", cycle[0]), f"aggregates contain each other: {' -> '.join(cycle)}")
        aggregates = {}
    return ScaleConfig(name=name, model=cfg.model or "", data=cfg.data or [], train=cfg.train, benchmarks=benchmarks,
                       aggregates=aggregates, dry_run_only=cfg.dry_run_only is True, seeds=cfg.seeds,
                       evaluation=cfg.evaluation(), recipe=cfg.recipe, stand_ins=dict(cfg.stand_ins),
                       limits=dict(cfg.limits), preset=cfg.preset)


def _borrow_recipes(scales: dict[str, ScaleConfig], variants: list[Variant], r: SchemaReader) -> None:
    """Give each smoke scale (``recipe: <scale>``) that scale's recipe: its ``train`` and ``evaluation``
    settings under the smoke scale's own, and every variant's settings at that scale (models through the
    stand-ins), with what a variant sets at the smoke scale itself merged on top (nested mappings merge, so a
    variant can swap the recipe's data-like options, e.g. COCO's corpora, for stand-ins).  Replicate seeds and
    intermediate checkpoints are not borrowed: a smoke run is one capped run of each recipe."""
    for name, cfg in scales.items():
        if cfg.recipe is None:
            continue
        where = ("scales", name, "recipe")
        recipe = scales.get(cfg.recipe)
        if recipe is None or cfg.recipe == name:
            hint = closest(cfg.recipe, [s for s in scales if s != name])
            r.problem(where, f"scale {name!r}: recipe {cfg.recipe!r} is not another scale of the suite"
                             + (f" (did you mean {hint!r}?)" if hint else "") + f"; scales: {', '.join(scales)}")
            continue
        if recipe.recipe is not None:
            r.problem(where, f"scale {name!r}: recipe {cfg.recipe!r} borrows a recipe itself; name the scale it "
                             "borrows")
            continue
        cfg.preset = cfg.preset or recipe.preset     # the recipe's method preset comes with it
        cfg.train = _deep_merge(recipe.train, cfg.train)
        cfg.evaluation = _deep_merge(recipe.evaluation, cfg.evaluation)
        for variant in variants:
            own = variant.scales.get(name, {})
            borrowed = copy.deepcopy(variant.scales.get(recipe.name, {}))
            model = own.get("model") or variant.model_at(recipe.name)
            borrowed.update({"model": cfg.stand_in(model) if model else None, "seeds": own.get("seeds"),
                             "checkpoints": own.get("checkpoints"),
                             "options": _deep_merge(cfg.stand_in(borrowed.get("options") or {}),
                                                    own.get("options") or {}),
                             "train": _deep_merge(borrowed.get("train") or {}, own.get("train") or {}),
                             "evaluation": _deep_merge(borrowed.get("evaluation") or {},
                                                       own.get("evaluation") or {})})
            variant.scales[name] = borrowed


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``: nested mappings merge, every other value of ``top`` replaces."""
    out = dict(base)
    for key, value in top.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def _aggregate_cycle(aggregates: dict[str, list[str]]) -> list[str]:
    """A chain ``[a, b, ..., a]`` of aggregates that contain each other, or ``[]``."""
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for member in aggregates[name]:
            if member not in aggregates:
                continue
            if state.get(member) == 1:
                return [*path, name, member][[*path, name].index(member):]
            if member not in state:
                found = visit(member, [*path, name])
                if found:
                    return found
        state[name] = 2
        return []

    for name in aggregates:
        if name not in state:
            found = visit(name, [])
            if found:
                return found
    return []
