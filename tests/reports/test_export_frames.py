"""DataFrames of stored results (harness.frames, harness.ablation.frames.suite_frame) and
``harness export``: the frames' numbers are table.md's cells and the stored per-query values."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from html_suite import FIXTURE, SCALE, finished_suite, table_md_cells

from harness.ablation.frames import AGGREGATE_COLUMNS, PER_QUERY_COLUMNS, suite_frame
from harness.ablation.paths import report_dir
from harness.cli import main
from harness.frames import result_frame, results_frame
from harness.store import load_result
from reports.table import format_delta, format_number


@pytest.fixture(scope="module")
def finished():
    return finished_suite()


def test_suite_frame_values_are_table_md_cells(finished):
    suite, root = finished
    frame = suite_frame(suite, SCALE, root)
    assert list(frame.columns) == AGGREGATE_COLUMNS
    folder = report_dir(root, suite.name, SCALE)
    expected = table_md_cells((folder / "table.md").read_text(encoding="utf-8"))
    columns = ["latin_qa", "cjk_qa", "Avg"]                 # table.md's column order
    for variant in suite.variants:
        rows = frame[(frame.variant == variant.id) & (frame.metric == "ndcg@10")].set_index("benchmark")
        got = []
        for bench in columns:
            row = rows.loc[bench]
            significant = not pd.isna(row.significant) and bool(row.significant)
            mark = ("†" if row.delta > 0 else "‡") if significant else ""
            got.append((format_number(row.value, 100, 1), mark,
                        "" if np.isnan(row.delta) else format_delta(row.delta, 100, 1)))
        assert got == expected[variant.label], variant.id
    assert frame[frame.variant == suite.baseline].significant.isna().all()
    assert frame.significant.fillna(False).any()
    # benchmark rows hold the stored aggregates exactly, for every stored metric (not only the compared one)
    for variant in suite.variants:
        for bench in ("latin_qa", "cjk_qa"):
            metrics = json.loads((folder / "results" / variant.id / bench / "metrics.json").read_text())
            rows = frame[(frame.variant == variant.id) & (frame.benchmark == bench)]
            assert dict(zip(rows.metric, rows.value)) == metrics
            assert set(rows.n_queries) == {30}
    # and the comparison numbers are comparisons.json's
    comparisons = json.loads((folder / "comparisons.json").read_text())["comparisons"]
    c = next(c for c in comparisons if c["system"].startswith("BM25") and c["dataset"] == "Avg")
    row = frame[(frame.variant == "bm25") & (frame.benchmark == "Avg")].iloc[0]
    assert (row.kind, row.value, row.delta, row.p, row.p_adjusted, row.ci_low, row.ci_high, row.n_queries) == \
        ("aggregate", c["mean"], c["delta"], c["p_value"], c["p_adjusted"], c["ci_low"], c["ci_high"], c["n"])


def test_per_query_frame_holds_the_stored_values(finished):
    suite, root = finished
    frame = suite_frame(str(FIXTURE), SCALE, root, per_query=True)
    assert list(frame.columns) == PER_QUERY_COLUMNS
    folder = report_dir(root, suite.name, SCALE) / "results"
    for variant in ("tiny-decoder", "bm25"):
        for bench in ("latin_qa", "cjk_qa"):
            stored = load_result(folder / variant / bench).evaluation
            base = load_result(folder / suite.baseline / bench).evaluation.metric("ndcg@10")
            rows = frame[(frame.variant == variant) & (frame.benchmark == bench) & (frame.metric == "ndcg@10")]
            assert list(rows.query_id) == stored.query_ids
            assert rows.value.tolist() == stored.per_query["ndcg@10"].tolist()
            assert rows.delta.tolist() == [v - base[q] for q, v in zip(rows.query_id, rows.value)]
            assert rows.value.mean() == pytest.approx(stored.aggregate["ndcg@10"], abs=1e-12)
    assert frame[frame.variant == suite.baseline].delta.isna().all()
    assert len(frame) == 3 * 2 * 30 * 3          # systems x benchmarks x queries x stored metrics


def test_result_frames_of_a_folder(finished):
    suite, root = finished
    folder = report_dir(root, suite.name, SCALE) / "results"
    frame = results_frame(folder)
    assert sorted(set(frame.result)) == sorted(f"{v.id}/{b}" for v in suite.variants for b in ("latin_qa", "cjk_qa"))
    for name, rows in frame.groupby("result"):
        metrics = json.loads((folder / name / "metrics.json").read_text())
        assert dict(zip(rows.metric, rows.value)) == metrics
    one = result_frame(folder / "bm25" / "cjk_qa", per_query=True)
    assert list(one.columns) == ["result", "dataset", "split", "model", "card", "query_id", "metric", "value"]
    assert len(one) == 30 * 3 and set(one.model) == {"bm25"} and set(one.split) == {"test"}


def test_export_cli_writes_csv_and_parquet_atomically(finished, tmp_path, capsys):
    suite, root = finished
    csv_path, parquet_path = tmp_path / "cells.csv", tmp_path / "queries.parquet"
    assert main(["export", "suite", str(FIXTURE), "--results-root", str(root), "-o", str(csv_path)]) == 0
    expected = suite_frame(suite, SCALE, root)
    got = pd.read_csv(csv_path)
    assert got.value.tolist() == expected.value.tolist()       # repr-exact floats survive CSV
    def flags(column):
        return [None if pd.isna(x) else bool(x) for x in column]

    assert flags(got.significant) == flags(expected.significant)
    assert main(["export", "suite", str(FIXTURE), "--results-root", str(root), "--per-query",
                 "-o", str(parquet_path)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(parquet_path), suite_frame(suite, SCALE, root, per_query=True),
                                  check_dtype=False)
    assert main(["export", "results", str(report_dir(root, suite.name, SCALE) / "results")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("result,dataset,split,model,card,metric,value,n_queries\n") and out.count("\n") == 1 + 6 * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cells.csv", "queries.parquet"]   # no temporary files


def test_export_errors_are_clear(finished, tmp_path, capsys):
    suite, root = finished
    assert main(["export", "suite", str(FIXTURE), "--results-root", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "no finished results" in err and "harness run html-mini --scale tiny" in err
    assert main(["export", "suite", str(FIXTURE), "--results-root", str(root), "--format", "parquet"]) == 2
    assert "needs --output" in capsys.readouterr().err
    assert main(["export", "suite", str(FIXTURE), "--results-root", str(root), "--format", "parquet",
                 "-o", str(tmp_path / "x.csv")]) == 2
    assert "make them agree" in capsys.readouterr().err
    assert main(["export", "results", str(tmp_path)]) == 2
    assert "holds no stored result" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_suite_is_found_by_its_report_folder(finished):
    """suite_frame(<root>/suites/<suite>/<scale>): the folder names the suite, its scale and the results root."""
    suite, root = finished
    folder = report_dir(root, suite.name, SCALE)
    by_folder = suite_frame(folder)                     # no scale, no results root: both come from the folder
    expected = suite_frame(suite, SCALE, root)
    assert by_folder.equals(expected)
    assert suite_frame(str(folder), per_query=True).equals(suite_frame(suite, SCALE, root, per_query=True))
