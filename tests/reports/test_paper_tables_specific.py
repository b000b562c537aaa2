"""Paper-specific checks of the transcribed tables: numbers grepped in the raw text, numbers a paper
repeats across tables, gaps, markers and sums the paper states, recomputed cells with their notes.

The generic checks over every (paper, table number) are in ``test_paper_tables.py``.
"""
from __future__ import annotations

import re

import pytest
from paper_tables_helpers import (
    TRANSCRIBED,
    column_values,
    paper_lines,
    paper_text,
    pipe_cells,
    printed_cells,
    row_values,
    table_spec,
)

from reports.markdown import render_markdown
from reports.papers import to_table

LANGUAGES = ["ar", "bn", "en", "es", "fa", "fi", "fr", "hi", "id", "ja", "ko", "ru", "sw", "te", "th", "zh"]


# --- 000 (tDRO), 002 (PEG), 003 (Mistral-SPLADE) --------------------------------------------------------

def test_000_002_003_spot_checks(papers_dir):
    """A few numbers grepped next to their row labels in the raw text."""
    tdro = paper_text(papers_dir, "000")
    assert re.search(r"^Llama3-8B 66\.4\* \(\+2\.3\) 93\.5\* \(\+0\.7\)", tdro, re.MULTILINE)
    assert re.search(r"^Yahoo answers \(Title-Answer\) 3\.9257$", tdro, re.MULTILINE)
    spec = table_spec("000", 3)
    row = spec.row("top70/llama3-8b")
    assert (row.cells[0].value, row.cells[0].marks, row.cells[0].delta) == (66.4, ("*",), 2.3)
    assert spec.row("rw/qwen-7b").cells[3].marks == ()            # 73.6 (+0.0) carries no significance marker
    peg = paper_text(papers_dir, "002")
    assert re.search(r"^M3E \(base\) 66\.08 17\.54 76\.16 77\.29 57\.27$", peg, re.MULTILINE)
    assert table_spec("002", 2).rows[3].cells[4].text == "57.27"
    splade = paper_text(papers_dir, "003")
    assert re.search(r"^SciFact\t66\.5\t69\.3\t71\t70\.96\t71\.8\t69\.31\t77\.24$", splade, re.MULTILINE)
    assert [c.text for c in table_spec("003", 1).row("SciFact").cells] == ["66.5", "69.3", "71", "70.96", "71.8",
                                                                           "69.31", "77.24"]


def test_000_003_repeated_numbers_agree_across_tables():
    """Numbers a paper repeats in two tables are transcribed identically."""
    t3, t4, t5 = (table_spec("000", n) for n in (3, 4, 5))
    assert [c.value for c in t4.row("tDRO + LLM-DR Llama3-8B/Top-70%").cells[1:]] == [
        t3.row("top70/llama3-8b").cells[j].value for j in (0, 3, 4)]
    assert [c.value for c in t5.row("baseline").cells] == [t3.row("base/qwen-0.5b").cells[j].value for j in (4, 0, 3)]
    assert [c.value for c in t5.row("top70").cells] == [t3.row("top70/qwen-0.5b").cells[j].value for j in (4, 0, 3)]
    s1, s2 = table_spec("003", 1), table_spec("003", 2)
    assert [r.cells[6].text for r in s1.rows] == [r.cells[2].text for r in s2.rows]


def test_000_002_regenerated_cells_show_recomputed_values_with_notes():
    table = to_table(table_spec("002", 2))
    m3e = next(r for r in table.rows if r.label == "M3E (base)")
    assert m3e.cells["avg"].value == pytest.approx(59.2675) and m3e.cells["avg"].note == "printed 57.27"
    assert "59.27<sup>\\[1\\]</sup>" in render_markdown(table)
    table5 = to_table(table_spec("000", 5))
    excess = next(r for r in table5.rows if r.label == "mean(L_proxy) - mean(L_ref)")
    assert excess.cells["mkqa/acc@100"].delta == pytest.approx(-1.2)
    assert excess.cells["mkqa/acc@100"].note == "printed delta +1.2"
    gains = next(r for r in to_table(table_spec("000", 3)).rows if r.label == "Avg Gains")
    assert gains.kind == "gain" and gains.cells["beir/ndcg@10"].value == pytest.approx(4.7 / 6)
    gap_table = to_table(table_spec("000", 4))
    assert gap_table.rows[0].cells["enhance/special-pretrain"].value == "?"
    assert any("lost in its text extraction" in note for note in gap_table.notes)


