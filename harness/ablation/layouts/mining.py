"""Layout kind ``mining-stats`` (paper 004, Table 8): statistics of the mined hard negatives per variant.

Columns are variant ids of ``mined`` runs; the table reads ``method/mining.json`` of each variant's
training cell (the mining report of every training source, summed over sources) and shows, in %:

* From Retrieval / From LLM: the share of the final negatives retrieved for the query itself or for an
  LLM-generated query (negative generation);
* Eliminated: the share of the retrieved candidates the false-negative filter removed;
* Pool fill: negatives per query over ``k``; Under-full pools: rows with fewer than min(7, k) negatives
  (a training step samples 7);
* with a synthetic world's truth (option ``truth`` of the method): the filter's precision and recall
  against the planted false negatives, and the planted false negatives left among the negatives (their counts,
  left of planted, in a note under the table).

A cell is empty where it does not apply (no filter, no truth).

Layout kind ``judge-check`` (paper 004, Table 12, the human validation of the LLM's false negatives): of the
candidates the judge voted false negatives, the share the reference labels rate 0 (irrelevant), 1 (partly
relevant) and 2 (relevant), one row per training source (a language), three columns per variant.  The
reference labels are a synthetic world's planted truth (0 or 2) from the variant's ``truth`` statistics.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.ablation.layout import LayoutKind, TableLayout, read_summary, register_layout_kind, train_keys
from harness.ablation.paths import train_cell_dir
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError, InputError
from reports.table import Cell, Column, Row, Table

ROWS = (("from-retrieval", "From Retrieval"), ("from-llm", "From LLM"), ("eliminated", "Eliminated (FN filter)"),
        ("pool-fill", "Pool fill"), ("under-full", "Under-full pools"), ("precision", "Filter precision (truth)"),
        ("recall", "Filter recall (truth)"), ("planted-left", "Planted FNs among negatives"))


def mining_record(suite: AblationSuite, scale: str, results_root: str | Path, variant: str) -> dict[str, Any]:
    """``method/mining.json`` of a variant's training cell in a finished suite."""
    keys = train_keys(read_summary(suite, scale, results_root))
    if variant not in keys:
        raise ConfigError(f"summary of suite {suite.name!r} ({scale}) has no cell for variant {variant!r}")
    path = train_cell_dir(results_root, keys[variant]) / "method" / "mining.json"
    if not path.is_file():
        raise ConfigError(f"{path}: variant {variant!r} has no mining report (is it a 'mined' run that mines?)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(path, f"not JSON: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("sources"), dict) or not record["sources"]:
        raise InputError(path, "expected {'settings': ..., 'sources': {name: {'report': ...}}}")
    return record


def mining_statistics(record: dict[str, Any]) -> dict[str, float | None]:
    """The table's rows (fractions) from one mining record, summed over its sources."""
    reports = [s["report"] for s in record["sources"].values()]
    k = int(record["settings"]["k"])
    rows = sum(r["rows"] for r in reports)
    negatives = sum(r["negatives"] for r in reports)
    retrieved = sum(r["retrieved"] for r in reports)
    generated = sum(r.get("generation", {}).get("added", 0) for r in reports)
    has_filter = any("filter" in r for r in reports)
    eliminated = sum(r.get("filter", {}).get("removed", 0) for r in reports)
    out: dict[str, float | None] = {
        "from-retrieval": (negatives - generated) / negatives if negatives else None,
        "from-llm": generated / negatives if negatives else None,
        "eliminated": eliminated / retrieved if has_filter and retrieved else None,
        "pool-fill": negatives / (rows * k) if rows else None,
        "under-full": sum(r["under_full_pools"] for r in reports) / rows if rows else None,
        "precision": None, "recall": None, "planted-left": None,
    }
    truths = [s["truth"] for s in record["sources"].values() if "truth" in s]
    if truths:
        planted = sum(t["planted"] for t in truths)
        out["planted-left"] = sum(t["planted_selected"] for t in truths) / planted if planted else None
        if all("true_positives" in t for t in truths):
            tp = sum(t["true_positives"] for t in truths)
            fp = sum(t["false_positives"] for t in truths)
            fn = sum(t["false_negatives"] for t in truths)
            out["precision"] = tp / (tp + fp) if tp + fp else None
            out["recall"] = tp / (tp + fn) if tp + fn else None
    return out


