"""Regression checks: tolerance policy, each status, exit codes, expectation files and recording."""
from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest
import yaml
from regression_helpers import CARD, COMMAND, RECORDED, make_result, write_expectations

from harness import regression
from harness.cli import main
from harness.errors import ConfigError, InputError
from harness.regression import (
    ERROR,
    FAIL,
    IMPROVED,
    OK,
    OKISH,
    Expectation,
    check_entry,
    classify,
    load_all,
    load_expectations,
    record,
    tolerance_for,
)

# ---------------------------------------------------------------- the policy

def test_classify_hand_values():
    assert classify(0.679, 0.67904, 0.002) == OK            # 0.6790 == 0.6790
    assert classify(0.6790, 0.678951, 0.002) == OK          # rounds to 0.6790
    assert classify(0.679, 0.6805, 0.002) == OKISH          # +0.0015
    assert classify(0.679, 0.6775, 0.002) == OKISH          # -0.0015
    assert classify(0.679, 0.681, 0.002) == OKISH           # exactly at the tolerance
    assert classify(0.679, 0.6815, 0.002) == IMPROVED       # +0.0025
    assert classify(0.679, 0.676, 0.002) == FAIL            # -0.003
    assert classify(0.679, 0.6795, 0.0) == IMPROVED         # zero tolerance: any change beyond 4 decimals


def test_tolerance_precedence(monkeypatch):
    assert tolerance_for("ndcg@10") == regression.DEFAULT_TOLERANCE == 0.002
    monkeypatch.setitem(regression.METRIC_TOLERANCES, "recall", 0.004)
    monkeypatch.setitem(regression.METRIC_TOLERANCES, "recall@1000", 0.006)
    assert tolerance_for("recall@100") == 0.004
    assert tolerance_for("recall@1000") == 0.006
    assert tolerance_for("recall@1000", {"recall@1000": 0.001}) == 0.001


# ---------------------------------------------------------------- each status, through the CLI

@pytest.fixture()
def store(tmp_path):
    """Result directories under a results root, and expectations giving each status."""
    root = tmp_path / "results"
    make_result(root / "beir" / "ok", **{"ndcg@10": 0.67904, "recall@100": 0.9})
    make_result(root / "beir" / "okish", **{"ndcg@10": 0.6805})
    make_result(root / "beir" / "improved", **{"ndcg@10": 0.6815})
    make_result(root / "beir" / "fail", **{"ndcg@10": 0.676})
    expected = tmp_path / "expected"
    write_expectations(expected, "beir", [
        {"id": "ok", "metrics": {"ndcg@10": 0.679, "recall@100": 0.9}, "card_fingerprint": CARD.fingerprint()},
        {"id": "okish", "metrics": {"ndcg@10": 0.679}},
        {"id": "improved", "metrics": {"ndcg@10": 0.679}},
        {"id": "fail", "metrics": {"ndcg@10": 0.679}},
    ])
    return root, expected


def _check(capsys, root, expected, *extra) -> tuple[int, str]:
    code = main(["check", "--results-root", str(root), "--expected-dir", str(expected), "--reuse", *extra])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("ident,status,code", [("ok", OK, 0), ("okish", OKISH, 0), ("improved", IMPROVED, 1),
                                               ("fail", FAIL, 1)])
def test_each_status_and_exit_code(store, capsys, ident, status, code):
    root, expected = store
    exit_code, out = _check(capsys, root, expected, "--id", ident)
    assert exit_code == code
    assert f"{status:8s} beir/{ident}" in out and "reused" in out
    if status == IMPROVED:
        assert "not accepted" in out and "--replace" in out


def test_improved_needs_explicit_acceptance_and_fail_is_never_accepted(store, capsys):
    root, expected = store
    assert _check(capsys, root, expected, "--id", "improved", "--accept-improved")[0] == 0
    code, out = _check(capsys, root, expected, "--accept-improved")
    assert code == 1 and "summary: 1 OK, 1 OKish, 1 IMPROVED, 1 FAIL" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("beir/")]
    assert ["beir/ok", "ndcg@10", "0.6790", "0.6790", "+0.0000", "0.002", "OK"] in rows
    assert ["beir/ok", "recall@100", "0.9000", "0.9000", "+0.0000", "0.002", "OK"] in rows
    assert ["beir/fail", "ndcg@10", "0.6790", "0.6760", "-0.0030", "0.002", "FAIL"] in rows


