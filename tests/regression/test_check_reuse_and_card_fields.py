"""``harness check``: entries with the identical command run it once (the suite is not retrained per table), and a
changed protocol card names the fields that changed with their recorded and current values."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml
from regression_helpers import CARD, RECORDED, make_result, write_expectations

from harness.cli import main
from harness.regression import ERROR, FAIL, OK, Expectation, check_entries, check_entry, record

SUITE_RUN = ["run", "tdro", "--scale", "tiny", "--results-root", "{out}"]


def test_identical_commands_run_once_and_each_entry_reads_its_own_result(tmp_path):
    calls = []

    def runner(argv):
        calls.append(argv)
        out = Path(argv[argv.index("--results-root") + 1])
        make_result(out / "cells" / "a", **{"ndcg@10": 0.5})
        make_result(out / "cells" / "b", **{"ndcg@10": 0.7})
        return 0, ""

    entries = [Expectation("s", "table-a", SUITE_RUN, {"ndcg@10": 0.5}, result="cells/a", recorded=RECORDED),
               Expectation("s", "table-b", SUITE_RUN, {"ndcg@10": 0.7}, result="cells/b", recorded=RECORDED),
               Expectation("s", "other", SUITE_RUN[:-1] + ["{out}", "--seed", "1"], {"ndcg@10": 0.5},
                           result="cells/a", recorded=RECORDED)]
    first, second, third = check_entries(entries, results_root=tmp_path / "r", runner=runner)
    assert len(calls) == 2                                   # table-a and table-b share one run; 'other' differs
    assert first.status == second.status == third.status == OK
    assert not first.reused and second.reused and not third.reused
    assert second.result_dir == tmp_path / "r" / "s" / "table-a" / "cells" / "b"
    assert "same command as s/table-a" in second.message


def test_a_shared_command_that_failed_is_not_run_twice_nor_read(tmp_path):
    calls = []

    def runner(argv):
        calls.append(argv)
        return 2, "error: boom"

    entries = [Expectation("s", "a", SUITE_RUN, {"ndcg@10": 0.5}, recorded=RECORDED),
               Expectation("s", "b", SUITE_RUN, {"ndcg@10": 0.5}, recorded=RECORDED)]
    results = check_entries(entries, results_root=tmp_path / "r", runner=runner)
    assert [r.status for r in results] == [ERROR, ERROR] and len(calls) == 2


def test_a_changed_card_names_the_changed_fields(tmp_path):
    recorded_dir = make_result(tmp_path / "recorded", **{"ndcg@10": 0.679})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=T", "-c", "user.email=t@e.org", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        entry = record(suite="s", ident="x", result_dir=recorded_dir, command=["eval", "--out", "{out}"],
                       directory=tmp_path / "expected")
    finally:
        os.chdir(cwd)
    stored = yaml.safe_load((tmp_path / "expected" / "s.yaml").read_text())["entries"][0]
    assert stored["card"]["dataset"] == "scifact" and stored["card"]["exclude_self"] is False
    changed = CARD.with_(exclude_self=True, top_k=100)
    make_result(tmp_path / "r" / "s" / "x", card=changed, **{"ndcg@10": 0.679})
    reloaded = Expectation(**{**entry.__dict__, "card": stored["card"]})
    result = check_entry(reloaded, results_root=tmp_path / "r", reuse=True)
    assert result.status == FAIL
    assert "exclude_self: False -> True" in result.message and "top_k: 1000 -> 100" in result.message
    assert "dataset" not in result.message.split(":", 1)[1]             # unchanged fields are not listed


def test_an_entry_recorded_without_card_fields_says_how_to_get_them(tmp_path, capsys):
    make_result(tmp_path / "r" / "s" / "x", card=CARD.with_(exclude_self=True), **{"ndcg@10": 0.5})
    write_expectations(tmp_path / "expected", "s", [{"id": "x", "metrics": {"ndcg@10": 0.5},
                                                      "card_fingerprint": CARD.fingerprint()}])
    assert main(["check", "--expected-dir", str(tmp_path / "expected"), "--results-root", str(tmp_path / "r"),
                 "--reuse"]) == 1
    out = capsys.readouterr().out
    assert "protocol card changed" in out and "re-record the entry" in out
