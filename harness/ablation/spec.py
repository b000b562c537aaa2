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
        scales: {tiny: {train: {}}} # ... or at one scale
    metrics: [ndcg@10]              # table columns per benchmark
    stats: {test: randomization, correction: holm, alpha: 0.05, seed: 0, aggregate: pooled}
    scales:
      tiny:
        model: synthetic:tiny-bert  # alias, path, hub id, or synthetic:<kind>
        data: [synthetic:default]   # training collections (see harness.data.collections)
        train: {steps: 60}          # TrainSpec overrides shared by every variant
        benchmarks:                 # table column groups
          - {id: easy, suite: synthetic, dataset_dir: "synthetic:default/eval/easy-en"}
        aggregates: {Avg: [easy, ...]}

Strings may use ``{shared}`` (the real-data root: ``$HARNESS_SHARED_DATA`` or
``../shared/data`` beside the repository) and ``synthetic:<preset>[/sub/path]``
(the synthetic world of that preset, generated on first use).  The same file runs
at every scale; a scale a suite does not define is refused with a clear error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, InputError

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites" / "ablations"
NO_TRAINING = "none"
STATS_KEYS = {"test", "correction", "alpha", "seed", "aggregate", "resamples", "missing"}


@dataclass
class Variant:
    id: str
    method: str
    label: str
    options: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    scales: dict[str, dict[str, Any]] = field(default_factory=dict)
    model: str | None = None           # evaluate this model instead (e.g. "bm25" with method none)


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

    def scale(self, name: str) -> ScaleConfig:
        if name not in self.scales:
            raise ConfigError(f"suite {self.name!r} has no scale {name!r}; scales: {', '.join(self.scales)}")
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
        return StatsOptions(test=stats.get("test", "randomization"), seed=int(stats.get("seed", 0)),
                            **({"resamples": int(stats["resamples"])} if "resamples" in stats else {}),
                            **({"missing": stats["missing"]} if "missing" in stats else {}))


def list_suite_files(directory: Path = SUITES_DIR) -> dict[str, Path]:
    """``{suite name: file}`` for every suite file shipped with the project."""
    return {p.stem: p for p in sorted(directory.glob("*.yaml"))}