# --- 001 (COCO-DR) ----------------------------------------------------------------------------------------

def test_001_table1_rows_print_fewer_cells_exactly_where_gaps_are_written(papers_dir):
    """The extraction prints one cell per non-gap transcribed cell (a row's '?' count is its deficit)."""
    spec = table_spec("001", 1)
    lines = paper_lines(papers_dir, "001")[179:203]   # English rendering
    printed = {cells[0].strip(): [c.strip() for c in cells[1:] if c.strip()]
               for cells in (line.strip().strip("|").split("|") for line in lines)}
    for row in spec.rows:
        label = row.printed_label or row.label
        assert len(printed[label]) == len(printed_cells(row)) == len(spec.columns) - sum(c.kind == "gap"
                                                                                         for c in row.cells)


def test_001_spot_checks(papers_dir):
    """A few numbers grepped next to their row labels in the raw text."""
    text = paper_text(papers_dir, "001")
    assert re.search(r"^\| NQ \| 0\.329 \| 0\.398 \| 0\.446 \| 0\.498 \| 0\.358 \| 0\.483 \| 0\.559\* \| 0\.568\* \| "
                     r"0\.524 \| 0\.505 \| 0\.547 \| \|\|\|$", text, re.MULTILINE)
    nq = table_spec("001", 1).row("NQ")
    assert (nq.cells[6].value, nq.cells[6].marks) == (0.559, ("*",))
    assert [c.kind for c in nq.cells[8:10]] == ["gap", "gap"] and nq.cells[12].value == 0.547
    assert re.search(r"^\| SciFact \| 0\.709 \| 0\.688 \| 0\.615 \| 0\.722 \| 0\.709 \| 0\.696 \| 0\.600 \|",
                     text, re.MULTILINE)
    assert [c.text for c in table_spec("001", 2).row("SciFact").cells[:7]] == ["0.709", "0.688", "0.615", "0.722",
                                                                              "0.709", "0.696", "0.600"]
    assert re.search(r"^\| COCO-DRBase \| 0\.307 \| 0\.709 \| 0\.807 \| 0\.370 \| 0\.443 \| 0\.527† \|$",
                     text, re.MULTILINE)
    avg = table_spec("001", 3).row("coco-dr-base").cells[5]
    assert (avg.value, avg.marks) == (0.527, ("†",))
    assert re.search(r"^\| Robust04 \| 0\.6656 \| 0\.4323 \| -0\.016 \| \+0\.008 \|$", text, re.MULTILINE)
    assert table_spec("001", 6).row("Robust04").cells[3].value == pytest.approx(0.008)
    assert re.search(r"^\| Avg \| 0\.462 \| 0\.459 \|$", text, re.MULTILINE)


def test_001_repeated_numbers_agree_across_tables():
    """Numbers the paper repeats in two tables are transcribed identically."""
    t1, t2, t3, _t6, t7 = (table_spec("001", n) for n in TRANSCRIBED["001"])
    datasets = [r.label.replace("Touché", "Touche") for r in t2.rows]            # 18 tasks + Avg
    for key1, key2 in (("coco-dr-base", "base/full"), ("coco-dr-large", "large/full")):
        c1, c2 = column_values(t1, key1), column_values(t2, key2)
        assert [c1[d] for d in datasets] == [c2[d] for d in datasets]
    assert column_values(t7, "coco-dr") == column_values(t2, "base/full")
    for row_id, key2 in (("coco-dr-base", "base/full"), ("coco-dr-base-wo-idro", "base/-idro"),
                         ("coco-dr-large", "large/full")):
        c2 = column_values(t2, key2)
        row = t3.row(row_id)
        assert [row.cells[j].value for j in (0, 1, 3, 4)] == [c2[d] for d in ("FiQA-2018", "SciFact", "CQADupStack",
                                                                             "Robust04")]


