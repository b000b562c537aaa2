"""The runner's pieces on their own: the state, the cell work and the report work without the SuiteRun façade,
and the façade writes exactly what they write."""
from __future__ import annotations

import json
from pathlib import Path

from harness.ablation import cell_work, load_suite, suite_report
from harness.ablation.runner import SuiteRun
from harness.ablation.suite_state import SuiteState

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"


def test_an_unfinished_suite_reports_its_pending_cells_and_writes_nothing(tmp_path):
    state = SuiteState(load_suite(MINI), "tiny", tmp_path, progress=False)
    hook_calls: list[int] = []
    outcome = suite_report.write_report(state, write_html=lambda: hook_calls.append(1))
    assert not outcome.complete and outcome.markdown is None
    assert sorted(outcome.pending) == ["hn-only x cjk_qa", "hn-only x latin_qa", "uniform x cjk_qa",
                                       "uniform x latin_qa"]
    assert hook_calls == [] and not state.report_dir.exists()
    assert cell_work.sweep_stale(state) == []       # nothing was written, so nothing is stale


def test_cells_run_by_the_pieces_give_the_tables_of_the_facade(tmp_path):
    suite = load_suite(MINI)
    state = SuiteState(suite, "tiny", tmp_path, progress=False)
    for cell in state.train_cells:
        cell_work.run_cell(state, cell)
    assert all(state.is_trained(c) for c in state.train_cells) and state.pending() == []

    seen: list[set[str]] = []      # the report folder when the HTML hook runs: every table is written by then
    outcome = suite_report.write_report(state, write_html=lambda: seen.append(
        {p.name for p in state.report_dir.iterdir()}))
    assert outcome.complete and outcome.pending == []
    assert len(seen) == 1 and {"table.md", "table.tex", "comparisons.json", "summary.json", "results"} <= seen[0]
    written = {name: (state.report_dir / name).read_bytes()
               for name in ("table.md", "table.tex", "comparisons.json", "summary.json")}
    assert written["table.md"].decode() == outcome.markdown and "HN only" in outcome.markdown
    summary = json.loads(written["summary.json"])
    assert [c["variant"] for c in summary["cells"]] == ["uniform", "hn-only"]
    assert summary["scores"]["latin_qa"]["HN only"]["ndcg@10"] == outcome.summary["scores"]["latin_qa"]["HN only"][
        "ndcg@10"]
    suite_report.write_json_lock(state)
    lock = json.loads((state.report_dir / "suite.resolved.json").read_text())
    assert lock["scale"] == "tiny" and set(lock["cells"]) == {"uniform", "hn-only"}

    # The façade on the same results root finds every cell done and rewrites the same bytes.
    runner = SuiteRun(suite, "tiny", tmp_path, progress=False)
    again = runner.report()
    assert again.complete and again.markdown == outcome.markdown
    assert {name: (runner.report_dir / name).read_bytes() for name in written} == written
