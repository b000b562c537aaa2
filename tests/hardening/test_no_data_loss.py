"""Never delete or replace what the harness did not write (issue: `--out` wiped unrelated folders,
`harness check` removed any directory an expected-score id pointed at)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.cli import main
from harness.errors import ConfigError, InputError
from harness.evaluation_result import EvaluationResult
from harness.io import OutputExistsError, atomic_dir, atomic_write_text
from harness.io.paths import check_component, child_of
from harness.protocol import ProtocolCard
from harness.regression import Expectation, check_entry, load_expectations
from harness.store import is_result_dir, load_result, write_result

RECORDED = {"by": "Test <t@example.org>", "at": "2025-01-01T00:00:00+00:00", "commit": "0" * 40}


def _victim(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "thesis.tex").write_text("years of work\n")
    (path / "sub").mkdir()
    (path / "sub" / "data.csv").write_text("1,2\n")
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _result(directory: Path, value: float = 0.5, **kw) -> Path:
    evaluation = EvaluationResult(["q1", "q2"], {"ndcg@10": np.array([value - 0.1, value + 0.1])})
    return write_result(directory, run=None, evaluation=evaluation, card=ProtocolCard(dataset="d"), **kw)


def _dataset(root: Path) -> Path:
    """A two-document BEIR-layout folder."""
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "apples are red"}\n'
                                       '{"_id": "d2", "title": "", "text": "the sky is blue"}\n')
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "red apples"}\n{"_id": "q2", "text": "blue sky"}\n')
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return root


# ---------------------------------------------------------------- atomic_dir and the store

def test_atomic_dir_refuses_unrelated_folder_before_the_body_runs(tmp_path):
    victim = _victim(tmp_path / "results")
    before = _snapshot(victim)
    ran = []
    with pytest.raises(OutputExistsError, match="is not a harness result; refusing"):
        with atomic_dir(victim, is_ours=is_result_dir, what="a harness result"):
            ran.append(True)
    assert not ran and _snapshot(victim) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]     # no temporary or .old leftovers


def test_atomic_dir_without_ownership_rule_never_replaces(tmp_path):
    victim = _victim(tmp_path / "x")
    with pytest.raises(OutputExistsError):
        with atomic_dir(victim):
            pass
    assert (victim / "thesis.tex").read_text() == "years of work\n"


def test_file_at_output_path_survives(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    with pytest.raises(OutputExistsError, match="not a directory"):
        _result(target)
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]   # nothing hidden as .notes.txt.old-*


def test_symlink_at_output_path_is_not_followed(tmp_path):
    victim = _victim(tmp_path / "elsewhere")
    link = tmp_path / "out"
    link.symlink_to(victim)
    with pytest.raises(OutputExistsError):
        _result(link)
    assert (victim / "thesis.tex").exists() and link.is_symlink()


def test_previous_result_and_empty_folder_are_replaced(tmp_path):
    out = _result(tmp_path / "r", 0.5)
    _result(out, 0.7)
    assert load_result(out).metrics["ndcg@10"] == pytest.approx(0.7)
    with pytest.raises(OutputExistsError, match="pass --overwrite"):
        _result(out, 0.9, overwrite=False)
    assert load_result(out).metrics["ndcg@10"] == pytest.approx(0.7)
    empty = tmp_path / "empty"
    empty.mkdir()
    _result(empty, 0.3)
    assert is_result_dir(empty)


def test_a_folder_with_foreign_manifest_is_not_ours(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    for name in ("per_query.tsv.gz", "metrics.json"):
        (fake / name).write_text("x")
    (fake / "manifest.json").write_text('{"name": "someone else\'s tool"}')
    assert not is_result_dir(fake)
    with pytest.raises(OutputExistsError):
        _result(fake)


def test_atomic_write_refuses_a_directory(tmp_path):
    victim = _victim(tmp_path / "table.md")
    with pytest.raises(OutputExistsError, match="is a directory"):
        atomic_write_text(victim, "| a |\n")
    assert (victim / "thesis.tex").exists()


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_outputs_honour_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        out = _result(tmp_path / "r")
        atomic_write_text(tmp_path / "t.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((out / "metrics.json").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "t.md").stat().st_mode) == 0o666 & ~mask


# ---------------------------------------------------------------- the CLI

def test_eval_out_refuses_unrelated_folder_and_file_before_compute(tmp_path, capsys):
    data = _dataset(tmp_path / "data")
    victim = _victim(tmp_path / "results")
    before = _snapshot(victim)
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(victim)]) == 2
    err = capsys.readouterr().err
    assert f"{victim} exists and is not a harness result" in err and "Traceback" not in err
    assert _snapshot(victim) == before
    afile = tmp_path / "file.txt"
    afile.write_text("keep\n")
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(afile)]) == 2
    assert afile.read_text() == "keep\n" and "not a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "file.txt", "results"]


def test_eval_overwrite_replaces_only_a_previous_result(tmp_path, capsys):
    data = _dataset(tmp_path / "data")
    out = _result(tmp_path / "prev", 0.123)
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert load_result(out).metrics["ndcg@10"] == pytest.approx(0.123)
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(out), "--overwrite",
                 "-m", "ndcg@10"]) == 0
    assert load_result(out).metrics["ndcg@10"] == pytest.approx(1.0)        # both queries found their document
    victim = _victim(tmp_path / "results")
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(victim), "--overwrite"]) == 2
    assert (victim / "thesis.tex").exists()


# ---------------------------------------------------------------- harness check

@pytest.mark.parametrize("ident", ["..", "../victim", "/tmp/abs", "a/../../b", "x/y", ""])
def test_expected_score_ids_must_stay_inside_the_root(tmp_path, ident):
    path = tmp_path / "expected" / "beir.yaml"
    path.parent.mkdir()
    entry = {"id": ident, "command": ["eval", "--out", "{out}"], "metrics": {"ndcg@10": 0.5}, "recorded": RECORDED}
    path.write_text(yaml.safe_dump({"version": 1, "entries": [entry]}))
    with pytest.raises(InputError) as info:
        load_expectations(path)
    assert info.value.path == str(path) and info.value.line == 2   # the entry's line


def test_expected_score_suite_must_stay_inside_the_root(tmp_path):
    path = tmp_path / "beir.yaml"
    entry = {"id": "ok", "command": ["eval", "--out", "{out}"], "metrics": {"ndcg@10": 0.5}, "recorded": RECORDED}
    path.write_text(yaml.safe_dump({"version": 1, "suite": "../../victim", "entries": [entry]}))
    with pytest.raises(InputError, match="suite '../../victim' cannot be used as a folder name"):
        load_expectations(path)


def _never_run(argv):
    raise AssertionError("the command must not run")


def test_check_entry_never_removes_outside_the_root(tmp_path):
    victim = _victim(tmp_path / "victim")
    before = _snapshot(victim)
    root = tmp_path / "root"
    root.mkdir()
    for suite, ident in (("..", "victim"), ("s", "../../victim"), ("s", str(victim))):
        entry = Expectation(suite=suite, id=ident, command=["eval", "--out", "{out}"], metrics={"ndcg@10": 0.5})
        with pytest.raises(ConfigError, match="cannot be used as a folder name"):
            check_entry(entry, results_root=root, runner=_never_run)
    assert _snapshot(victim) == before


def test_check_entry_refuses_foreign_files_and_links_at_its_output(tmp_path):
    root = tmp_path / "root"
    victim = _victim(root / "beir" / "scifact-bm25")
    entry = Expectation(suite="beir", id="scifact-bm25", command=["eval", "--out", "{out}"], metrics={"ndcg@10": .5})
    with pytest.raises(OutputExistsError, match="did not write"):
        check_entry(entry, results_root=root, runner=_never_run)
    assert (victim / "thesis.tex").exists()
    outside = _victim(tmp_path / "outside")
    (root / "beir" / "linked").symlink_to(outside)
    linked = Expectation(suite="beir", id="linked", command=["eval", "--out", "{out}"], metrics={"ndcg@10": .5})
    with pytest.raises(ConfigError, match="outside"):
        check_entry(linked, results_root=root, runner=_never_run)
    assert (outside / "thesis.tex").exists()


def test_check_entry_replaces_its_own_previous_output(tmp_path):
    root = tmp_path / "root"
    runs = []

    def runner(argv):
        out = Path(argv[argv.index("--out") + 1])
        runs.append(out)
        _result(out / "inner", 0.5)   # a suite-like command: the result is below {out}
        (out / "cache.bin").write_bytes(b"x")
        return 0, ""

    entry = Expectation(suite="s", id="e", command=["run", "--out", "{out}"], metrics={"ndcg@10": 0.5},
                        result="inner")
    assert check_entry(entry, results_root=root, runner=runner).status == "OK"
    assert check_entry(entry, results_root=root, runner=runner).status == "OK"   # its own folder: replaced
    assert len(runs) == 2


def test_path_components():
    assert check_component("miracl-te-bm25", "id") == "miracl-te-bm25"
    for bad in ("..", ".", "a/b", "/a", "", "a\\b", "a b", None, 3):
        with pytest.raises(ConfigError):
            check_component(bad, "id")
    assert child_of("root", "a", "b") == Path("root/a/b")


def test_training_refuses_an_unrelated_non_empty_folder(tmp_path):
    from trainutil import make_data, make_tiny_bert

    from harness.method import get_method

    victim = _victim(tmp_path / "ckpt")
    before = _snapshot(victim)
    model_dir = make_tiny_bert(tmp_path / "tiny", hidden=32)
    method = get_method("uniform")
    spec = method.spec("tiny", model=str(model_dir), steps=2, batch_size=4)
    with pytest.raises(OutputExistsError, match="holds no training run of the harness"):
        method.train(spec, make_data(n_sources=2, rows=4), victim)
    assert _snapshot(victim) == before
    ckpt = method.train(spec, make_data(n_sources=2, rows=4), tmp_path / "fresh")   # a new folder trains
    assert ckpt.step == 2