def test_001_table6_gaps_are_differences_of_table1_and_table2_numbers():
    """Table 6's "ANCE vs. BM25" gaps against Table 1 (BM25, ANCE) and Table 2 (coCondenser Base).

    ANCE (BERT-Base) agrees on all 18 tasks; ANCE (coCondenser) on 15: on three tasks the printed gap
    differs from Table 2's coCondenser Base minus Table 1's BM25 (a slip in one of the tables).
    """
    t1, t2, t6 = (table_spec("001", n) for n in (1, 2, 6))
    bm25, ance = column_values(t1, "bm25"), column_values(t1, "ance")
    cocondenser = column_values(t2, "cocondenser/base")
    ance_gap = column_values(t6, "ance-bert-vs-bm25")
    cocondenser_gap = column_values(t6, "ance-cocondenser-vs-bm25")
    assert len(ance_gap) == 18
    assert all(ance_gap[d] == pytest.approx(ance[d] - bm25[d], abs=1e-9) for d in ance_gap)
    disagreeing = {d: (cocondenser_gap[d], round(cocondenser[d] - bm25[d], 3)) for d in cocondenser_gap
                   if cocondenser_gap[d] != pytest.approx(cocondenser[d] - bm25[d], abs=1e-9)}
    assert disagreeing == {"Robust04": (0.008, 0.034), "Climate-Fever": (-0.014, -0.005), "SciFact": (-0.092, -0.063)}


def test_001_regenerated_cells_show_recomputed_values_with_notes():
    table3 = to_table(table_spec("001", 3))
    bm25 = next(r for r in table3.rows if r.label == "BM25 (2009)")
    assert bm25.cells["avg"].value == pytest.approx(0.4406) and bm25.cells["avg"].note == "printed 0.461"
    modir = next(r for r in table3.rows if r.label == "MoDIR (2022)")
    assert modir.cells["avg"].value is None                    # printed dash; Robust04 is a dash too
    table1 = to_table(table_spec("001", 1))
    avg = next(r for r in table1.rows if r.label == "Avg")
    assert avg.kind == "average" and avg.cells["genq"].value == pytest.approx(7.386 / 18)
    assert avg.cells["contriever"].value == "?"
    assert any("lost in its text extraction" in note for note in table1.notes)


# --- 004 (BDUMDR) -----------------------------------------------------------------------------------------

# A phrase the body text writes in the same paragraph as "Table k" (how the caption-less blocks are identified).
REFERENCES_004 = {1: "main results on MIRACL", 2: "TopK-PercPos", 3: "each component",
                  4: "initialization with different", 5: "false negative filtering", 6: "MIFT", 7: "mini-batches",
                  8: "quantitative analysis", 9: "sampling weights", 10: "statistic of the MIRACL dataset",
                  12: "three-level rating", 13: "final distribution of topic classification",
                  14: "Recall@100 score", 15: "different backbone models", 16: "different backbone models"}
NO_ROW_LABELS_004 = {9}   # Table 9 prints cells only


def _raw_row_004(papers_dir, line_number: int) -> list[str]:
    """The printed cells of one extraction line of paper 004 (label first)."""
    return pipe_cells(paper_lines(papers_dir, "004")[line_number - 1])


