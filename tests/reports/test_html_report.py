"""The suite HTML report: written by ``harness run`` next to table.md, the same numbers as table.md,
the per-query view read from the stored results and runs, every text escaped, atomic output."""
from __future__ import annotations

import logging
import shutil
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import markupsafe
import numpy as np
import pytest
from html_suite import FIXTURE, SCALE, finished_suite, overview_matches_table_md, table_md_cells

from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.html_report import html_dir, suite_inputs, write_runner_html
from harness.ablation.paths import report_dir
from harness.cli import main
from harness.data.run import read_run
from harness.io import OutputExistsError
from harness.store import load_result
from reports.html import BenchmarkTexts, build_report, is_report_dir, render_html, write_html
from reports.languages import language_label


@pytest.fixture(scope="module")
def finished():
    return finished_suite()


def _loader(suite):
    refs = {b.id: b for b in suite.scale(SCALE).benchmarks}
    return lambda bench: load_benchmark_ref(refs[bench], suite.metrics)


class _Tables(HTMLParser):
    """Text of every cell of every table, by table id: ``{id: [[cell text, ...] per body row]}``."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.scripts = 0
        self._table: str | None = None
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts += 1
        elif tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._in_body:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_harness_run_writes_the_report_next_to_table_md(finished):
    suite, root = finished
    folder = html_dir(root, suite.name, SCALE)
    assert folder.parent == report_dir(root, suite.name, SCALE) and (folder.parent / "table.md").is_file()
    assert is_report_dir(folder)
    # one difference plot per non-baseline system, referenced by the page
    page = (folder / "index.html").read_text(encoding="utf-8")
    plots = sorted(p.name for p in (folder / "assets").iterdir())
    assert plots == ["diff-bm25.png", "diff-tiny-decoder.png"]
    for name in plots:
        assert (folder / "assets" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'src="assets/{name}"' in page
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".html")]   # no temporary folder left


def test_overview_cells_are_table_md_cells(finished):
    """Value, marker and delta of every overview cell equal table.md's (same comparisons, same rounding),
    in the report model and in the rendered page."""
    suite, root = finished
    table_md = (report_dir(root, suite.name, SCALE) / "table.md").read_text(encoding="utf-8")
    expected, bold = table_md_cells(table_md), table_md_cells(table_md, bold=True)
    report = build_report(suite_inputs(suite, SCALE, root), difference_figures=False)
    overview = report.tables[0]
    assert [r.system for r in overview.rows] == list(expected)
    assert len(overview.rows) == len(suite.variants) == 3
    for row in overview.rows:
        got = [(row.cells[c.key].text, row.cells[c.key].mark, row.cells[c.key].delta_text) for c in overview.columns]
        assert got == expected[row.system], row.system
        assert [row.cells[c.key].best for c in overview.columns] == bold[row.system], row.system
    assert any(mark for cells in expected.values() for _, mark, _ in cells)     # markers are really compared
    parser = _Tables()
    parser.feed((html_dir(root, suite.name, SCALE) / "index.html").read_text(encoding="utf-8"))
    page_rows = parser.tables["tbl-overview"]
    assert [r[0].replace(" baseline", "") for r in page_rows] == list(expected)
    for cells in page_rows:
        label = cells[0].replace(" baseline", "")
        for text, (value, mark, delta) in zip(cells[1:], expected[label]):
            assert text.startswith(value + mark + (f" ({delta})" if delta else ""))
    # the cards name a language per benchmark: a per-language table, its cells those of each language's benchmark
    languages = next(t for t in report.tables if t.id == "languages")
    cards = {b: report.cards[b]["extra"]["language"] for b in ("latin_qa", "cjk_qa")}
    assert sorted(c.group for c in languages.columns) == sorted(language_label(v) for v in cards.values())
    def shown(cell):
        return cell.text, cell.mark, cell.delta_text, cell.ci_text, cell.p_adjusted, cell.best

    for i, row in enumerate(languages.rows):
        for bench, lang in cards.items():
            detail_table = next(t for t in report.tables if t.id == "benchmark-" + bench.replace("_", "-"))
            assert shown(row.cells[f"{lang}/ndcg@10"]) == shown(detail_table.rows[i].cells[f"{bench}/ndcg@10"])
    # the per-benchmark breakdown shows the comparison's CI and corrected p
    comparisons = {(c["system"], c["dataset"]): c for c in
                   __import__("json").loads((report_dir(root, suite.name, SCALE) / "comparisons.json").read_text())
                   ["comparisons"]}
    bm25 = [s for s in expected if s.startswith("BM25")][0]
    detail = next(t for t in report.tables if t.id == "benchmark-latin-qa")
    cell = next(r for r in detail.rows if r.system == bm25).cells["latin_qa/ndcg@10"]
    c = comparisons[(bm25, "latin_qa")]
    assert cell.ci == (c["ci_low"], c["ci_high"]) and cell.p_adjusted == c["p_adjusted"]
    assert cell.wins_ties_losses == (c["wins"], c["ties"], c["losses"])


def test_per_query_view_reads_the_stored_results_and_runs(finished):
    suite, root = finished
    inputs = suite_inputs(suite, SCALE, root, _loader(suite))
    report = build_report(inputs, difference_figures=False)
    assert len(report.per_query) == 2 * 2          # 2 systems x 2 benchmarks x 1 metric
    group = next(g for g in report.per_query if g.system.startswith("BM25") and g.benchmark == "latin_qa")
    base = load_result(inputs.result_dirs[("tiny-bert", "latin_qa")][0]).evaluation.metric("ndcg@10")
    bm25 = load_result(inputs.result_dirs[("bm25", "latin_qa")][0]).evaluation.metric("ndcg@10")
    deltas = {q: bm25[q] - base[q] for q in base}
    wins = sorted((q for q in deltas if deltas[q] > 0), key=lambda q: (-deltas[q], q))[:5]
    losses = sorted((q for q in deltas if deltas[q] < 0), key=lambda q: (deltas[q], q))[:5]
    assert [e.query_id for e in group.wins] == wins and wins
    assert [e.query_id for e in group.losses] == losses
    assert group.counts == (sum(d > 0 for d in deltas.values()), sum(d == 0 for d in deltas.values()),
                            sum(d < 0 for d in deltas.values()))
    loaded = _loader(suite)("latin_qa").dataset
    texts = dict(zip(loaded.queries.ids, loaded.queries.texts))
    qrels = loaded.qrels.to_dict()
    run = {q: (d, s) for q, d, s in read_run(inputs.run_files[("bm25", "latin_qa")]).groups()}
    for example in group.wins + group.losses:
        assert example.query == texts[example.query_id]
        assert (example.base_value, example.system_value) == (base[example.query_id], bm25[example.query_id])
        docs, scores = run[example.query_id]
        assert [h.doc_id for h in example.system_docs] == docs[:3].tolist()
        assert np.allclose([h.score for h in example.system_docs], scores[:3])
        for hit in example.system_docs:
            assert hit.relevance == qrels.get(example.query_id, {}).get(hit.doc_id)
            assert hit.text and hit.text[:20] in " ".join(loaded.corpus.texts[loaded.corpus.ids.index(hit.doc_id)]
                                                          .split())


def test_every_text_is_escaped(finished):
    """Labels from the suite file and query/document texts holding < & " reach the page as text only."""
    suite, root = finished
    page = (html_dir(root, suite.name, SCALE) / "index.html").read_text(encoding="utf-8")
    assert "<lexical>" not in page and "BM25 &lt;lexical&gt; &amp; &#34;exact&#34;" in page
    inputs = suite_inputs(suite, SCALE, root)
    hostile = '<script>alert("q")</script> & <img src=x onerror=alert(1)> "quoted"'
    base_texts = _loader(suite)

    def texts(bench: str) -> BenchmarkTexts:
        ds = base_texts(bench).dataset
        return BenchmarkTexts({q: hostile for q in ds.queries.ids},
                              lambda ids: {d: ("</pre><b>title</b>", hostile) for d in ids}, ds.qrels.to_dict())

    inputs.texts = texts
    report = build_report(inputs, difference_figures=False)
    report.cards["latin_qa"]["notes"] = "</pre><script>bad()</script>"
    rendered = render_html(report)
    parser = _Tables()
    parser.feed(rendered)
    assert parser.scripts == 1                    # only the page's own script
    assert "<img" not in rendered and "<b>title" not in rendered and "<script>bad" not in rendered
    assert str(markupsafe.escape(hostile)) in rendered