def test_empty_store_passes_but_an_unmatched_filter_is_an_error(tmp_path, capsys):
    assert main(["check", "--expected-dir", str(tmp_path)]) == 0
    assert "nothing to check" in capsys.readouterr().out
    assert main(["check", "--expected-dir", str(tmp_path), "--suite", "beir"]) == 2
    assert "no expected-score entries matching suite=beir" in capsys.readouterr().err


def test_changed_protocol_card_fails(tmp_path):
    make_result(tmp_path / "r" / "s" / "x", card=CARD.with_(exclude_self=True), **{"ndcg@10": 0.679})
    entry = Expectation("s", "x", COMMAND, {"ndcg@10": 0.679}, card_fingerprint=CARD.fingerprint(),
                        recorded=RECORDED)
    result = check_entry(entry, results_root=tmp_path / "r", reuse=True)
    assert result.status == FAIL and "protocol card changed" in result.message


def test_missing_metric_is_an_error(tmp_path):
    make_result(tmp_path / "r" / "s" / "x", **{"ndcg@10": 0.5})
    entry = Expectation("s", "x", COMMAND, {"ndcg@10": 0.5, "map": 0.3}, recorded=RECORDED)
    result = check_entry(entry, results_root=tmp_path / "r", reuse=True)
    assert result.status == ERROR and "no 'map'" in result.message


# ---------------------------------------------------------------- running commands

def test_command_placeholders_and_result_subpath(tmp_path):
    seen = []

    def runner(argv):
        seen.append(argv)
        make_result(Path(argv[-1]) / "inner", **{"ndcg@10": 0.5})
        return 0, ""

    entry = Expectation("s", "x", ["eval", "--dataset-dir", "{shared}/scifact", "--out", "{out}"],
                        {"ndcg@10": 0.5}, result="inner", recorded=RECORDED)
    result = check_entry(entry, results_root=tmp_path / "r", shared=tmp_path / "data", runner=runner)
    assert seen == [["eval", "--dataset-dir", str(tmp_path / "data" / "scifact"), "--out", str(tmp_path / "r/s/x")]]
    assert result.status == OK and not result.reused and result.result_dir == tmp_path / "r/s/x/inner"
    # Without --reuse the command runs again even though the result exists.
    check_entry(entry, results_root=tmp_path / "r", shared=tmp_path / "data", runner=runner)
    assert len(seen) == 2


def test_command_that_writes_nothing_is_an_error(tmp_path):
    make_result(tmp_path / "r" / "s" / "x", **{"ndcg@10": 0.5})   # stale result from an earlier run
    entry = Expectation("s", "x", COMMAND, {"ndcg@10": 0.5}, recorded=RECORDED)
    result = check_entry(entry, results_root=tmp_path / "r", runner=lambda argv: (0, "did nothing"))
    assert result.status == ERROR and "did not write" in result.message


def test_failing_real_command_is_an_error(tmp_path):
    entry = Expectation("s", "x", ["eval", "--model", "bm25", "--dataset-dir", "{shared}/no-such-set",
                                   "--out", "{out}"], {"ndcg@10": 0.5}, recorded=RECORDED)
    result = check_entry(entry, results_root=tmp_path / "r", shared=tmp_path)
    assert result.status == ERROR
    assert "exited with 2" in result.message and "no-such-set" in result.message


# ---------------------------------------------------------------- expectation files