def test_004_rows_print_fewer_cells_exactly_where_gaps_are_written(papers_dir):
    """The extraction prints one cell per non-gap transcribed cell (Ours (mDPR) in Table 1 lacks one)."""
    for number in TRANSCRIBED["004"]:
        if number in (10, 12, 15, 16):  # not one line per row after one header line (checked row by row elsewhere)
            continue
        spec = table_spec("004", number)
        first, _ = spec.source_lines
        for offset, row in enumerate(spec.rows, start=1):
            printed = _raw_row_004(papers_dir, first + offset)
            printed = printed if number in NO_ROW_LABELS_004 else printed[1:]
            assert len(printed) == len(printed_cells(row)) == len(spec.columns) - sum(c.kind == "gap"
                                                                                      for c in row.cells)
    assert [c.kind for c in table_spec("004", 1).row("ours-mdpr").cells].count("gap") == 1
    assert [c.kind for c in table_spec("004", 14).row("ours-mdpr").cells].count("gap") == 2
    assert [c.kind for c in table_spec("004", 14).row("ours-bge").cells].count("gap") == 1


def test_004_tables_are_identified_by_the_body_text(papers_dir):
    """No captions in the extraction; each table number is referenced next to what its block shows,
    and the blocks come in table order."""
    text = paper_lines(papers_dir, "004")
    assert not any(re.match(r"^\s*Table \d+\s*[:.]", line) for line in text)
    starts = []
    for number in TRANSCRIBED["004"]:
        spec = table_spec("004", number)
        paragraphs = [line for line in text if re.search(rf"\bTable {number}\b", line)]
        assert any(REFERENCES_004[number].lower() in p.lower() for p in paragraphs), f"Table {number} not referenced"
        assert any(n.startswith("The text extraction prints no caption") for n in spec.notes)
        starts.append(spec.source_lines[0])
    assert starts == sorted(starts)


def test_004_spot_checks(papers_dir):
    """A few numbers grepped next to their row labels in the raw text."""
    raw = paper_text(papers_dir, "004")
    assert re.search(r"^\| OursBGE \| 70\.6† \|.*\| 71\.8† \| 71\.6† \| 79\.6† \|", raw, re.MULTILINE)
    assert table_spec("004", 1).row("ours-bge").cells[12].text == "71.6†"
    # Ours (mDPR): 55.8 (es) is followed by 75.8 (fi): fa is the cell the extraction lost
    assert re.search(r"^\| OursmDPR \| 66\.8† \| 75\.7† \| 74\.1† \| 55\.9† \| 55\.8† \| 75\.8† \|", raw,
                     re.MULTILINE)
    assert [c.text for c in table_spec("004", 1).row("ours-mdpr").cells[4:7]] == ["55.8†", "?", "75.8†"]
    assert re.search(r"^\| TopK-PercPos \| 68\.1 \| 78\.8 \|", raw, re.MULTILINE)
    assert re.search(r"^\| w/o Stage 1 \| 66\.9 \| 93\.1 \|$", raw, re.MULTILINE)
    assert table_spec("004", 3).row("wo-stage1").cells[0].value == 66.9
    assert re.search(r"^\| Eliminatation \| 19\.5 \| 17\.3 \|", raw, re.MULTILINE)
    assert re.search(r"\| 96\.1 \| 96 \| 89\.8 \|$", raw, re.MULTILINE)
    assert table_spec("004", 8).row("from-retrieval").cells[15].text == "96"
    assert re.search(r"^\| 0\.85 \| 0\.45 \| 0\.4 \| 70\.6 \|$", raw, re.MULTILINE)


