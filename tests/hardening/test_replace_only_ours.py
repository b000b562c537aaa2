"""Replace only what is entirely ours (issue "Hardening", item 4).

An attacker found: `eval --out DIR --overwrite` deleted a NOTES.md and a figs/ folder a user kept in
a previous result folder; the default eval location was replaced without --overwrite; `data download
--force` deleted any folder at the cache path (and without --force returned it as cached, unverified);
`export -o FILE` silently replaced a file; a killed run's temporary folder was never removed."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.cli import main
from harness.evaluation_result import EvaluationResult
from harness.io import OutputExistsError, atomic_dir, check_replaceable
from harness.io.atomic import RECORD_FILE, WRITER_FILE
from harness.io.claims import claim, claim_path
from harness.io.stale import sweep_stale_temps
from harness.protocol import ProtocolCard
from harness.store import RESULT_FILES, is_result_dir, load_result, write_result

REPO = Path(__file__).resolve().parents[2]
MINI = REPO / "tests" / "ablation" / "fixtures" / "mini.yaml"


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


def _user_files(folder: Path) -> dict[str, bytes]:
    (folder / "NOTES.md").write_text("what I learned from this run\n")
    (folder / "figs").mkdir()
    (folder / "figs" / "ndcg.png").write_bytes(b"\x89PNG...")
    return {name: (folder / name).read_bytes() for name in ("NOTES.md", "figs/ndcg.png")}


def _kept(folder: Path, files: dict[str, bytes]) -> bool:
    return all((folder / name).is_file() and (folder / name).read_bytes() == data for name, data in files.items())


# ---------------------------------------------------------------- 1. a result folder with the user's files

def test_eval_overwrite_keeps_a_result_folder_holding_user_files(tmp_path, capsys):
    data = _dataset(tmp_path / "data")
    out = _result(tmp_path / "prev", 0.123)
    mine = _user_files(out)
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "2 file(s) the harness did not write (NOTES.md, figs/)" in err and "Traceback" not in err
    assert _kept(out, mine) and load_result(out).metrics["ndcg@10"] == pytest.approx(0.123)
    # moved out, the folder is the harness's again and is replaced
    for name in ("NOTES.md", "figs/ndcg.png", "figs"):
        path = out / name
        path.rmdir() if path.is_dir() else path.unlink()
    assert main(["eval", "--model", "bm25", "--dataset-dir", str(data), "--out", str(out), "--overwrite",
                 "-m", "ndcg@10"]) == 0
    assert load_result(out).metrics["ndcg@10"] == pytest.approx(1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "prev"]      # no temporary or .old folders


def test_refusal_names_the_first_foreign_files_and_their_count(tmp_path):
    out = _result(tmp_path / "r")
    for i in range(7):
        (out / f"note{i}.txt").write_text("mine")
    with pytest.raises(OutputExistsError) as info:
        _result(out, 0.9)
    message = str(info.value)
    assert "7 file(s)" in message and "note0.txt, note1.txt, note2.txt, note3.txt, note4.txt, ..." in message
    assert "note5.txt" not in message and len(list(out.glob("note*.txt"))) == 7


def test_a_file_added_inside_a_harness_subfolder_is_foreign(tmp_path):
    folder = tmp_path / "report"
    with atomic_dir(folder, is_ours=lambda p: (p / "index.html").is_file()) as tmp:
        (tmp / "index.html").write_text("<html>")
        (tmp / "assets").mkdir()
        (tmp / "assets" / "a.png").write_bytes(b"png")
    record = json.loads((folder / RECORD_FILE).read_text())
    assert record["files"] == ["assets/a.png", "index.html"] and record["dirs"] == ["assets"]
    (folder / "assets" / "mine.svg").write_text("<svg/>")
    with pytest.raises(OutputExistsError, match=r"1 file\(s\) the harness did not write \(assets/mine.svg\)"):
        with atomic_dir(folder, is_ours=lambda p: (p / "index.html").is_file()):
            raise AssertionError("refused before the body runs")
    assert (folder / "assets" / "mine.svg").exists()


def test_a_result_from_before_records_is_judged_by_its_file_names(tmp_path):
    out = _result(tmp_path / "old")
    (out / RECORD_FILE).unlink()                    # as an older version wrote it
    check_replaceable(out, is_result_dir, "a harness result", owned=RESULT_FILES)
    (out / "NOTES.md").write_text("mine")
    with pytest.raises(OutputExistsError, match=r"did not write \(NOTES.md\)"):
        check_replaceable(out, is_result_dir, "a harness result", owned=RESULT_FILES)
    # an output whose writer gives no names cannot be told apart from a user's folder: refused
    model = tmp_path / "st-model"
    model.mkdir()
    (model / "modules.json").write_text("[]")
    with pytest.raises(OutputExistsError, match="no record of the files the harness wrote"):
        check_replaceable(model, lambda p: (p / "modules.json").is_file(), "an exported model folder")


def test_export_sparse_overwrite_keeps_a_model_folder_it_did_not_write(tmp_path, capsys):
    """A downloaded sentence-transformers model has the marker an export has (modules.json): --overwrite
    deleted it before; now a folder without the harness's record is refused before any loading."""
    model = tmp_path / "downloaded-model"
    model.mkdir()
    (model / "modules.json").write_text("[]")
    (model / "model.safetensors").write_bytes(b"weights")
    assert main(["export-sparse", "--model", "splade-tiny", "--sentence-transformers", str(model),
                 "--overwrite"]) == 2
    assert "no record of the files the harness wrote" in capsys.readouterr().err
    assert (model / "model.safetensors").read_bytes() == b"weights"