def load_suite(name_or_path: str | Path) -> AblationSuite:
    """Load a suite by name (``suites/ablations/<name>.yaml``) or from a path."""
    path = Path(name_or_path)
    if not path.suffix:
        known = list_suite_files()
        if str(name_or_path) not in known:
            raise ConfigError(f"unknown suite {str(name_or_path)!r}; known suites: {', '.join(known) or '(none)'}")
        path = known[str(name_or_path)]
    if not path.exists():
        raise InputError(path, "suite file does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise InputError(path, f"invalid YAML: {getattr(exc, 'problem', exc)}", None if line is None else line + 1) from None
    return parse_suite(raw, path)


def parse_suite(raw: Any, path: Path | None = None) -> AblationSuite:
    def bad(msg: str) -> InputError:
        return InputError(path, msg)

    if not isinstance(raw, dict):
        raise bad("a suite file must be a mapping")
    for key in ("name", "baseline", "variants", "scales"):
        if key not in raw:
            raise bad(f"missing top-level key {key!r}")
    variants = [_variant(v, i, bad) for i, v in enumerate(_list(raw["variants"], "variants", bad))]
    ids = [v.id for v in variants]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise bad(f"duplicate variant id(s): {', '.join(dup)}")
    if raw["baseline"] not in ids:
        raise bad(f"baseline {raw['baseline']!r} is not a variant id ({', '.join(ids)})")
    stats = dict(raw.get("stats") or {})
    unknown = sorted(set(stats) - STATS_KEYS)
    if unknown:
        raise bad(f"unknown stats key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(STATS_KEYS))}")
    if not isinstance(raw["scales"], dict) or not raw["scales"]:
        raise bad("'scales' must map scale names (tiny, small, paper) to their settings")
    scales = {name: _scale(name, cfg, bad) for name, cfg in raw["scales"].items()}
    for v in variants:
        extra = sorted(set(v.scales) - set(scales))
        if extra:
            raise bad(f"variant {v.id!r} configures unknown scale(s) {', '.join(extra)}")
    metrics = [str(m) for m in _list(raw.get("metrics", ["ndcg@10"]), "metrics", bad)]
    return AblationSuite(name=str(raw["name"]), version=int(raw.get("version", 1)),
                         description=str(raw.get("description", "")).strip(), baseline=str(raw["baseline"]),
                         variants=variants, metrics=metrics, stats=stats, scales=scales, path=path, raw=raw)


def _list(value: Any, what: str, bad) -> list:
    if not isinstance(value, list) or not value:
        raise bad(f"{what!r} must be a non-empty list")
    return value


def _variant(v: Any, i: int, bad) -> Variant:
    if not isinstance(v, dict) or "id" not in v or "method" not in v:
        raise bad(f"variants[{i}] must be a mapping with 'id' and 'method'")
    allowed = {"id", "method", "label", "options", "train", "scales", "model"}
    unknown = sorted(set(v) - allowed)
    if unknown:
        raise bad(f"variants[{i}] ({v['id']}): unknown key(s) {', '.join(unknown)}")
    scales = v.get("scales") or {}
    for s, cfg in scales.items():
        if not isinstance(cfg, dict) or set(cfg) - {"train", "options"}:
            raise bad(f"variant {v['id']!r} scale {s!r}: only 'train' and 'options' may be set per scale")
    return Variant(id=str(v["id"]), method=str(v["method"]), label=str(v.get("label", v["id"])),
                   options=dict(v.get("options") or {}), train=dict(v.get("train") or {}), scales=scales,
                   model=v.get("model"))


def _scale(name: str, cfg: Any, bad) -> ScaleConfig:
    if not isinstance(cfg, dict):
        raise bad(f"scale {name!r} must be a mapping")
    allowed = {"model", "data", "train", "benchmarks", "aggregates", "dry_run_only"}
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise bad(f"scale {name!r}: unknown key(s) {', '.join(unknown)}")
    for key in ("model", "data", "benchmarks"):
        if key not in cfg:
            raise bad(f"scale {name!r}: missing {key!r}")
    data = cfg["data"] if isinstance(cfg["data"], list) else [cfg["data"]]
    benchmarks = []
    for j, b in enumerate(_list(cfg["benchmarks"], f"scales.{name}.benchmarks", bad)):
        if not isinstance(b, dict) or not {"id", "suite", "dataset_dir"} <= set(b):
            raise bad(f"scale {name!r} benchmarks[{j}] needs 'id', 'suite' and 'dataset_dir'")
        allowed_b = {"id", "suite", "dataset_dir", "label", "options", "max_queries", "corpus_sample"}
        unknown_b = sorted(set(b) - allowed_b)
        if unknown_b:
            raise bad(f"scale {name!r} benchmark {b['id']!r}: unknown key(s) {', '.join(unknown_b)}")
        benchmarks.append(BenchmarkRef(id=str(b["id"]), suite=str(b["suite"]), dataset_dir=str(b["dataset_dir"]),
                                       label=str(b.get("label", b["id"])), options=dict(b.get("options") or {}),
                                       max_queries=b.get("max_queries"), corpus_sample=b.get("corpus_sample")))
    ids = [b.id for b in benchmarks]
    if len(set(ids)) != len(ids):
        raise bad(f"scale {name!r}: duplicate benchmark ids")
    aggregates = {str(k): [str(x) for x in v] for k, v in (cfg.get("aggregates") or {}).items()}
    for agg, members in aggregates.items():
        missing = sorted(set(members) - set(ids))
        if missing:
            raise bad(f"scale {name!r} aggregate {agg!r} names unknown benchmark(s) {', '.join(missing)}")
    return ScaleConfig(name=name, model=str(cfg["model"]), data=data, train=dict(cfg.get("train") or {}),
                       benchmarks=benchmarks, aggregates=aggregates, dry_run_only=bool(cfg.get("dry_run_only")))