def test_expectation_file_errors_name_file_and_line(tmp_path):
    good = {"id": "a", "command": COMMAND, "metrics": {"ndcg@10": 0.5}, "recorded": RECORDED}
    cases = [
        ({**good, "metric": {"x": 1}}, "unknown key(s) metric"),
        ({k: v for k, v in good.items() if k != "recorded"}, "'recorded' must give by, at and commit"),
        ({**good, "command": ["eval", "--out", "x"]}, "must write its result to {out}"),
        ({**good, "metrics": {"ndcg@10": "high"}}, "expected ndcg@10 must be a number"),
        ({**good, "result": "../elsewhere"}, "relative path inside {out}"),
    ]
    for bad, message in cases:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"version": 1, "entries": [good | {"id": "first"}, bad]}, sort_keys=False))
        with pytest.raises(InputError) as err:
            load_expectations(path)
        assert message in str(err.value)
        line = err.value.line
        assert line is not None and path.read_text().splitlines()[line - 1].startswith("- ")
        assert line > 1  # the second entry, not the first
    path.write_text(yaml.safe_dump({"version": 1, "entries": [good, good]}))
    with pytest.raises(InputError, match="duplicate entry id 'a'"):
        load_expectations(path)
    path.write_text("entries: [\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_expectations(path)


def test_project_expectation_files_are_valid():
    folder = regression.expected_dir()
    assert (folder / "README.md").is_file()
    for entry in load_all(folder):
        assert entry.recorded["by"] and entry.recorded["commit"]


# ---------------------------------------------------------------- recording

def _git(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(regression.__file__).parent,
                          check=True).stdout.strip()


def test_record_stores_who_when_commit(tmp_path, capsys):
    result_dir = make_result(tmp_path / "res", **{"ndcg@10": 0.678949, "recall@100": 0.9})
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    code = main(["check", "record", "--suite", "beir", "--id", "scifact-bm25", "--result", str(result_dir),
                 "--command", "harness eval --model bm25 --dataset-dir {shared}/scifact --out {out}",
                 "-m", "ndcg@10", "--expected-dir", str(tmp_path / "exp")])
    assert code == 0 and "recorded beir/scifact-bm25" in capsys.readouterr().out
    (entry,) = load_expectations(tmp_path / "exp" / "beir.yaml")
    assert entry.command == COMMAND
    assert entry.metrics == {"ndcg@10": 0.6789}
    assert entry.card_fingerprint == CARD.fingerprint()
    assert entry.recorded["by"] == f"{_git('config', 'user.name')} <{_git('config', 'user.email')}>"
    assert entry.recorded["commit"].split("+")[0] == _git("rev-parse", "HEAD")
    at = dt.datetime.fromisoformat(entry.recorded["at"])
    assert before <= at <= dt.datetime.now(dt.timezone.utc)
    # The recorded entry checks OK against the same numbers at its {out} directory.
    make_result(tmp_path / "root" / "beir" / "scifact-bm25", **{"ndcg@10": 0.678949})
    assert check_entry(entry, results_root=tmp_path / "root", reuse=True).status == OK


def test_record_refuses_to_overwrite_without_replace(tmp_path):
    first = make_result(tmp_path / "a", **{"ndcg@10": 0.5})
    second = make_result(tmp_path / "b", **{"ndcg@10": 0.6})
    record(suite="s", ident="x", result_dir=first, command=COMMAND, directory=tmp_path / "exp")
    record(suite="s", ident="y", result_dir=first, command=COMMAND, directory=tmp_path / "exp")
    with pytest.raises(ConfigError, match="already recorded; pass --replace"):
        record(suite="s", ident="x", result_dir=second, command=COMMAND, directory=tmp_path / "exp")
    record(suite="s", ident="x", result_dir=second, replace=True, directory=tmp_path / "exp")
    entries = load_expectations(tmp_path / "exp" / "s.yaml")
    assert [e.id for e in entries] == ["x", "y"]                  # position kept
    assert entries[0].metrics == {"ndcg@10": 0.6} and entries[0].command == COMMAND
    with pytest.raises(ConfigError, match=r"no metric map"):
        record(suite="s", ident="z", result_dir=first, command=COMMAND, metrics=["map"], directory=tmp_path / "exp")
    with pytest.raises(ConfigError, match=r"\{out\}"):
        record(suite="s", ident="z", result_dir=first, command=["eval"], directory=tmp_path / "exp")


def test_a_moved_number_prints_how_the_environment_differs_from_the_recording(tmp_path, capsys):
    """The recording keeps the result's library versions; when a number moves the check names what changed."""
    import json

    result_dir = make_result(tmp_path / "res", **{"ndcg@10": 0.6789})
    assert main(["check", "record", "--suite", "beir", "--id", "x", "--result", str(result_dir),
                 "--command", "eval --model bm25 --out {out}", "--expected-dir", str(tmp_path / "exp")]) == 0
    (entry,) = load_expectations(tmp_path / "exp" / "beir.yaml")
    manifest = json.loads((result_dir / "manifest.json").read_text())
    assert entry.environment == manifest["versions"] and "transformers" in entry.environment
    moved = make_result(tmp_path / "root" / "beir" / "x", **{"ndcg@10": 0.6700})
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["versions"]["transformers"] = "99.0.0"
    (moved / "manifest.json").write_text(json.dumps(manifest))
    result = check_entry(entry, results_root=tmp_path / "root", reuse=True)
    assert result.status == FAIL
    assert f"transformers {entry.environment['transformers']} -> 99.0.0" in result.message
    # a number that holds says nothing about the environment; an old entry without one says so
    make_result(tmp_path / "same" / "beir" / "x", **{"ndcg@10": 0.6789})
    assert "environment" not in check_entry(entry, results_root=tmp_path / "same", reuse=True).message
    old = Expectation("beir", "x", COMMAND, {"ndcg@10": 0.6789}, recorded=RECORDED)
    assert "stores none" in check_entry(old, results_root=tmp_path / "root", reuse=True).message