def test_write_html_is_atomic_and_refuses_a_foreign_folder(finished, tmp_path):
    suite, root = finished
    report = build_report(suite_inputs(suite, SCALE, root), difference_figures=False)
    out = tmp_path / "html"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError):
        write_html(report, out)
    assert (out / "notes.txt").read_text() == "mine" and not (out / "index.html").exists()
    fresh = tmp_path / "fresh"
    first = write_html(report, fresh)
    first.write_text(first.read_text(encoding="utf-8") + "<!-- edited -->", encoding="utf-8")
    write_html(report, fresh)                     # a report of ours is replaced whole
    assert "<!-- edited -->" not in first.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "html"]


def test_harness_table_suite_html(finished, tmp_path, capsys):
    suite, root = finished
    index = html_dir(root, suite.name, SCALE) / "index.html"
    shutil.rmtree(index.parent)
    assert main(["table", "suite", str(FIXTURE), "--results-root", str(root), "--html"]) == 0
    assert index.is_file() and "HTML report:" in capsys.readouterr().err
    assert main(["table", "suite", str(FIXTURE), "--results-root", str(root), "--html"]) == 0   # replaces its own
    assert f"harness table suite {FIXTURE} --scale tiny --results-root {root} --html" in \
        index.read_text(encoding="utf-8")                                               # the command that wrote it
    assert f"harness run {FIXTURE} --scale tiny --results-root {root} --only bm25" in index.read_text(encoding="utf-8")
    assert main(["table", "suite", str(FIXTURE), "--results-root", str(tmp_path), "--html"]) == 2
    err = capsys.readouterr().err
    assert "has no finished tables" in err and "harness run" in err
    assert not (tmp_path / "suites").exists()


