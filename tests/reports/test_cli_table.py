"""``harness table paper``: listing, formats, --verify report, exit statuses."""
from __future__ import annotations

from harness.cli import main
from reports.papers import catalog


def test_list(capsys):
    assert main(["table", "paper", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["000", "tdro", "tables", "1,", "3,"]
    assert any(line.startswith("002  peg") and "tables 1, 2, 3, 4" in line for line in lines)
    assert any(line.startswith("003  mistral-splade") and "tables 1, 2 " in line for line in lines)


def test_verify_prints_the_report_only(capsys):
    assert main(["table", "paper", "tdro", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "|" not in out and r"\begin{table}" not in out
    assert ("paper 000 (tdro) table 5: 27 printed derived values checked; 1 mismatch, 0 rounding, 0 gap, "
            "0 unrecomputable") in out
    assert ("  mismatch       mean(L_proxy) - mean(L_ref) [excess] / mkqa/acc@100 (delta): printed +1.2, "
            "recomputed -1.2 (off by -2.4; rounding allows ±0.15)") in out
    assert "paper 000 (tdro) table 4: 0 printed derived values checked; 0 mismatch, 0 rounding, 6 gap" in out


def test_format_and_verify_together(capsys):
    assert main(["table", "paper", "peg", "--table", "2", "--format", "markdown", "--verify"]) == 0
    out = capsys.readouterr().out
    table, report = out.split("\npaper 002 (peg) table 2: ")
    assert table.startswith("### Paper 002 (peg), Table 2\n\n")
    assert "| M3E (base) | 66.08 | 17.54 | 76.16 | 77.29 | 59.27<sup>\\[1\\]</sup> |" in table
    assert report.startswith("10 printed derived values checked; 2 mismatch")


def test_latex_to_file(tmp_path, capsys):
    out_file = tmp_path / "tables.tex"
    assert main(["table", "paper", "3", "--format", "latex", "--output", str(out_file)]) == 0
    assert capsys.readouterr().out == ""
    tex = out_file.read_text(encoding="utf-8")
    assert tex.count(r"\begin{table}") == 2 and r"\label{tab:mistral-splade-table2}" in tex
    assert tex.startswith("% Paper 003 (mistral-splade), Table 1\n\\begin{table}")
    assert r"Touché-2020 & \textbf{36.7} & 26.3" in tex     # the best system of the row (columns are systems)


def test_errors_exit_2(tmp_path, capsys, monkeypatch):
    assert main(["table", "paper"]) == 2
    assert "name a paper" in capsys.readouterr().err
    assert main(["table", "paper", "nosuch"]) == 2
    assert "unknown paper 'nosuch'" in capsys.readouterr().err
    assert main(["table", "paper", "000", "--table", "2"]) == 2
    assert "has no transcribed table 2; transcribed: 1, 3, 4, 5" in capsys.readouterr().err

    paper_dir = tmp_path / "900"
    paper_dir.mkdir()
    (paper_dir / "paper.yaml").write_text('schema: 1\nid: "900"\nshort_name: toy\ntitle: Toy\nsource: toy.txt\n')
    (paper_dir / "table1.yaml").write_text("schema: 1\ntable: 1\ncaption: Toy.\ncolumns:\n  - {key: a}\n"
                                           "rows:\n  - {label: R, cells: ['1', '2']}\n")
    monkeypatch.setattr(catalog, "PAPERS_ROOT", tmp_path)
    assert main(["table", "paper", "toy", "--verify"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"harness table: error: {paper_dir / 'table1.yaml'}:7: row 'R' has 2 cells for 1 columns"