# ---------------------------------------------------------------- 2. the default eval location

def test_default_eval_location_is_replaced_only_with_overwrite(tmp_path, capsys):
    data = _dataset(tmp_path / "scifact")
    argv = ["eval", "--model", "bm25", "--dataset-dir", str(data), "--results-root", str(tmp_path / "results"),
            "-m", "ndcg@10"]
    assert main(argv) == 0
    out = tmp_path / "results" / "beir" / "scifact" / "bm25"
    first = (out / "manifest.json").read_bytes()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out} already holds a harness result; pass --overwrite" in err and "--out DIR" in err
    assert (out / "manifest.json").read_bytes() == first
    assert main([*argv, "--overwrite"]) == 0
    assert is_result_dir(out)


# ---------------------------------------------------------------- 3. data download --force

def _beir_zip(www: Path, name: str) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(f"{name}/corpus.jsonl", '{"_id": "d1", "title": "", "text": "apples"}\n')
        zf.writestr(f"{name}/queries.jsonl", '{"_id": "q1", "text": "apples"}\n')
        zf.writestr(f"{name}/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    www.mkdir(exist_ok=True)
    (www / f"{name}.zip").write_bytes(buffer.getvalue())


def test_download_force_replaces_only_a_harness_download(tmp_path, capsys):
    www, cache = tmp_path / "www", tmp_path / "cache"
    _beir_zip(www, "mini")
    argv = ["data", "download", "--suite", "beir", "--dataset", "mini", "--cache", str(cache),
            "--base-url", www.as_uri()]
    folder = cache / "beir" / "mini"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("my own copy\n")
    for extra in ([], ["--force"]):       # not returned as cached, and not deleted
        assert main([*argv, *extra]) == 2
        captured = capsys.readouterr()
        assert f"{folder} exists but is not a download of beir/mini" in captured.err and captured.out == ""
        assert (folder / "notes.txt").read_text() == "my own copy\n"
    (folder / "notes.txt").unlink()
    folder.rmdir()
    assert main(argv) == 0 and capsys.readouterr().out.strip() == str(folder)
    assert json.loads((folder / RECORD_FILE).read_text())["download"] == "beir/mini"
    assert main(argv) == 0                 # cached
    assert main([*argv, "--force"]) == 0   # ours and nothing else: downloaded again
    (folder / "notes.txt").write_text("added later\n")
    assert main([*argv, "--force"]) == 2
    assert "did not write (notes.txt)" in capsys.readouterr().err
    assert (folder / "notes.txt").read_text() == "added later\n" and (folder / "corpus.jsonl").is_file()


# ---------------------------------------------------------------- 4. CLI file outputs

def _compare_inputs(tmp_path: Path) -> list[str]:
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 2.0 a\nq2 Q0 d1 1 2.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 2.0 b\nq2 Q0 d2 1 2.0 b\n")
    return ["compare", "--run", str(tmp_path / "a.trec"), "--run", str(tmp_path / "b.trec"), "--qrels",
            str(tmp_path / "qrels.txt"), "-m", "ndcg@10", "--output"]


@pytest.mark.parametrize("command", ["export", "table paper", "compare"])
def test_file_outputs_refuse_an_existing_file_without_overwrite(tmp_path, capsys, command):
    target = tmp_path / "mine.csv"
    target.write_text("do not replace me\n")
    if command == "export":
        _result(tmp_path / "results" / "r")
        argv = ["export", "results", str(tmp_path / "results"), "-o"]
    elif command == "table paper":
        argv = ["table", "paper", "3", "--format", "latex", "--output"]
    else:
        argv = _compare_inputs(tmp_path)
    assert main([*argv, str(target)]) == 2
    assert f"{target} exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert target.read_text() == "do not replace me\n"
    assert main([*argv, str(target), "--overwrite"]) == 0
    assert target.read_text() != "do not replace me\n"


def test_table_suite_refuses_existing_output_and_figure_before_rendering(tmp_path, capsys):
    (tmp_path / "plot.pdf").write_bytes(b"%PDF mine")
    assert main(["table", "suite", str(MINI), "--results-root", str(tmp_path / "none"), "--figure",
                 str(tmp_path / "plot")]) == 2
    assert f"{tmp_path / 'plot.pdf'} exists; pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "plot.pdf").read_bytes() == b"%PDF mine"


# ---------------------------------------------------------------- 5. a killed writer's temporary folder

_WRITER = """
import os, signal, sys, time
from pathlib import Path
from harness.io import atomic_dir
with atomic_dir(sys.argv[1]) as tmp:
    (Path(tmp) / "run.trec.gz").write_bytes(b"x" * 1000)
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    print("filling", flush=True)
    time.sleep(600)
"""


def _writer(target: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(target), mode], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)


