"""Layout kind ``distribution-shift``: paper 001's Table 6 and Figure 2 (the shift from a source task to targets).

For each target benchmark (a column entry ``{benchmark, metric, label}``) the table shows the pairwise weighted
Jaccard similarity with the ``source`` benchmark of the query types and of the corpus unigrams
(:mod:`methods.dro_shift`, paper 001 Appendix C), and for each entry of ``gaps`` the dense row's metric minus
the sparse row's (paper 001: ANCE minus BM25 nDCG@10), each beside the number printed in the paper's table
(``printed``: the row whose label is the column's ``label``, the columns named per value)::

    shift:
      kind: distribution-shift
      options:
        source: msmarco
        printed: {paper: coco-dr, table: 6, query: query-intent-sim, documents: doc-lexical-sim}
        gaps: [{dense: baseline, sparse: bm25, label: "ANCE (coCondenser) - BM25", printed: ance-cocondenser-vs-bm25}]
      scales:
        paper: {columns: [{benchmark: trec-covid, metric: ndcg@10, label: TREC-COVID}, ...]}

The figure is Figure 2: the gap against each similarity, one point per target task.  The similarities are
computed from the benchmarks' queries and corpora at render time (titles and texts); each corpus's word counts
are cached under the harness cache by content (:func:`methods.dro_shift.corpus_unigram_counts`), so MS MARCO's
8.8M passages are counted once, not at every render.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harness.ablation.axes import FinishedSuite, systems_of
from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.layout import (
    LayoutKind,
    TableLayout,
    check_column_benchmarks,
    check_known_options,
    register_layout_kind,
)
from harness.ablation.spec import AblationSuite
from harness.errors import ConfigError
from methods import dro_shift
from reports.table import Cell, Column, Row, Table

OPTIONS = ("source", "gaps", "printed")
QUERY, DOCS = "query-sim", "doc-sim"


def _gaps(layout: TableLayout) -> list[dict[str, Any]]:
    return [dict(g) for g in layout.options.get("gaps") or []]


@register_layout_kind("distribution-shift")
class DistributionShiftLayout(LayoutKind):
    """Target benchmarks as rows; query / document similarity with the source and dense-minus-sparse gaps."""

    def check(self, layout: TableLayout, suite: AblationSuite, scale: str) -> None:
        check_known_options(layout, OPTIONS)
        benchmarks = {b.id for b in suite.scale(scale).benchmarks}
        source = layout.options.get("source")
        if source not in benchmarks:
            raise ConfigError(f"layout {layout.name!r}: 'source' must be a benchmark of scale {scale!r}, "
                              f"got {source!r}")
        known = {v.id for v in suite.variants}
        for gap in _gaps(layout):
            for side in ("dense", "sparse"):
                if gap.get(side) not in known:
                    raise ConfigError(f"layout {layout.name!r}: gap {side} {gap.get(side)!r} is not a variant")
        check_column_benchmarks(layout, suite, scale)

    def render(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        return shift_table(shift_points(suite, scale, results_root, layout), layout)

    def figure(self, suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout) -> Any:
        from reports.plots_dro import shift_figure  # lazy (start-up speed): imports matplotlib

        points = shift_points(suite, scale, results_root, layout)
        gaps = [str(g.get("label") or f"{g['dense']} - {g['sparse']}") for g in _gaps(layout)]
        return shift_figure(points, gaps, title=layout.caption or None)


def _texts(suite: AblationSuite, scale: str, name: str) -> tuple[list[str], dict[str, float]]:
    """The queries and the corpus unigram distribution (titles and texts) of a benchmark, or pooled over an
    aggregate's benchmarks (CQADupStack's 12 forums, as one task in paper 001's Table 6).  Each corpus's word
    counts come from the harness cache when that content was counted before (MS MARCO's 8.8M passages)."""
    config = suite.scale(scale)
    refs = {b.id: b for b in config.benchmarks}
    leaves = config.aggregate_leaves(name) if name in config.aggregates else [name]
    queries: list[str] = []
    counts: Counter[str] = Counter()
    for leaf in leaves:
        data = load_benchmark_ref(refs[leaf], suite.metrics).dataset
        queries += data.queries.texts
        counts.update(dro_shift.corpus_unigram_counts(data.corpus))
    return queries, dro_shift.distribution(counts)


def _printed(layout: TableLayout) -> tuple[dict[str, dict[str, float | None]], str]:
    """``({row label: {column key: printed value}}, reference)`` of the ``printed`` table, or empty."""
    ref = layout.options.get("printed")
    if not ref:
        return {}, ""
    from reports.papers.catalog import load_tables  # lazy (start-up speed): reads the transcriptions

    (table,) = load_tables(str(ref["paper"]), int(ref["table"]))
    keys = [c.key for c in table.columns]
    return {r.label: {k: c.value for k, c in zip(keys, r.cells)} for r in table.rows}, table.ref


def shift_points(suite: AblationSuite, scale: str, results_root: str | Path, layout: TableLayout
                 ) -> list[dict[str, Any]]:
    """One record per target column: label, our similarities and gaps, and the printed values (None if none)."""
    labels = {b.id: b.label for b in suite.scale(scale).benchmarks}
    source_queries, source_d = _texts(suite, scale, str(layout.options["source"]))
    source_q = dro_shift.query_type_distribution(source_queries)
    printed, _ = _printed(layout)
    names = dict(layout.options.get("printed") or {})
    finished = FinishedSuite(suite, scale, results_root) if _gaps(layout) else None
    out = []
    for col in layout.columns:
        queries, docs = _texts(suite, scale, col.benchmark)     # docs: the unigram distribution
        label = col.label or labels.get(col.benchmark) or col.benchmark
        row = printed.get(label, {})
        gaps = []
        for gap in _gaps(layout):
            assert finished is not None
            dense, sparse = (next(iter(systems_of(suite.variant(str(gap[s]))))) for s in ("dense", "sparse"))
            value = (finished.value(dense, col.benchmark, col.metric)[0]
                     - finished.value(sparse, col.benchmark, col.metric)[0])
            gaps.append((value, row.get(str(gap["printed"])) if "printed" in gap else None))
        out.append({"label": label,
                    "query": (dro_shift.weighted_jaccard(source_q, dro_shift.query_type_distribution(queries)),
                              row.get(str(names.get("query", ""))) if names else None),
                    "documents": (dro_shift.weighted_jaccard(source_d, docs),
                                  row.get(str(names.get("documents", ""))) if names else None),
                    "gaps": gaps})
    return out


def shift_table(points: list[dict[str, Any]], layout: TableLayout) -> Any:
    gaps = [str(g.get("label") or f"{g['dense']} - {g['sparse']}") for g in _gaps(layout)]
    columns = [Column(QUERY, "ours", group="Query intent similarity"),
               Column(f"{QUERY}-printed", "printed", group="Query intent similarity"),
               Column(DOCS, "ours", group="Document lexical similarity"),
               Column(f"{DOCS}-printed", "printed", group="Document lexical similarity")]
    for i, name in enumerate(gaps):
        columns += [Column(f"gap{i}", "ours", group=name), Column(f"gap{i}-printed", "printed", group=name)]
    rows = []
    for p in points:
        cells = {QUERY: Cell(p["query"][0], decimals=4), f"{QUERY}-printed": Cell(p["query"][1], decimals=4),
                 DOCS: Cell(p["documents"][0], decimals=4), f"{DOCS}-printed": Cell(p["documents"][1], decimals=4)}
        for i, (ours, printed) in enumerate(p["gaps"]):
            cells[f"gap{i}"] = Cell(ours, decimals=3)
            cells[f"gap{i}-printed"] = Cell(printed, decimals=3)
        rows.append(Row(p["label"], cells))
    _, reference = _printed(layout)
    notes = ["Weighted Jaccard similarity with the source task (paper 001 Appendix C.2) of the query-type "
             "distributions (Appendix C.1: 7 wh-words, Y/N, declarative) and of the corpus unigram distributions; "
             "gaps: the dense row's metric minus the sparse row's (positive: the dense row is better)."]
    if reference:
        notes.append(f"'printed': {reference}.")
    return Table(columns=columns, rows=rows, caption=layout.caption or "Distribution shift from the source task",
                 label=f"tab:{layout.name}", notes=notes, decimals=4, scale=1.0, bold_best=False,
                 row_header="Dataset")
