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

Layout kind ``topic-distribution`` (paper 004, Table 13, the topic distribution of the MIRACL training queries):
the training rows of each variant's run per language (rows) and topic (columns), counted from ``method/topics.tsv``
of its training cell (the language and topic its language/topic batches or loss weights used); option
``printed: {paper, table}`` adds a transcribed table's printed counts below (rows by language, columns by topic
code).  k-means topics (``<language>/c<k>``) are clusters within a language, shown as ``c<k>`` with no total
across languages.

Layout kind ``data-counts`` (paper 004, Table 10, the MIRACL statistics): the training queries per language of each
variant's run (the sources its ``run.json`` records), the per-split counts of the ``harness data build`` folder
they came from (its ``build.json``: train and the 10% validation split for the mining recipe; option ``stats``
adds the recipe's per-subset statistics, e.g. ``judgements``), and option ``printed: {paper, table, row}``
transcribed rows (one id or a list) whose columns are languages (Table 10's Train #Q and #J).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from harness.ablation.layout import (
    LayoutKind,
    TableLayout,
    check_known_options,
    read_summary,
    register_layout_kind,
    train_keys,
)
from harness.ablation.paths import train_cell_dir
from harness.ablation.resolve import resolve_path
from harness.ablation.spec import AblationSuite
from harness.data.builders import BUILD_FILE
from harness.errors import ConfigError, InputError
from harness.io.results_layout import TRAIN_RUN_FILE
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


TOPICS_FILE = "topics.tsv"      # written by the mined method (methods/mining/method.py TOPICS_FILE)
TOPIC_COLUMNS = ("source", "row", "query_id", "language", "topic")
TOPIC_OPTIONS = ("printed",)


def topic_assignment(suite: AblationSuite, scale: str, results_root: str | Path, variant: str
                     ) -> list[tuple[str, str, bool]]:
    """``(language, topic, per_language)`` of every training row of a variant's run, from ``method/topics.tsv`` of
    its training cell; a k-means topic ``<language>/c<k>`` is returned as ``c<k>`` (its cluster within the
    language) with ``per_language`` true."""
    keys = train_keys(read_summary(suite, scale, results_root))
    if variant not in keys:
        raise ConfigError(f"summary of suite {suite.name!r} ({scale}) has no cell for variant {variant!r}")
    path = train_cell_dir(results_root, keys[variant]) / "method" / TOPICS_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: variant {variant!r} stored no topic assignment (a run with language/topic "
                          "batches or loss weights writes one; a cell trained before it was stored needs a rerun)")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != TOPIC_COLUMNS:
        raise InputError(path, f"expected the header {' '.join(TOPIC_COLUMNS)} (tab-separated)", 1)
    out = []
    for n, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != len(TOPIC_COLUMNS) or not fields[3] or not fields[4]:
            raise InputError(path, f"expected {len(TOPIC_COLUMNS)} tab-separated fields with a language and a "
                                   "topic", n)
        lang, topic = fields[3], fields[4]
        local = topic.startswith(f"{lang}/")
        out.append((lang, topic.removeprefix(f"{lang}/") if local else topic, local))
    return out


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _printed_topics(layout: TableLayout) -> Any:
    from reports.papers.catalog import load_tables  # lazy (start-up speed): reads the transcriptions

    ref = layout.options.get("printed")
    if not isinstance(ref, dict) or set(ref) != {"paper", "table"}:
        raise ConfigError(f"layout {layout.name!r}: printed must be {{paper, table}}, got {ref!r}")
    (spec,) = load_tables(str(ref["paper"]), int(ref["table"]))
    return spec


@register_layout_kind("topic-distribution")
class TopicDistributionLayout(LayoutKind):
    """Training queries per language (rows) and topic (columns) of each variant's run, with a transcribed topic
    table's printed counts below (option ``printed: {paper, table}``, paper 004 Table 13)."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, TOPIC_OPTIONS)
        for column in layout.columns:
            variant = suite.variant(column.benchmark)
            options = {**variant.options, **(variant.scales.get(scale) or {}).get("options", {})}
            if variant.method != "mined":
                raise ConfigError(f"layout {layout.name!r}: variant {variant.id!r} is trained by {variant.method!r};"
                                  " a topic-distribution column needs a 'mined' variant")
            if options.get("batches", "sampler") == "sampler" and options.get("weights", "none") == "none":
                raise ConfigError(f"layout {layout.name!r}: variant {variant.id!r} labels no topics (batches "
                                  "sampler and weights none); a topic-distribution column needs language/topic "
                                  "batches or loss weights")
        if "printed" in layout.options:
            spec = _printed_topics(layout)
            if not any(c.derive is None for c in spec.columns):
                raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no printed topic columns")

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        spec = _printed_topics(layout) if "printed" in layout.options else None
        labels = {v.id: v.label or v.id for v in suite.variants}
        assigned = {c.benchmark: topic_assignment(suite, scale, results_root, c.benchmark) for c in layout.columns}
        counted = {v: Counter((lang, topic) for lang, topic, _ in rows) for v, rows in assigned.items()}
        per_language = any(local for rows in assigned.values() for _, _, local in rows)
        printed_topics = [c.key for c in spec.columns if c.derive is None] if spec is not None else []
        ours_topics = sorted({t for counts in counted.values() for _, t in counts}, key=_natural)
        topics = printed_topics + [t for t in ours_topics if t not in printed_topics]
        comparable = spec is not None and set(ours_topics) <= set(printed_topics)
        total = "total"
        columns = [Column(t, t) for t in topics] + [Column(total, "Total")]
        rows: list[Row] = []
        printed_langs = [r.id for r in spec.rows if r.derive is None] if spec is not None else []
        for variant, counts in counted.items():
            group = f"Ours: {labels[variant]} ({scale}), training queries"
            seen = list(dict.fromkeys(lang for lang, _ in counts))
            langs = [x for x in printed_langs if x in seen] + [x for x in seen if x not in printed_langs]
            for lang in langs:
                cells = {t: Cell(float(counts.get((lang, t), 0))) for t in topics}
                cells[total] = Cell(float(sum(n for (x, _), n in counts.items() if x == lang)))
                rows.append(Row(lang, cells, group=group))
            # per-language clusters (c<k> of one language is not c<k> of another) have no total across languages
            cells = {t: Cell(None if per_language else float(sum(n for (_, y), n in counts.items() if y == t)))
                     for t in topics}
            cells[total] = Cell(float(sum(counts.values())))
            rows.append(Row("Total", cells, group=group, kind="average"))
        notes = [f"Scale {scale}; our counts are the training rows of each variant's run (method/{TOPICS_FILE} of "
                 "its training cell: the language and topic its batches used), after any validation split."]
        if spec is not None:
            keys = [c.key for c in spec.columns]
            total_key = next((c.key for c in spec.columns if c.derive is not None), None)   # the printed Total
            group = f"Printed in paper {spec.paper.id}, Table {spec.number}"
            for row in spec.rows:
                values = dict(zip(keys, row.cells))
                cells = {t: Cell(values[t].value, decimals=0) for t in topics if t in values}
                cells[total] = Cell(values[total_key].value if total_key else None, decimals=0)
                rows.append(Row(row.label, cells, group=group, kind="average" if row.derive else "data"))
            from reports.papers import verify  # lazy (start-up speed)

            slips = [f"{f.row} {f.column} {f.printed} (cells {f.recomputed:,.0f})" for f in verify(spec)
                     if f.kind in ("mismatch", "rounding")]
            notes.append(f"Printed cells as transcribed ({spec.ref}), totals as printed"
                         + (f"; printed totals that are not their cells' sums: {'; '.join(slips)}" if slips else "")
                         + ". The paper counts its whole training set; a run trains on what its data holds "
                         "(the mining data builder holds out a 10% validation split).")
            if not comparable:
                notes.append("Our topics are not the printed table's (" + ", ".join(
                    t for t in ours_topics if t not in printed_topics) + "): the printed counts are shown for "
                    "reference, not comparable with ours.")
        if per_language:
            notes.append("Topics c<k> are k-means clusters of each language's query embeddings: c<k> of one "
                         "language is unrelated to c<k> of another.")
        return Table(columns=columns, rows=rows, caption=layout.caption or f"Topic distribution ({scale})",
                     label=f"tab:{suite.name}-{layout.name}-{scale}", decimals=0, scale=1.0, bold_best=False,
                     row_header="Language", notes=notes)


DATA_OPTIONS = ("printed", "stats")


def run_sources(suite: AblationSuite, scale: str, results_root: str | Path, variant: str) -> list[dict[str, Any]]:
    """The training sources a variant's run recorded (``run.json`` of its training cell: name, rows, language,
    path of each)."""
    keys = train_keys(read_summary(suite, scale, results_root))
    if variant not in keys:
        raise ConfigError(f"summary of suite {suite.name!r} ({scale}) has no cell for variant {variant!r}")
    path = train_cell_dir(results_root, keys[variant]) / TRAIN_RUN_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: variant {variant!r} has no run record (was it trained?)")
    try:
        sources = json.loads(path.read_text(encoding="utf-8")).get("data")
    except ValueError as exc:
        raise InputError(path, f"not JSON: {exc}") from None
    if not isinstance(sources, list) or not all(isinstance(s, dict) and "rows" in s for s in sources):
        raise InputError(path, "expected 'data': a list of {name, rows, language, path} records")
    return sources


def _language(source: dict[str, Any]) -> str:
    lang = source.get("language")
    if isinstance(lang, list):
        lang = lang[0] if len(lang) == 1 else None
    return str(lang or source.get("name"))


def built_splits(sources: list[dict[str, Any]], stats: tuple[str, ...] = ()) -> dict[tuple[str, str], dict[str, float]]:
    """``{(what, split): {language: count}}`` of the built data folder (``harness data build``'s ``build.json``)
    the sources were read from (the folder of a source file or its parent; empty when there is none): ``what`` is
    ``#Q`` (the subsets' rows) or one of the recipe's per-subset ``stats`` (a subset's stat counts for its one
    language, else for its name)."""
    for source in sources:
        if not source.get("path"):
            continue
        folder = resolve_path(str(source["path"])).parent
        for candidate in (folder, folder.parent):
            path = candidate / BUILD_FILE
            if not path.is_file():
                continue
            try:
                subsets = json.loads(path.read_text(encoding="utf-8")).get("subsets") or {}
            except ValueError as exc:
                raise InputError(path, f"not JSON: {exc}") from None
            out: dict[tuple[str, str], dict[str, float]] = {}
            for name, record in subsets.items():
                split, _, rest = name.rpartition("/")
                split = split or "all"
                # rows per language; a subset without language counts (e.g. empty) under its own name
                counts = record.get("languages") or {rest: record.get("rows", 0)}
                one = next(iter(counts)) if len(counts) == 1 else rest
                for what, per_lang in (("#Q", counts), *((k, {one: (record.get("stats") or {}).get(k)})
                                                          for k in stats)):
                    into = out.setdefault((what, split), {})
                    for lang, n in per_lang.items():
                        if n is not None:
                            into[lang] = into.get(lang, 0) + float(n)
            return out
    return {}


@register_layout_kind("data-counts")
class DataCountsLayout(LayoutKind):
    """Training queries per language of each variant's run (its recorded training sources), the splits of the
    built data folder they came from, and a transcribed table's printed counts (option ``printed: {paper, table,
    row}``: the row whose columns are languages, e.g. paper 004 Table 10's Train #Q)."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, DATA_OPTIONS)
        for column in layout.columns:
            variant = suite.variant(column.benchmark)
            if variant.method == "none":
                raise ConfigError(f"layout {layout.name!r}: variant {variant.id!r} trains nothing (method none); a "
                                  "data-counts column needs a trained variant")
        stats = layout.options.get("stats", [])
        if not isinstance(stats, list) or not all(isinstance(k, str) and k for k in stats):
            raise ConfigError(f"layout {layout.name!r}: stats must be a list of build.json subset stat names, got "
                              f"{stats!r}")
        if "printed" in layout.options:
            self._printed(layout)

    @staticmethod
    def _printed(layout: TableLayout) -> tuple[Any, list[Any]]:
        """The transcribed table and its rows named by ``printed: {paper, table, row: <id> | [<id>, ...]}``."""
        from reports.papers.catalog import load_tables  # lazy (start-up speed): reads the transcriptions

        ref = layout.options.get("printed")
        if not isinstance(ref, dict) or set(ref) != {"paper", "table", "row"}:
            raise ConfigError(f"layout {layout.name!r}: printed must be {{paper, table, row}}, got {ref!r}")
        (spec,) = load_tables(str(ref["paper"]), int(ref["table"]))
        wanted = [str(r) for r in (ref["row"] if isinstance(ref["row"], list) else [ref["row"]])]
        ids = [r.id for r in spec.rows]
        missing = [r for r in wanted if r not in ids]
        if missing or not wanted:
            raise ConfigError(f"layout {layout.name!r}: {spec.ref} has no row {', '.join(map(repr, missing))}; "
                              f"rows: {', '.join(ids)}")
        return spec, [spec.row(r) for r in wanted]

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        labels = {v.id: v.label or v.id for v in suite.variants}
        columns: list[Column] = []
        values: dict[str, dict[str, float | None]] = {}       # column key -> language -> count
        totals: dict[str, Cell] = {}                           # the printed totals (ours are summed)
        notes = [f"Scale {scale}; a run's training queries are the rows of the training sources its run.json "
                 "records, per source language."]
        stats = tuple(str(k) for k in layout.options.get("stats") or ())
        for column in layout.columns:
            variant = column.benchmark
            sources = run_sources(suite, scale, results_root, variant)
            train: dict[str, float | None] = {}
            for source in sources:
                lang = _language(source)
                train[lang] = (train.get(lang) or 0) + int(source["rows"])
            key = f"{variant}/train"
            columns.append(Column(key, "#Q (run)", labels[variant]))
            values[key] = train
            for (what, split), counts in built_splits(sources, stats).items():
                key = f"{variant}/built-{split}" + ("" if what == "#Q" else f"/{what}")
                columns.append(Column(key, f"{what} ({split}, built)", labels[variant]))
                values[key] = dict(counts)
                if not notes[1:]:
                    notes.append("Built: the subsets of the `harness data build` folder the sources came from "
                                 "(its build.json), per split" + (f"; {', '.join(stats)}: the recipe's per-subset "
                                                                  "statistics" if stats else "") + ".")
        if "printed" in layout.options:
            spec, printed_rows = self._printed(layout)
            keys = [c.key for c in spec.columns]
            derived = [c.key for c in spec.columns if c.derive is not None]
            for row in printed_rows:
                printed = {k: c.value for k, c in zip(keys, row.cells)}
                label = row.printed_label or (f"{row.group} {row.label}" if row.group else row.label)
                key = f"printed/{row.id}"
                columns.append(Column(key, f"{label} (paper {spec.paper.id})", f"Table {spec.number}"))
                values[key] = {k: (float(v) if isinstance(v, (int, float)) else None)
                               for k, v in printed.items() if k not in derived}
                total = printed[derived[0]] if derived else None
                totals[key] = Cell(float(total) if isinstance(total, (int, float)) else None)
            notes.append(f"Printed: {spec.ref}, rows " + ", ".join(repr(r.printed_label or r.label)
                                                                   for r in printed_rows)
                         + ", as transcribed (languages are its columns; Total is its printed total).")
        # the printed table's languages in its order first, then any other language of ours
        printed_langs = [x for key, counts in values.items() if key.startswith("printed/") for x in counts]
        langs = list(dict.fromkeys([*printed_langs, *(x for counts in values.values() for x in counts)]))
        rows = [Row(lang, {key: Cell(values[key].get(lang)) for key in values}) for lang in langs]
        # no total where nothing was counted (e.g. a build made before its recipe recorded a statistic)
        ours = {key: Cell(float(sum(present)) if (present := [v for v in counts.values() if v is not None]) else None)
                for key, counts in values.items() if key not in totals}
        rows.append(Row("Total", {**ours, **totals}, kind="average"))
        return Table(columns=columns, rows=rows, caption=layout.caption or f"Training queries per language ({scale})",
                     label=f"tab:{suite.name}-{layout.name}-{scale}", decimals=0, scale=1.0, bold_best=False,
                     row_header="Language", notes=notes)