def test_a_failing_report_is_logged_not_raised(finished, monkeypatch, caplog):
    suite, root = finished
    import reports.html

    def broken(*args, **kwargs):
        raise ValueError("plot exploded")

    monkeypatch.setattr(reports.html, "build_report", broken)
    runner = SimpleNamespace(suite=suite, scale=SCALE, root=Path(root), benchmark=_loader(suite))
    with caplog.at_level(logging.ERROR, logger="harness.ablation"):
        assert write_runner_html(runner) is None
    message = caplog.records[-1].getMessage()
    assert caplog.records[-1].levelno == logging.ERROR
    assert "ValueError: plot exploded" in message and f"harness table suite {FIXTURE} --scale tiny" in message


@pytest.mark.slow
def test_a_suite_with_axes_reports_like_its_table(tmp_path):
    """axes_demo (sweep, 3 seeds, checkpoints, nested aggregate): the overview cells read ``mean ± sd`` with
    table.md's markers, deltas and bold; the sweep and curve plots are on the page; every replicate and
    checkpoint cell is listed."""

    from harness.ablation import load_suite, run_suite

    suite = load_suite("axes_demo")
    assert run_suite(suite, "tiny", tmp_path, progress=False).complete
    assert overview_matches_table_md(suite, "tiny", tmp_path) == 3 * 5
    folder = html_dir(tmp_path, suite.name, "tiny")
    assert {"sweep.png", "curve.png"} <= {p.name for p in (folder / "assets").iterdir()}
    report = build_report(suite_inputs(suite, "tiny", tmp_path), difference_figures=False)
    results = report_dir(tmp_path, suite.name, "tiny") / "results"
    linked = {(p.parent.name, p.name) for p in results.glob("*/*")}
    assert len(report.cells) == len(linked) and any("@ step" in c.system for c in report.cells)
    assert any("[seed 3]" in c.system for c in report.cells)