def planted_left(record: dict[str, Any]) -> tuple[int, int] | None:
    """(planted false negatives left among the final negatives, planted false negatives) of one mining record,
    summed over its sources with a synthetic world's truth; None without truth."""
    truths = [s["truth"] for s in record["sources"].values() if "truth" in s]
    if not truths:
        return None
    return sum(int(t["planted_selected"]) for t in truths), sum(int(t["planted"]) for t in truths)


@register_layout_kind("mining-stats")
class MiningStatsLayout(LayoutKind):
    """Statistics of the mined negatives (rows) per mined variant (columns), in %."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        super().check(layout, suite, scale)
        for column in layout.columns:
            variant = suite.variant(column.benchmark)
            if variant.method != "mined":
                raise ConfigError(f"layout {layout.name!r}: variant {variant.id!r} is trained by {variant.method!r};"
                                  " a mining-stats column needs a 'mined' variant")
            if variant.options.get("mine") is False:
                raise ConfigError(f"layout {layout.name!r}: variant {variant.id!r} does not mine (mine: false); a "
                                  "mining-stats column needs a variant that mines")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        variants = [c.benchmark for c in layout.columns]
        records = {v: mining_record(suite, scale, results_root, v) for v in variants}
        stats = {v: mining_statistics(records[v]) for v in variants}
        labels = {v.id: v.label for v in suite.variants}
        columns = [Column(v, labels[v]) for v in variants]
        rows = [Row(label, {v: Cell(stats[v][key]) for v in variants}) for key, label in ROWS
                if any(stats[v][key] is not None for v in variants)]
        # the counts behind the planted row (a share hides how few planted twins a small world has)
        counts = {v: planted_left(records[v]) for v in variants}
        left = "; ".join(f"{labels[v] or v} {c[0]} of {c[1]}" for v, c in counts.items() if c is not None)
        extra = [f"Planted false negatives left among the negatives: {left}."] if left else []
        return Table(columns=columns, rows=rows, caption=layout.caption or f"Mined hard negatives ({scale}), %",
                     label=f"tab:{suite.name}-{layout.name}-{scale}", decimals=layout.decimals or 1, scale=100.0,
                     bold_best=False, row_header="Hard negatives",
                     notes=[f"Scale {scale}; from method/mining.json of each variant's training cell, summed over "
                            "its training sources. Eliminated: share of the retrieved candidates the FN filter "
                            "removed; precision/recall against the synthetic world's planted false negatives.",
                            *extra])


JUDGE_LABELS = ("0", "1", "2")


def judge_check(record: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per source: the shares of the judge's false negatives (candidates it removed) that the reference labels
    rate 0, 1 and 2 (the planted truth has no partly relevant label: 1 is 0 where anything was removed)."""
    out: dict[str, dict[str, float | None]] = {}
    for name, source in record["sources"].items():
        truth = source.get("truth") or {}
        if "true_positives" not in truth:
            continue
        removed = truth["true_positives"] + truth["false_positives"]
        out[name] = {"0": truth["false_positives"] / removed if removed else None,
                     "1": 0.0 if removed else None,
                     "2": truth["true_positives"] / removed if removed else None}
    return out


@register_layout_kind("judge-check")
class JudgeCheckLayout(MiningStatsLayout):
    """The judge's false negatives against reference labels (rows: sources; columns: variant x label), in %."""

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        variants = [c.benchmark for c in layout.columns]
        checks = {v: judge_check(mining_record(suite, scale, results_root, v)) for v in variants}
        if not any(checks.values()):
            raise ConfigError(f"layout {layout.name!r}: no variant of {', '.join(variants)} has judge votes checked "
                              "against reference labels (a judge and the method's 'truth' option are needed)")
        labels = {v.id: v.label or v.id for v in suite.variants}
        columns = [Column(f"{v}/{lab}", lab, labels[v]) for v in variants for lab in JUDGE_LABELS]
        sources = list(dict.fromkeys(src for v in variants for src in checks[v]))
        rows = [Row(src, {f"{v}/{lab}": Cell(checks[v].get(src, {}).get(lab)) for v in variants
                          for lab in JUDGE_LABELS}) for src in sources]
        return Table(columns=columns, rows=rows, caption=layout.caption or f"Judge check ({scale}), %",
                     label=f"tab:{suite.name}-{layout.name}-{scale}", decimals=layout.decimals or 1, scale=100.0,
                     bold_best=False, row_header="Source",
                     notes=[f"Scale {scale}; of the candidates each variant's judge voted false negatives, the share "
                            "its reference labels (the synthetic world's planted truth: 2 for a planted twin of the "
                            "positive, else 0) rate 0, 1 and 2, per training source."])
