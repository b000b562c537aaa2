"""The ablation-suite file format (YAML), parsed and validated.

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
        data: [synthetic:default]   # training collections (see harness.data.collections)
        train: {steps: 60}          # TrainSpec overrides shared by every variant
        seeds: [1, 2, 3]            # replicates at this scale (see "Axes" below)
        benchmarks:                 # table column groups
          - {id: easy, suite: synthetic, dataset_dir: "synthetic:default/eval/easy-en"}
        aggregates:                 # macro averages; a member may itself be an aggregate
          Avg: [easy, ...]
          CQADupStack: [cqa-android, cqa-english, ...]        # the forums averaged first
          BEIR-15: [trec-covid, ..., CQADupStack]             # CQADupStack counts once

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
  retraining; the ``curve`` layout kind draws the learning curves.  A run that already
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

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ablation.problems import Problems
from harness.errors import ConfigError, InputError
from harness.io.paths import check_component

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites" / "ablations"
NO_TRAINING = "none"
STATS_KEYS_ORDER = ("test", "correction", "alpha", "seed", "aggregate", "resamples", "missing")
STATS_KEYS = set(STATS_KEYS_ORDER)
SWEEP_SECTIONS = ("options", "train")


@dataclass(frozen=True)
class Sweep:
    """A variant's parameter sweep: ``options.<name>`` (method option) or ``train.<field>`` over ``values``."""

    param: str
    values: tuple[Any, ...]

    @property
    def section(self) -> str:
        return self.param.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.param.split(".", 1)[1]


@dataclass(frozen=True)
class Checkpoints:
    """Intermediate steps of a run to evaluate: listed ``steps`` or every ``every`` steps."""

    steps: tuple[int, ...] = ()
    every: int | None = None

    def at(self, total_steps: int) -> list[int]:
        """The intermediate steps (< ``total_steps``) of a run of ``total_steps`` steps, ascending."""
        if self.every:
            return list(range(self.every, total_steps, self.every))
        return sorted({s for s in self.steps if s < total_steps})


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
        from harness.stats import StatsOptions

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
    from harness.ablation.yamlsafe import load_yaml

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
    raw, lines = load_yaml(path)
    return parse_suite(raw, path, lines, problems)


# Top-level keys starting with this are extension fields: holders for YAML anchors (``x-stage1: &stage1``),
# ignored by the harness and left out of ``AblationSuite.raw``.
EXTENSION_PREFIX = "x-"
# Every key a suite file may use, by section (anything else is an error naming the closest of these).
TOP_KEYS = ("name", "version", "description", "baseline", "variants", "metrics", "stats", "scales", "table", "seeds")
# How a model is evaluated (not trained): dense encoding options (harness.encoders.hf.encoding_options) and the
# sparse retrieval backend and impact quantisation (harness.retrieval.sparse.check_backend); at scale level they
# apply to every variant and are recorded in the protocol card, at variant level in the cell's key and manifest.
EVALUATION_KEYS = ("encoding", "sparse_backend", "quantization")
VARIANT_KEYS = ("id", "method", "label", "options", "train", "scales", "model", "sweep", "seeds", "checkpoints",
                *EVALUATION_KEYS)
VARIANT_SCALE_KEYS = ("model", "train", "options", "seeds", "checkpoints", *EVALUATION_KEYS)
SCALE_KEYS = ("model", "data", "train", "benchmarks", "aggregates", "dry_run_only", "seeds", *EVALUATION_KEYS)
SWEEP_KEYS = ("param", "values")
BENCHMARK_KEYS = ("id", "suite", "dataset_dir", "label", "options", "max_queries", "corpus_sample")
DATA_KEYS = ("path", "domains", "max_rows", "split", "negatives_run", "max_negatives", "name", "metadata")
TABLE_KEYS = ("default", "layouts")
LAYOUT_KEYS = ("kind", "caption", "rows", "columns", "scales", "decimals", "options")
LAYOUT_SCALE_KEYS = ("columns", "caption", "options")


def closest(name: str, known: Any) -> str | None:
    """The known name most like ``name`` (difflib), or None."""
    from harness.train.spec import closest as _closest

    return _closest(name, known)