def _temps(parent: Path, name: str) -> list[Path]:
    return sorted(parent.glob(f".{name}.*.tmp"))


def _bm25_suite():
    from harness.ablation.spec import parse_suite

    raw = yaml.safe_load(MINI.read_text())
    raw["variants"].append({"id": "bm25", "method": "none", "model": "bm25"})
    return parse_suite(raw, MINI)


def test_resume_removes_a_killed_writers_temp_folder_but_not_a_live_ones(tmp_path):
    from harness.ablation.runner import SuiteRun, run_suite

    suite = _bm25_suite()
    runner = SuiteRun(suite, "tiny", tmp_path, progress=False)
    cell = next(c for c in runner.eval_cells if c.train.variant.id == "bm25" and c.benchmark.id == "latin_qa")
    out = runner.eval_dir(cell)
    killed = _writer(out, "die")                          # kill -9 while it fills the cell's result folder
    assert killed.wait(timeout=120) == -9
    [left] = _temps(out.parent, out.name)
    assert (left / "run.trec.gz").is_file()
    live_target = out.parent / "0123456789abcdef"         # another writer, still at work
    live = _writer(live_target, "live")
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "filling"
        [filling] = _temps(out.parent, live_target.name)
        outcome = run_suite(suite, "tiny", tmp_path, only=["bm25"], progress=False)
        assert not outcome.complete and is_result_dir(out)
        assert not left.exists() and _temps(out.parent, out.name) == []
        assert (filling / "run.trec.gz").is_file()      # a live writer's folder is left alone
    finally:
        live.kill()
        live.wait()
    assert sweep_stale_temps(out.parent) == [filling] and not filling.exists()


def _fake_temp(parent: Path, name: str, writer: dict, old: bool = False) -> Path:
    temp = parent / (f".{name}.old-abcd1234" if old else f".{name}.abcd1234.tmp")
    (temp / "previous" if old else temp).mkdir(parents=True)
    (temp / WRITER_FILE).write_text(json.dumps(writer))
    return temp


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_temp_folder_from_another_host_goes_only_when_its_claim_is_free(tmp_path):
    temp = _fake_temp(tmp_path, "cellkey", {"host": "another-host", "pid": 1})
    assert sweep_stale_temps(tmp_path) == [] and temp.exists()      # no claim: nothing tells it is dead
    with claim(tmp_path / "cellkey", "test"):                       # claimed (its writer at work): kept
        assert sweep_stale_temps(tmp_path) == [] and temp.exists()
    assert claim_path(tmp_path / "cellkey").exists()
    assert sweep_stale_temps(tmp_path) == [temp] and not temp.exists()


def test_a_writer_killed_between_the_renames_gets_its_previous_folder_back(tmp_path):
    here = {"host": socket.gethostname(), "pid": _dead_pid()}
    old = _fake_temp(tmp_path, "result", here, old=True)
    (old / "previous" / "metrics.json").write_text("{}")
    unrelated = tmp_path / ".notes.abcd1234.tmp"                    # no writer record: not ours, never touched
    unrelated.mkdir()
    alive = _fake_temp(tmp_path, "other", {"host": socket.gethostname(), "pid": os.getpid()})
    assert sweep_stale_temps(tmp_path) == [old]
    assert (tmp_path / "result" / "metrics.json").read_text() == "{}" and not old.exists()
    assert unrelated.exists() and alive.exists()
