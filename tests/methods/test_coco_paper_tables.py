"""Paper 001's result tables as layouts of the `coco_dr` suite at paper scale: BEIR-18 + MS MARCO as columns,
every system paper 001 prints as a reported row beside ours (Tables 1, 2, 3, 7), our cells equal to the
per-query means written into a finished run, the averages (BEIR-18, CPT-Sub, GPL-5; CQADupStack over its 12
forums) as the paper forms them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.ablation import load_suite
from harness.ablation.axes import replicates, suite_systems
from harness.ablation.layout import load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, cell_result_dir, report_dir
from harness.data.run import Run
from harness.evaluation_result import EvaluationResult
from harness.protocol import ProtocolCard
from harness.store import write_result

PAPER = Path(__file__).resolve().parents[2] / "reports" / "papers" / "001"
QIDS = [f"q{i}" for i in range(5)]
BEIR_18 = ["trec-covid", "bioasq", "nfcorpus", "nq", "hotpotqa", "fiqa", "signal1m", "trec-news", "robust04",
           "arguana", "webis-touche2020", "quora", "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact"]


@pytest.fixture(scope="module")
def finished_paper(tmp_path_factory):
    """A finished paper-scale run (as the runner writes it) with seeded per-query nDCG@10 for every benchmark."""
    root = tmp_path_factory.mktemp("coco-paper")
    suite = load_suite("coco_dr")
    rng = np.random.default_rng(1)
    report = report_dir(root, suite.name, "paper")
    report.mkdir(parents=True)
    cells, scores = [], {}
    for system in suite_systems(suite):
        for replicate in replicates(suite, system, "paper"):
            cells.append({"variant": replicate.id, "key": f"k-{replicate.id}"})
            for bench in suite.scale("paper").benchmarks:
                values = {"ndcg@10": rng.random(len(QIDS))}
                scores[(replicate.id, bench.id)] = float(values["ndcg@10"].mean())
                write_result(cell_result_dir(report, replicate.id, bench.id),
                             run=Run.from_arrays(QIDS[:1], ["d1"], [1.0]),
                             evaluation=EvaluationResult(QIDS, values),
                             card=ProtocolCard(suite="beir", dataset=bench.id, metrics=("ndcg@10",)), manifest={})
    (report / SUMMARY_FILE).write_text(json.dumps({"suite": suite.name, "cells": cells}), encoding="utf-8")
    return suite, root, scores


def printed(number: int) -> tuple[list[str], dict[str, list[str]]]:
    doc = yaml.safe_load((PAPER / f"table{number}.yaml").read_text(encoding="utf-8"))
    return [c["key"] for c in doc["columns"]], {r.get("id", r["label"]): r["cells"] for r in doc["rows"]}


def value(text: str) -> float | None:
    digits = "".join(ch for ch in text if ch.isdigit() or ch == ".")
    return float(digits) if digits and any(ch.isdigit() for ch in digits) else None


def cqadupstack(scores, variant):
    return np.mean([v for (name, b), v in scores.items() if name == variant and b.startswith("cqadupstack-")])


def test_every_beir_set_and_ms_marco_with_the_paper_evaluation_lengths():
    suite = load_suite("coco_dr")
    for scale in ("paper", "paper-large"):
        benches = {b.id: b for b in suite.scale(scale).benchmarks}
        assert set(BEIR_18) | {"msmarco", "trec-covid-v2"} <= set(benches)
        assert sum(b.startswith("cqadupstack-") for b in benches) == 12
        lengths = {b: (benches[b].options["query_max_length"], benches[b].options["doc_max_length"]) for b in benches}
        # paper 001 §5.1 "Evaluation Details"
        assert lengths["arguana"] == (128, 128)
        assert lengths["trec-news"] == lengths["robust04"] == lengths["scifact"] == (64, 256)
        assert all(v == (64, 128) for b, v in lengths.items() if b not in ("arguana", "trec-news", "robust04",
                                                                            "scifact"))
        for private in ("bioasq", "signal1m", "trec-news", "robust04"):       # no public download: user's folder
            assert benches[private].dataset_dir == "{cocodr_private}/" + private
        aggregates = suite.scale(scale).aggregates
        assert len(aggregates["BEIR"]) == 18 and "msmarco" not in aggregates["BEIR"]
        assert len(aggregates["CPT-Sub"]) == 11 and len(aggregates["CQADupStack"]) == 12


def test_table1_every_printed_system_beside_ours(finished_paper):
    suite, root, scores = finished_paper
    table = render_layout(suite, "paper", root, "table1")
    columns, rows = printed(1)
    labels = [r.label for r in table.rows]
    assert labels[:2] == ["Fine-tuning baseline", "+COCO +iDRO"]         # the baseline row comes with the kind
    assert len(labels) == 2 + len(columns) + 3            # ours + one row per printed system + released (3)
    # the released checkpoints evaluated here, right after the printed COCO-DR Base / Large lines, then BEIR's ANCE
    at = labels.index("COCO-DR Large (paper 001, Tab. 1)")
    assert labels[at + 1:] == ["COCO-DR Base (released; MiniLM below paper scale)",
                               "COCO-DR Large (released; MiniLM below paper scale)",
                               "ANCE (BEIR's released FirstP; MiniLM below paper scale)"]
    first, second = table.columns[0].key, table.columns[1].key
    assert table.rows[at + 3].cells[second].value == pytest.approx(scores[("ance-released", "trec-covid")])
    assert table.rows[at + 1].cells[second].value == pytest.approx(scores[("released-base", "trec-covid")])
    assert table.rows[at + 2].cells[first].value == pytest.approx(scores[("released-large", "msmarco")])
    keys = [c.key for c in table.columns]
    assert len(keys) == 19 + 2                                          # MS MARCO, BEIR-18, Avg, Avg CPT Sub
    ours = table.rows[1]
    assert ours.cells[keys[0]].value == pytest.approx(scores[("coco-idro", "msmarco")])
    assert ours.cells[keys[1]].value == pytest.approx(scores[("coco-idro", "trec-covid")])
    cqa = cqadupstack(scores, "coco-idro")
    assert ours.cells[keys[18]].value == pytest.approx(cqa)             # the 12 forums' mean
    beir = [scores[("coco-idro", b)] for b in BEIR_18] + [cqa]
    assert ours.cells[keys[19]].value == pytest.approx(np.mean(beir))
    # the printed rows: each printed cell as the paper prints it (COCO-DR Base: 0.789 on TREC-COVID, 0.462 average)
    base = table.rows[labels.index("COCO-DR Base (paper 001, Tab. 1)")]
    assert base.cells[keys[1]].value == pytest.approx(0.789) and base.cells[keys[19]].value == pytest.approx(0.462)
    assert base.cells[keys[20]].value == pytest.approx(0.521)
    bm25 = table.rows[labels.index("BM25 (paper 001, Tab. 1)")]
    assert [bm25.cells[k].value for k in keys[:3]] == pytest.approx([0.228, 0.656, 0.465])


def test_table2_table3_table7_printed_rows(finished_paper):
    suite, root, scores = finished_paper
    two = render_layout(suite, "paper", root, "table2-printed")
    labels = [r.label for r in two.rows]
    assert len(labels) == 5 + 11
    condenser = two.rows[labels.index("Condenser fine-tuned (= the baseline below paper scale)")]
    assert condenser.cells[two.columns[0].key].value == pytest.approx(scores[("condenser", "trec-covid")])
    printed_condenser = two.rows[labels.index("Condenser Base (paper 001, Tab. 2)")]
    assert printed_condenser.cells[two.columns[0].key].value is not None
    keys = [c.key for c in two.columns]
    assert len(keys) == 18 + 1
    full = two.rows[labels.index("COCO-DR Base Full (paper 001, Tab. 2)")]
    minus_coco = two.rows[labels.index("COCO-DR Base -COCO (paper 001, Tab. 2)")]
    assert (full.cells[keys[0]].value, minus_coco.cells[keys[0]].value) == pytest.approx((0.789, 0.763))
    assert full.cells[keys[-1]].value == pytest.approx(0.462)
    three = render_layout(suite, "paper", root, "table3")
    labels3 = [r.label for r in three.rows]
    assert len(labels3) - labels3.index("+COCO +iDRO") == 2 + 17
    keys3 = [c.key for c in three.columns]
    ours = three.rows[labels3.index("+COCO +iDRO")]
    gpl5 = [scores[("coco-idro", b)] for b in ("fiqa", "scifact", "trec-covid-v2", "robust04")]
    assert ours.cells[keys3[-1]].value == pytest.approx(np.mean(gpl5 + [cqadupstack(scores, "coco-idro")]))
    bm25 = three.rows[labels3.index("BM25 (2009) (paper 001, Tab. 3)")]
    assert [bm25.cells[k].value for k in keys3] == pytest.approx([0.239, 0.661, 0.601, 0.315, 0.387, 0.461])
    seven = render_layout(suite, "paper", root, "table7-printed")
    labels7 = [r.label for r in seven.rows]
    assert labels7[-2:] == ["COCO-DR (paper 001, Tab. 7)", "GroupDRO (2020) (paper 001, Tab. 7)"]
    assert seven.rows[-1].cells[keys[0]].value == pytest.approx(0.793)


def test_episode_curves_and_layouts_at_both_paper_scales():
    suite = load_suite("coco_dr")
    for scale in ("paper", "paper-large"):
        for name in ("table1", "table2-printed", "table3", "table7-printed", "episodes", "ablation"):
            layout = load_layout(suite, scale, name)
            assert layout.columns
    episodes = load_layout(suite, "paper", "episodes")
    assert episodes.kind == "curve" and [c.benchmark for c in episodes.columns][:2] == ["trec-covid", "scifact"]
    checkpoints = {v.id: suite.checkpoints_for(v, "paper") for v in suite.variants}
    # Epi-1 (step 0: the warm-up stage's model), Epi-2 and Epi-3; the finished run is Epi-4
    assert checkpoints["coco-idro"].steps == (0, 45000, 90000)
    assert suite.checkpoints_for(suite.variants[3], "paper-large").steps == (0, 30000, 60000)
    assert episodes.options["labels"] == ["Epi-1", "Epi-2", "Epi-3", "Epi-4"]
    # Table 6 / Figure 2: the 18 BEIR tasks against MS MARCO, each column labelled as Table 6's row
    shift = load_layout(suite, "paper", "shift")
    from reports.papers.catalog import load_tables

    (table6,) = load_tables("coco-dr", 6)
    assert shift.kind == "distribution-shift" and shift.options["source"] == "msmarco"
    assert [c.label for c in shift.columns] == [r.label for r in table6.rows]


def test_figure3_grid_reuses_coco_dr_stages_and_passes_strict_provenance():
    """Paper 001 Figure 3 (K x tau; no tau value in the paper, only the study): one variant per K sweeping tau,
    on coco_dr's paper recipe, whose COCO and warm-up runs it shares (same content keys)."""
    from harness.ablation.axes import suite_systems as systems
    from harness.ablation.cells import expand_train_cells
    from harness.ablation.provenance import resolved_settings, strict_provenance_problems
    from harness.keys import content_key
    from harness.method import get_method, train_run_config

    grid = load_suite("coco_dr_hparams")
    assert [s.id for s in systems(grid)] == [f"k{k}@tau={t}" for k in (25, 50, 100) for t in (250, 1000, 4000)]
    assert strict_provenance_problems(resolved_settings(grid, "paper")) == []
    layout = load_layout(grid, "paper", "figure3")
    assert layout.kind == "sweep" and [c.benchmark for c in layout.columns] == ["BEIR", "BEIR-public"]

    def stage_keys(suite, variant):
        cells = expand_train_cells(suite, "paper", load_data=False)
        cell = next(c for c in cells if c.variant.id.split("@")[0] == variant)
        (warm,) = get_method("idro").stages(cell.spec)
        (coco,) = get_method("dro-erm").stages(warm.spec)
        return [content_key(train_run_config(s.method, s.spec, cell.data_fingerprint)) for s in (warm, coco)]

    assert stage_keys(grid, "k50") == stage_keys(load_suite("coco_dr"), "coco-idro")
    cells = [c for c in expand_train_cells(grid, "paper", load_data=False)]
    assert {(c.spec.method_options["k"], c.spec.method_options["tau"], c.spec.method_options["mode"]) for c in cells} \
        == {(k, t, "paper") for k in (25, 50, 100) for t in (250, 1000, 4000)}


def test_worst_domain_view_over_the_beir_sets(finished_paper):
    """The ablation layout's Worst Δ at paper scale: each row's lowest delta against the baseline over the 17
    dataset columns (aggregates such as CQADupStack and the averages left out)."""
    suite, root, scores = finished_paper
    table = render_layout(suite, "paper", root, "ablation")
    row = next(r for r in table.rows if r.label == "+COCO +iDRO")
    deltas = [scores[("coco-idro", b)] - scores[("baseline", b)] for b in BEIR_18]
    assert row.cells["worst-delta"].value == pytest.approx(min(deltas))