def test_004_repeated_numbers_agree_across_tables(papers_dir):
    """Numbers the paper repeats are transcribed identically; the one disagreement is the paper's."""
    t1, t2 = table_spec("004", 1), table_spec("004", 2)
    ours1, ours2 = row_values(t1, "ours-bge"), row_values(t2, "ours")
    assert {k: (ours1[k], ours2[k]) for k in ours1 if ours1[k] != ours2[k]} == {"ru": (71.6, 70.8)}
    full = [table_spec("004", n).row("full") for n in (3, 4, 5, 6, 7)]
    assert {tuple(c.text for c in row.cells) for row in full} == {("70.6", "95.9")}
    assert ours1["avg"] == 70.6 and row_values(table_spec("004", 9), "setting-2")["ndcg@10"] == 70.6
    table14_ours_bge = _raw_row_004(papers_dir, 195)            # Appendix Table 14 (Recall@100), Ours (BGE)
    assert table14_ours_bge[:2] == ["OursBGE", "95.9†"]
    # Table 1's Ours rows against Appendix Table 15 (nDCG@10 per backbone, method "Ours")
    for row_id, line_number in (("ours-mbert", 218), ("ours-mdpr", 226), ("ours-me5", 234)):
        table15 = _raw_row_004(papers_dir, line_number)
        assert table15[0] == "Ours"
        values = [float(x) for x in table15[1:]]
        ours = list(row_values(t1, row_id).values())
        assert [v for v, o in zip(values, ours) if o is not None] == [o for o in ours if o is not None]
        assert [table15[1 + j] for j, o in enumerate(ours) if o is None] == (["61.6"] if row_id == "ours-mdpr"
                                                                             else [])


def test_004_dagger_is_missing_where_ours_is_below_its_backbone():
    """The table-1 note on † (its meaning is in the lost caption) states this pattern."""
    t1 = table_spec("004", 1)
    unmarked = {}
    for ours_id, backbone_id in (("ours-mbert", "mbert"), ("ours-mdpr", "mdpr"), ("ours-me5", "me5-large"),
                                 ("ours-bge", "bge")):
        ours, backbone = t1.row(ours_id), row_values(t1, backbone_id)
        unmarked[ours_id] = sorted(c.key for c, cell in zip(t1.columns, ours.cells)
                                   if cell.kind == "number" and "†" not in cell.marks)
        below = sorted(c.key for c, cell in zip(t1.columns, ours.cells)
                       if cell.kind == "number" and cell.value < backbone[c.key])
        assert below == (["en", "es", "fi", "hi", "ru"] if ours_id == "ours-me5" else [])
    assert unmarked == {"ours-mbert": [], "ours-mdpr": ["zh"], "ours-me5": ["en", "es", "fi", "hi", "ru"],
                        "ours-bge": []}


def test_004_table8_shares_sum_to_100_and_table9_weights_add_up():
    t8 = table_spec("004", 8)
    retrieval, llm = row_values(t8, "from-retrieval"), row_values(t8, "from-llm")
    assert all(retrieval[k] + llm[k] == pytest.approx(100.0, abs=1e-9) for k in ["avg"] + LANGUAGES)
    t9 = table_spec("004", 9)
    settings = [row_values(t9, f"setting-{i}") for i in range(1, 5)]
    assert all(s["w"] == pytest.approx(s["w_l"] + s["w_t"], abs=1e-9) for s in settings)
    # Section 5.2: lower language weight and higher topic weight each raise nDCG@10
    score = {(s["w_l"], s["w_t"]): s["ndcg@10"] for s in settings}
    assert score[(0.45, 0.4)] > score[(0.55, 0.4)] and score[(0.45, 0.2)] > score[(0.55, 0.2)]
    assert score[(0.55, 0.4)] > score[(0.55, 0.2)] and score[(0.45, 0.4)] > score[(0.45, 0.2)]


def test_004_regenerated_cells_show_recomputed_values_with_notes():
    table8 = to_table(table_spec("004", 8))
    elimination = next(r for r in table8.rows if r.label == "Eliminatation")
    assert elimination.cells["avg"].value == pytest.approx(306.9 / 16)
    assert elimination.cells["avg"].note == "printed 19.5"
    table1 = to_table(table_spec("004", 1))
    mdpr = next(r for r in table1.rows if r.label == "Ours (mDPR)")
    assert mdpr.cells["fa"].value == "?"
    assert mdpr.cells["avg"].value == 66.8 and mdpr.cells["avg"].note.startswith("as printed; not recomputable")
    assert any("lost in its text extraction" in note for note in table1.notes)
    table9 = to_table(table_spec("004", 9))
    assert [r.cells["w"].value for r in table9.rows] == pytest.approx([0.95, 0.85, 0.75, 0.65])