class _Reader:
    """Typed access to the raw suite dict that records problems instead of raising."""

    def __init__(self, problems: Problems):
        self.problems = problems

    def mapping(self, value: Any, keypath: tuple, allowed: tuple[str, ...] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problems.add(keypath, f"expected a mapping, got {_show(value)}")
            return {}
        if allowed is not None:
            for key in value:
                if key not in allowed and not (keypath == () and str(key).startswith(EXTENSION_PREFIX)):
                    self.unknown(keypath, key, allowed)
        return value

    def unknown(self, keypath: tuple, key: Any, allowed: Any) -> None:
        """``key`` is not allowed in the mapping at ``keypath``: name it, where it is and the closest known key."""
        hint = closest(str(key), allowed)
        what = "unknown key" if keypath else "unknown top-level key"
        self.problems.add(keypath, f"{what} {key!r}" + (f" (did you mean {hint!r}?)" if hint else
                                                        f"; known keys here: {', '.join(map(str, allowed))}"),
                          at=keypath + (key,))

    def list(self, value: Any, keypath: tuple, non_empty: bool = True) -> list:
        if not isinstance(value, list) or (non_empty and not value):
            self.problems.add(keypath, f"expected a{' non-empty' if non_empty else ''} list, got {_show(value)}")
            return []
        return value

    def text(self, container: dict, key: str, keypath: tuple, default: Any = None,
             required: bool = False, names: bool = False) -> str | None:
        if key not in container or container[key] is None:
            if required:
                self.problems.add(keypath, f"missing {key!r}")
            return default
        value = container[key]
        ok = (str, int) if names else (str,)
        if not isinstance(value, ok) or isinstance(value, bool):
            self.problems.add(keypath + (key,), f"expected a string, got {_show(value)}")
            return default
        return str(value)

    def name(self, container: dict, key: str, keypath: tuple, what: str, default: Any = None,
             required: bool = False) -> str | None:
        """A name that becomes a folder under the results root (a suite name, variant or benchmark id): text
        (a number is taken as its digits) that must be one safe path component; a problem at its line
        otherwise.  The name is returned even then, so that references to it do not add problems."""
        value = self.text(container, key, keypath, default, required, names=True)
        if value is not None and key in container and container[key] is not None:
            self.component(value, keypath + (key,), what)
        return value

    def component(self, value: str, keypath: tuple, what: str) -> bool:
        """Whether ``value`` is one safe path component (a problem at ``keypath`` if not)."""
        try:
            check_component(value, what)
        except ConfigError as exc:
            self.problems.add(keypath, str(exc))
            return False
        return True

    def integer(self, container: dict, key: str, keypath: tuple, minimum: int, default: int | None = None
                ) -> int | None:
        value = container.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.problems.add(keypath + (key,), f"expected an integer >= {minimum}, got {_show(value)}")
            return default
        return value

    def train(self, value: Any, keypath: tuple) -> dict:
        """TrainSpec overrides: unknown fields and wrong types are problems (named with the expected type)."""
        from harness.train.spec import LoraSpec, TrainSpec, field_problems

        data = self.mapping(value, keypath)
        for key, message in field_problems(data):
            parts = tuple(key.split("."))
            if message.startswith("unknown option"):
                known = [f.name for f in dataclasses.fields(TrainSpec if len(parts) == 1 else LoraSpec)]
                self.unknown(keypath + parts[:-1], parts[-1], known)
            else:
                self.problems.add(keypath + parts, message)
        return dict(data)


def _show(value: Any) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"


def parse_suite(raw: Any, path: Path | None = None, lines: dict | None = None,
                problems: Problems | None = None) -> AblationSuite:
    """Build an :class:`AblationSuite` from a loaded suite file; every problem of the file (unknown keys
    with the closest known key, wrong types, dangling ids, bad stats settings) is reported at once.

    With ``problems`` they are added there and the suite is returned as far as it could be built
    (entries without their required keys left out), so plan validation can add its own."""
    collect = problems is not None
    if problems is None:
        problems = Problems(path, lines)
    else:
        problems.path, problems.lines = path, lines or {}
    r = _Reader(problems)
    if not isinstance(raw, dict):
        problems.add((), f"a suite file must be a mapping, got {_show(raw)}")
        problems.raise_if_any()
    r.mapping(raw, (), TOP_KEYS)
    for key in ("name", "baseline", "variants", "scales"):
        if key not in raw:
            problems.add((), f"missing top-level key {key!r}")
    name = r.name(raw, "name", (), "suite name", default="")
    version = r.integer(raw, "version", (), minimum=1, default=1)
    description = raw.get("description", "")
    if not isinstance(description, (str, type(None))):
        problems.add(("description",), f"expected a string, got {_show(description)}")
        description = ""
    parsed = [_variant(item, ("variants", i), r)
              for i, item in enumerate(r.list(raw.get("variants"), ("variants",)) if "variants" in raw else [])]
    variants = [v for v in parsed if v is not None]
    ids = [v.id for v in variants]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        problems.add(("variants",), f"duplicate variant id(s): {', '.join(dup)}")
    baseline = r.text(raw, "baseline", (), default="", names=True)
    if baseline and variants and baseline not in ids:
        hint = closest(baseline, ids)
        problems.add(("baseline",), f"baseline {baseline!r} is not a variant id"
                     + (f" (did you mean {hint!r}?)" if hint else "") + f" ({', '.join(ids)})")
    stats = _stats(raw.get("stats"), r)
    scales: dict[str, ScaleConfig] = {}
    if "scales" in raw:
        scales_raw = r.mapping(raw["scales"], ("scales",))
        if isinstance(raw["scales"], dict) and not scales_raw:
            problems.add(("scales",), "'scales' must map scale names (tiny, small, paper) to their settings")
        for sname, cfg in scales_raw.items():
            r.component(str(sname), ("scales", sname), "scale name")
            scale = _scale(str(sname), cfg, r)
            if scale is not None:
                scales[str(sname)] = scale
    for i, v in enumerate(variants):
        for extra in sorted(set(v.scales) - set(scales)):
            if scales:
                hint = closest(extra, scales)
                problems.add(("variants", i, "scales", extra), f"variant {v.id!r} configures unknown scale "
                             f"{extra!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; scales: {', '.join(scales)}")
    metrics = [str(m) for m in r.list(raw.get("metrics", ["ndcg@10"]), ("metrics",))]
    for i, m in enumerate(raw.get("metrics") or []):
        if not isinstance(m, str):
            problems.add(("metrics", i), f"expected a metric name, got {_show(m)}")
    _table(raw.get("table"), r)
    suite_seeds = _seeds(raw, (), r)
    if not collect:
        problems.raise_if_any()
    raw = {k: v for k, v in raw.items() if not str(k).startswith(EXTENSION_PREFIX)}
    return AblationSuite(name=str(name), version=int(version or 1), description=str(description or "").strip(),
                         baseline=str(baseline), variants=variants, metrics=metrics, stats=stats, scales=scales,
                         path=path, raw=raw, seeds=suite_seeds)


def _variant(v: Any, keypath: tuple, r: _Reader) -> Variant | None:
    if not isinstance(v, dict):
        r.problems.add(keypath, f"a variant must be a mapping with 'id' and 'method', got {_show(v)}")
        return None
    r.mapping(v, keypath, VARIANT_KEYS)
    vid = r.name(v, "id", keypath, "variant id", required=True)
    method = r.text(v, "method", keypath, required=True)
    label = r.text(v, "label", keypath, default=vid, names=True)
    model = r.text(v, "model", keypath)
    options = dict(r.mapping(v.get("options"), keypath + ("options",)))
    train = r.train(v.get("train"), keypath + ("train",))
    scales: dict[str, dict[str, Any]] = {}
    for s, cfg in r.mapping(v.get("scales"), keypath + ("scales",)).items():
        where = keypath + ("scales", s)
        cfg = r.mapping(cfg, where, VARIANT_SCALE_KEYS)
        scales[str(s)] = {"model": r.text(cfg, "model", where),
                          "train": r.train(cfg.get("train"), where + ("train",)),
                          "options": dict(r.mapping(cfg.get("options"), where + ("options",))),
                          "seeds": _seeds(cfg, where, r), "checkpoints": _checkpoints(cfg, where, r),
                          "evaluation": _evaluation(cfg, where, r)}
    sweep = _sweep(v.get("sweep"), keypath + ("sweep",), r) if "sweep" in v else None
    seeds = _seeds(v, keypath, r)
    checkpoints = _checkpoints(v, keypath, r)
    if vid is None or method is None:
        return None
    if method == NO_TRAINING:
        for key in ("sweep", "seeds", "checkpoints"):
            if v.get(key) is not None or any(c.get(key) is not None for c in scales.values()):
                r.problems.add(keypath + (key,), f"variant {vid!r} trains nothing (method {NO_TRAINING!r}): "
                                                 f"'{key}' needs a trained variant")
    if sweep is not None and sweep.param == "train.seed" and (seeds is not None or
                                                              any(c.get("seeds") for c in scales.values())):
        r.problems.add(keypath + ("sweep",), f"variant {vid!r} sweeps train.seed and sets 'seeds': use one")
    return Variant(id=vid, method=method, label=label or vid, options=options, train=train, scales=scales,
                   model=model, sweep=sweep, seeds=seeds, checkpoints=checkpoints,
                   evaluation=_evaluation(v, keypath, r))


def encoding_kwargs(encoding: dict[str, Any]) -> dict[str, Any]:
    """HFEncoder keyword arguments of a suite's ``encoding`` mapping (``dtype``, ``backend``, ``shard_size``:
    :func:`harness.encoders.hf.encoding_options`; ``batch_size``: a positive integer); ConfigError otherwise."""
    if not encoding:
        return {}
    from harness.encoders.hf import ENCODING_OPTIONS, encoding_options

    rest = {k: v for k, v in encoding.items() if k != "batch_size"}
    unknown = sorted(set(rest) - set(ENCODING_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown encoding option(s) {', '.join(map(str, unknown))}; allowed: batch_size, "
                          f"{', '.join(ENCODING_OPTIONS)}")
    out = encoding_options(rest)
    if encoding.get("batch_size") is not None:
        size = encoding["batch_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {size!r}")
        out["batch_size"] = size
    return out


def _evaluation(cfg: dict, keypath: tuple, r: _Reader) -> dict[str, Any]:
    """The EVALUATION_KEYS of a scale or variant mapping, validated by the engine's own checks (the encoder's
    options, the sparse backend and its quantisation) before any compute; values as written."""
    out: dict[str, Any] = {}
    if cfg.get("encoding") is not None:
        where = keypath + ("encoding",)
        encoding = r.mapping(cfg["encoding"], where)
        bad = False
        for key, value in encoding.items():       # one at a time: each problem at its own line
            try:
                encoding_kwargs({key: value})
            except ConfigError as exc:
                r.problems.add(where, str(exc), at=where + (key,))
                bad = True
        if encoding and not bad:
            out["encoding"] = dict(encoding)
    for key in ("sparse_backend", "quantization"):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            r.problems.add(keypath + (key,), f"expected a name, got {_show(cfg[key])}")
    for key in ("sparse_backend", "quantization"):
        if isinstance(cfg.get(key), str):
            from harness.retrieval.impact import check_quantization
            from harness.retrieval.sparse import check_backend

            try:
                check_backend(cfg[key]) if key == "sparse_backend" else check_quantization(cfg[key])
                out[key] = cfg[key]
            except ConfigError as exc:
                r.problems.add(keypath + (key,), str(exc))
    return out


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and value is not None


def _sweep(value: Any, keypath: tuple, r: _Reader) -> Sweep | None:
    """``sweep: {param: options.<name> | train.<field>, values: [...]}``: distinct scalar values."""
    from harness.train.spec import TrainSpec, field_problems

    data = r.mapping(value, keypath, SWEEP_KEYS)
    if not data:
        if value is not None and isinstance(value, dict):
            r.problems.add(keypath, "a sweep needs 'param' and 'values'")
        return None
    param = r.text(data, "param", keypath, required=True)
    values = r.list(data.get("values"), keypath + ("values",)) if "values" in data else []
    if "values" not in data:
        r.problems.add(keypath, "missing 'values'")
    if param is None or not values:
        return None
    section, _, name = param.partition(".")
    if section not in SWEEP_SECTIONS or not name:
        r.problems.add(keypath + ("param",), f"sweep param {param!r} must be options.<method option> or "
                                             "train.<TrainSpec field> (e.g. options.k, train.lr)")
        return None
    ok = True
    for i, item in enumerate(values):
        if not _scalar(item):
            r.problems.add(keypath + ("values", i), f"sweep values are numbers or strings, got {_show(item)}")
            ok = False
    if ok and len({repr(x) for x in values}) != len(values):
        r.problems.add(keypath + ("values",), f"sweep values must be distinct, got {values!r}")
        ok = False
    if ok and section == "train":
        if name in TrainSpec.NON_RESULT_FIELDS or name in ("model", "method_options"):
            r.problems.add(keypath + ("param",), f"train.{name} does not change the trained weights (or is set "
                                                 "elsewhere); sweep a field that does")
            return None
        for i, item in enumerate(values):
            for key, message in field_problems({name: item}):
                r.problems.add(keypath + ("values", i) if not message.startswith("unknown") else
                               keypath + ("param",), f"train.{key}: {message}")
                ok = False
    return Sweep(param, tuple(values)) if ok else None


def _seeds(container: dict, keypath: tuple, r: _Reader) -> list[int] | None:
    """``seeds: [1, 2, 3]``: distinct non-negative integers (None when absent)."""
    if container.get("seeds") is None:
        return None
    seeds = r.list(container["seeds"], keypath + ("seeds",))
    bad = [x for x in seeds if isinstance(x, bool) or not isinstance(x, int) or x < 0]
    if bad:
        r.problems.add(keypath + ("seeds",), f"seeds are non-negative integers, got {_show(bad[0])}")
        return None
    if len(set(seeds)) != len(seeds):
        r.problems.add(keypath + ("seeds",), f"seeds must be distinct, got {seeds!r}")
        return None
    return [int(x) for x in seeds] or None


def _checkpoints(container: dict, keypath: tuple, r: _Reader) -> Checkpoints | None:
    """``checkpoints: [20, 40]`` or ``checkpoints: {every: 20}`` (positive steps)."""
    value = container.get("checkpoints")
    where = keypath + ("checkpoints",)
    if value is None:
        return None
    if isinstance(value, dict):
        r.mapping(value, where, ("every",))
        every = r.integer(value, "every", where, minimum=1)
        if every is None:
            r.problems.add(where, "expected {every: <steps>} or a list of steps")
            return None
        return Checkpoints(every=every)
    steps = r.list(value, where)
    bad = [x for x in steps if isinstance(x, bool) or not isinstance(x, int) or x < 1]
    if bad:
        r.problems.add(where, f"checkpoint steps are positive integers, got {_show(bad[0])}")
        return None
    return Checkpoints(steps=tuple(sorted(set(int(x) for x in steps)))) if steps else None


def _stats(value: Any, r: _Reader) -> dict[str, Any]:
    """The ``stats`` section: known keys, and values the statistics code accepts."""
    from harness.stats import AGGREGATE_METHODS, CORRECTIONS, MISSING_POLICIES, TESTS

    stats = dict(r.mapping(value, ("stats",), STATS_KEYS_ORDER))
    choices = {"test": TESTS, "correction": CORRECTIONS, "aggregate": AGGREGATE_METHODS, "missing": MISSING_POLICIES}
    for key, allowed in choices.items():
        if key in stats and stats[key] not in allowed:
            hint = closest(str(stats[key]), allowed)
            r.problems.add(("stats", key), f"{key} {stats[key]!r} is not supported"
                           + (f" (did you mean {hint!r}?)" if hint else "") + f"; supported: {', '.join(allowed)}")
    if "alpha" in stats:
        alpha = stats["alpha"]
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
            r.problems.add(("stats", "alpha"), f"expected a number in (0, 1) (the significance level), "
                                               f"got {_show(alpha)}")
    r.integer(stats, "seed", ("stats",), minimum=0)
    r.integer(stats, "resamples", ("stats",), minimum=1)
    return stats


def _scale(name: str, cfg: Any, r: _Reader) -> ScaleConfig | None:
    keypath = ("scales", name)
    if not isinstance(cfg, dict):
        r.problems.add(keypath, f"scale {name!r} must be a mapping, got {_show(cfg)}")
        return None
    r.mapping(cfg, keypath, SCALE_KEYS)
    for key in ("model", "data", "benchmarks"):
        if key not in cfg:
            r.problems.add(keypath, f"scale {name!r}: missing {key!r}")
    model = r.text(cfg, "model", keypath, default="")
    data = cfg.get("data")
    data = data if isinstance(data, list) else ([] if data is None else [data])
    for j, entry in enumerate(data):
        where = keypath + ("data", j)
        if isinstance(entry, dict):
            r.mapping(entry, where, DATA_KEYS)
            if "path" not in entry:
                r.problems.add(where, "a data entry mapping needs 'path'")
            r.name(entry, "name", where, "training data name")   # mined pools are files named after it
        elif not isinstance(entry, str):
            r.problems.add(where, f"expected a path or a mapping with 'path', got {_show(entry)}")
    train = r.train(cfg.get("train"), keypath + ("train",))
    benchmarks = []
    for j, b in enumerate(r.list(cfg.get("benchmarks"), keypath + ("benchmarks",)) if "benchmarks" in cfg else []):
        where = keypath + ("benchmarks", j)
        if not isinstance(b, dict):
            r.problems.add(where, f"a benchmark must be a mapping with 'id', 'suite' and 'dataset_dir', got {_show(b)}")
            continue
        r.mapping(b, where, BENCHMARK_KEYS)
        bid = r.name(b, "id", where, "benchmark id", required=True)
        suite = r.text(b, "suite", where, required=True)
        dataset_dir = r.text(b, "dataset_dir", where, required=True)
        if bid is None or suite is None or dataset_dir is None:
            continue
        benchmarks.append(BenchmarkRef(id=bid, suite=suite, dataset_dir=dataset_dir,
                                       label=r.text(b, "label", where, default=bid, names=True) or bid,
                                       options=dict(r.mapping(b.get("options"), where + ("options",))),
                                       max_queries=r.integer(b, "max_queries", where, minimum=1),
                                       corpus_sample=r.integer(b, "corpus_sample", where, minimum=0)))
    ids = [b.id for b in benchmarks]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        r.problems.add(keypath + ("benchmarks",), f"duplicate benchmark id(s): {', '.join(dup)}")
    aggregates: dict[str, list[str]] = {}
    raw_aggregates = r.mapping(cfg.get("aggregates"), keypath + ("aggregates",))
    names = [str(a) for a in raw_aggregates]
    for agg, members in raw_aggregates.items():
        where = keypath + ("aggregates", agg)
        members = r.list(members, where)
        aggregates[str(agg)] = [str(x) for x in members]
        if str(agg) in ids:
            r.problems.add(where, f"aggregate {agg!r} has the id of a benchmark")
        # a member is a benchmark or another aggregate (averaged first: CQADupStack's forums in BEIR-15)
        missing = [m for m in aggregates[str(agg)] if m not in ids and m not in names]
        if missing and benchmarks:
            known = [*ids, *names]
            hints = "".join(f" ({m!r}: did you mean {h!r}?)" for m in missing if (h := closest(m, known)))
            r.problems.add(where, f"aggregate {agg!r} names unknown benchmark(s) {', '.join(missing)}{hints}")
        dup = sorted({m for m in aggregates[str(agg)] if aggregates[str(agg)].count(m) > 1})
        if dup:
            r.problems.add(where, f"aggregate {agg!r} lists {', '.join(dup)} more than once")
    cycle = _aggregate_cycle(aggregates)
    if cycle:
        r.problems.add(keypath + ("aggregates", cycle[0]), f"aggregates contain each other: {' -> '.join(cycle)}")
        aggregates = {}
    dry = cfg.get("dry_run_only", False)
    if not isinstance(dry, bool):
        r.problems.add(keypath + ("dry_run_only",), f"expected true or false, got {_show(dry)}")
    return ScaleConfig(name=name, model=model or "", data=data, train=train, benchmarks=benchmarks,
                       aggregates=aggregates, dry_run_only=dry is True, seeds=_seeds(cfg, keypath, r),
                       evaluation=_evaluation(cfg, keypath, r))


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


def _table(value: Any, r: _Reader) -> None:
    """Keys of the ``table:`` section (its columns and rows are checked by harness.ablation.layout)."""
    table = r.mapping(value, ("table",), TABLE_KEYS)
    for name, layout in r.mapping(table.get("layouts"), ("table", "layouts")).items():
        where = ("table", "layouts", name)
        r.component(str(name), where, "layout name")
        layout = r.mapping(layout, where, LAYOUT_KEYS)
        for scale, cfg in r.mapping(layout.get("scales"), where + ("scales",)).items():
            r.mapping(cfg, where + ("scales", scale), LAYOUT_SCALE_KEYS)
