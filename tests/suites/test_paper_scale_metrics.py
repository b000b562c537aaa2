"""Every metric the papers print is requested by the paper-scale suites (tdro: paper 000 Tables 3, 9-11;
peg: paper 002 Tables 1-4), visible in the dry run (text and JSON), and laid out in the suites' tables."""
from __future__ import annotations

import json

import pytest

from harness.ablation import load_suite
from harness.ablation.layout import load_layout
from harness.cli import main
from suites.groupings import MIRACL_LANGUAGES, MKQA_QUERY_LANGUAGES

BEIR_15_LEAVES = ["trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "quora",
                  "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact", "msmarco"]


@pytest.fixture(scope="module")
def tdro_plan(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("HARNESS_TDRO_DATA", raising=False)
        mp.delenv("HARNESS_TDRO_EVAL", raising=False)
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["run", "tdro", "--scale", "paper", "--dry-run", "--format", "json",
                         "--results-root", str(root)]) == 0
    assert not list(root.iterdir())                        # a dry run writes nothing
    return json.loads(out.getvalue())                      # JSON, not the text plan


def test_tdro_paper_dry_run_lists_every_paper_000_metric(tdro_plan):
    bench = {b["id"]: b for b in tdro_plan["benchmarks"]}
    assert tdro_plan["scale"] == "paper" and len(tdro_plan["cells"]) == 17 and tdro_plan["estimated_gpu_hours"] > 40
    miracl = [lang for lang in MIRACL_LANGUAGES if f"miracl-{lang}" in bench]
    assert len(miracl) == 18
    for lang in miracl:
        b = bench[f"miracl-{lang}"]
        assert b["options"]["language"] == lang and {"ndcg@10", "recall@100"} <= set(b["metrics"])
    # MKQA: one benchmark per query language (25), Acc@10 and Acc@100 each, not one pooled set
    assert "mkqa" not in bench
    for lang in MKQA_QUERY_LANGUAGES:
        b = bench[f"mkqa-{lang.replace('_', '-')}"]
        assert b["suite"] == "mkqa" and b["options"]["language"] == lang
        assert b["metrics"][:2] == ["acc@10", "acc@100"] and not b["protocol_metrics_added"]
    cqa = [i for i in bench if i.startswith("cqadupstack-")]
    assert len(cqa) == 12
    for bid in BEIR_15_LEAVES + cqa:
        assert bench[bid]["suite"] == "beir" and "ndcg@10" in bench[bid]["metrics"]
    assert len(bench) == 18 + 25 + 14 + 12


def test_tdro_paper_aggregates_and_layouts():
    suite = load_suite("tdro")
    cfg = suite.scale("paper")
    assert cfg.aggregate_leaves("MKQA") == [f"mkqa-{lang.replace('_', '-')}" for lang in MKQA_QUERY_LANGUAGES]
    table3 = load_layout(suite, "paper", "table3")
    assert [(c.benchmark, c.metric) for c in table3.columns] == [
        ("MIRACL", "ndcg@10"), ("MIRACL", "recall@100"), ("MKQA", "acc@10"), ("MKQA", "acc@100"), ("BEIR", "ndcg@10")]
    table5 = load_layout(suite, "paper", "table5")
    assert ("MKQA", "acc@100") in [(c.benchmark, c.metric) for c in table5.columns]
    for name, metric in [("miracl-languages", "ndcg@10"), ("miracl-languages-recall", "recall@100"),
                         ("mkqa-languages", "acc@100"), ("mkqa-languages-acc10", "acc@10")]:
        layout = load_layout(suite, "paper", name)
        assert layout.kind == "breakdown" and layout.options["metric"] == metric
        (members,) = layout.options["groups"].values()
        assert len(members) == (18 if name.startswith("miracl") else 25)
    for scale in ("tiny", "small"):                        # the same layouts are valid at every scale
        assert load_layout(suite, scale, "table3").columns


def test_peg_paper_dry_run_has_reranking_map_and_both_dureader_galleries(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_PEG_DATA", raising=False)
    assert main(["run", "peg", "--scale", "paper", "--dry-run", "--results-root", str(tmp_path)]) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()
             if line.startswith("  benchmark ")}
    for task, folder in [("t2-rerank", "T2Reranking"), ("mmarco-rerank", "MMarcoReranking"),
                         ("cmedqa1-rerank", "CMedQAv1-reranking"), ("cmedqa2-rerank", "CMedQAv2-reranking")]:
        assert f"cmteb/{folder} " in lines[task] and "metrics=map@1000,mrr@10" in lines[task]
    for gallery in ("dureader", "dureader-full"):
        assert "metrics=mrr@10,success@1,success@50" in lines[gallery]
    suite = load_suite("peg")
    refs = {b.id: b for b in suite.scale("paper").benchmarks}
    assert (refs["dureader"].options["gallery"], refs["dureader-full"].options["gallery"]) == ("sub200k", "full")
    assert suite.scale("paper").aggregate_leaves("C-MTEB reranking") == [
        "t2-rerank", "mmarco-rerank", "cmedqa1-rerank", "cmedqa2-rerank"]
    progressive = load_layout(suite, "paper", "progressive")
    shown = [(c.benchmark, c.metric) for c in progressive.columns]
    assert ("C-MTEB reranking", "map@1000") in shown
    assert {("dureader-full", m) for m in ("mrr@10", "success@1", "success@50")} <= set(shown)
    assert {("webqa", "success@1"), ("webqa", "success@50")} <= {
        (c.benchmark, c.metric) for c in load_layout(suite, "small", "progressive").columns}


def test_table_suite_list_says_when_a_suite_has_no_layouts(capsys):
    assert main(["table", "suite", "quickstart", "--list"]) == 0
    out = capsys.readouterr().out
    assert "declares no table layouts" in out and "results/suites/quickstart/tiny/table.md" in out
    assert main(["table", "suite", "peg", "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == ["progressive (default)", "table1", "table2", "table3", "table4",
                                                    "per-task", "reported"]


def test_tdro_paper_mkqa_benchmarks_load_per_language(shared_data, tmp_path, monkeypatch):
    """The paper-scale MKQA refs, as written in the suite file, load the real release one language at a time
    ('no' stays Norwegian, not YAML's false) with Acc@10/Acc@100 on their cards."""
    import json as _json

    from harness.ablation.benchmarks import load_benchmark_ref

    mkqa = tmp_path / "mkqa"
    mkqa.mkdir()
    (mkqa / "mkqa.jsonl.gz").write_bytes((shared_data / "mkqa" / "test_mkqa.jsonl.gz").read_bytes())
    (mkqa / "corpus.jsonl").write_text(
        _json.dumps({"_id": "p1", "title": "Ridley Scott", "text": "Sir Ridley Scott is an English director."})
        + "\n", encoding="utf-8")
    monkeypatch.setenv("HARNESS_TDRO_EVAL", str(tmp_path))
    refs = {b.id: b for b in load_suite("tdro").scale("paper").benchmarks}
    seen = {}
    for bid in ("mkqa-no", "mkqa-zh-cn", "mkqa-ja"):
        loaded = load_benchmark_ref(refs[bid], [])
        lang = refs[bid].options["language"]
        assert loaded.card.dataset == f"mkqa-{lang}" and loaded.card.metrics == ("acc@10", "acc@100")
        assert loaded.dataset.queries.ids and all(q.startswith(f"{lang}-") for q in loaded.dataset.queries.ids)
        seen[bid] = loaded.card.data_hash
    assert len(set(seen.values())) == 3                    # three benchmarks, not one pooled set
