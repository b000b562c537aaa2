"""``harness compare`` as a person at a terminal sees it: a readable table by default (JSON when piped or
with --format json), p / adjusted p / CI with --details, no legend for a marker nobody carries, no HTML
escapes in plain text, and hints in the CLI's own syntax."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from harness.cli import main
from harness.data import Qrels, Run, write_qrels, write_run


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _files(tmp_path, *, gain: float, n: int = 40, drop: int = 0):
    """Qrels with one relevant document per query; the base run ranks it 3rd, the other run 1st for a share
    ``gain`` of the queries (3rd otherwise)."""
    rng = np.random.default_rng(0)
    queries = [f"q{i}" for i in range(n)]
    qrels = Qrels.from_dict({q: {f"{q}-rel": 1} for q in queries})
    better = set(rng.choice(n, int(gain * n), replace=False).tolist())

    def run(name: str, lifted: set[int], skip: int = 0) -> Run:
        rows = {}
        for i, q in enumerate(queries[skip:], start=skip):
            rank = 1 if i in lifted else 3
            docs = [f"{q}-x{j}" for j in range(4)]
            docs.insert(rank - 1, f"{q}-rel")
            rows[q] = {d: float(10 - k) for k, d in enumerate(docs)}
        return Run.from_dict(rows, name=name)

    paths = {"qrels": tmp_path / "qrels.txt", "base": tmp_path / "base.trec", "new": tmp_path / "new <v2>.trec"}
    write_qrels(qrels, paths["qrels"])
    write_run(run("base", set()), paths["base"])
    write_run(run("new", better, skip=drop), paths["new"])
    return paths


def _args(paths, *extra: str) -> list[str]:
    return ["compare", "--qrels", str(paths["qrels"]), "--run", str(paths["base"]), "--run", str(paths["new"]),
            "-m", "mrr@10", *extra]


def test_a_terminal_gets_an_aligned_table_and_a_pipe_gets_json(tmp_path, capsys, monkeypatch):
    paths = _files(tmp_path, gain=0.5)
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    assert main(_args(paths)) == 0
    text = terminal.getvalue()
    assert not text.lstrip().startswith("{")
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("System "))
    assert header.split() == ["System", "MRR@10"]
    rows = {line.split()[0]: line for line in lines if line.startswith(("base", "new"))}
    # base: every query's relevant document 3rd (MRR 1/3); new: half of them 1st (MRR 2/3): 33.3 and 66.7 (+33.3)
    assert rows["base"].split()[1] == "33.3" and rows["new"].startswith("new <v2>")
    assert "66.7†" in rows["new"] and "(+33.3)" in rows["new"]
    assert "&lt;" not in text and "† significantly better than base" in text
    monkeypatch.undo()
    assert main(_args(paths)) == 0                              # captured (not a terminal): JSON
    assert json.loads(capsys.readouterr().out)["comparisons"][0]["system"] == "new <v2>"


def test_details_show_p_adjusted_p_and_ci_equal_to_the_json(tmp_path, capsys):
    paths = _files(tmp_path, gain=0.5)
    assert main(_args(paths, "--format", "json", "-m", "ndcg@10")) == 0
    comparisons = json.loads(capsys.readouterr().out)["comparisons"]
    assert main(_args(paths, "--format", "text", "--details", "-m", "ndcg@10")) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("System") and " p " in line + " ")
    assert "Holm p" in header and "95% CI of Δ" in header and "W/T/L" in header
    for c in comparisons:
        row = next(line for line in text.splitlines()[text.splitlines().index(header):]
                   if line.startswith("new") and c["metric"].split("@")[0].upper().replace("NDCG", "nDCG") in line)
        assert f"{c['p_value']:.3g}" in row and f"{c['p_adjusted']:.3g}" in row
        assert f"[+{100 * c['ci_low']:.1f}, +{100 * c['ci_high']:.1f}]" in row
        assert f"{c['wins']}/{c['ties']}/{c['losses']}" in row


def test_no_legend_for_a_marker_no_cell_carries(tmp_path, capsys):
    paths = _files(tmp_path, gain=0.05)          # two of 40 queries better: not significant
    assert main(_args(paths, "--format", "markdown")) == 0
    out = capsys.readouterr().out
    assert "†" not in out and "significantly" not in out
    paths = _files(tmp_path, gain=0.5)
    assert main(_args(paths, "--format", "markdown")) == 0
    assert "<sup>†</sup> significantly better than base" in capsys.readouterr().out


def test_the_missing_query_hint_uses_the_cli_syntax(tmp_path, capsys):
    paths = _files(tmp_path, gain=0.5, drop=3)
    assert main(_args(paths)) == 2
    err = capsys.readouterr().err
    assert "3 queries scored for base but not for new <v2>" in err and "--missing zero" in err


@pytest.mark.parametrize("flag", ["--name"])
def test_the_name_help_says_what_the_default_is(flag, capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "for stored results, the model each was evaluated with" in help_text
