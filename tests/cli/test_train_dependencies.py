"""``harness train`` for every method that runs stages before its own training (dependency runs such as
tDRO's reference and stage 1 or the COCO pretraining of the COCO variants, mined hard negatives), on the
default synthetic world with its tiny BERT: the command trains into a new folder (the dependency runs in
``<out>/deps/``, the method's own run beside them), the model evaluates with ``harness eval``, and rerunning
the command after it stopped between the stages resumes without retraining any stage.

The methods come from the registry: every method whose :meth:`~harness.method.Method.stages` is not empty
under its tiny preset, with the options below that switch optional stages on (``coco``) or keep them small.
A new method with stages is covered without changes here; one whose stages hang on an option this file
does not know is not (add the option to ``STAGE_OPTIONS``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.io import OutputExistsError
from harness.method import get_method, list_methods
from harness.method.stages import flatten_stages
from harness.train.stages import Stage

pytestmark = pytest.mark.usefixtures("one_thread")

DOMAINS = ["latin_qa", "cjk_qa"]
EVAL_SET = "latin_qa"
ROWS, STEPS, BATCH = 16, 2, 8


@pytest.fixture(scope="module")
def world() -> tuple[Path, str]:
    from harness.ablation.resolve import resolve_model, synthetic_world

    return synthetic_world("default"), resolve_model("synthetic:default/tiny-bert")


def stage_options(world_dir: Path, model: str) -> dict[str, Any]:
    """Method options (by name: a method gets those among its own options) that switch optional stages on
    and keep every stage tiny."""
    return {
        # the COCO variants: COCO pretraining on one target corpus first
        "coco": {"preset": "tiny", "train": {"steps": STEPS, "batch_size": BATCH},
                 "options": {"corpora": [str(world_dir / "eval" / EVAL_SET)]}},
        # query clusters (iDRO, GroupDRO): few and fast; mined: 2 negatives
        "k": 2, "niter": 5, "nredo": 1,
        # mined: candidates from the tiny model (not MiniLM) over a shallow pool
        "retrievers": [model], "depth": 8,
    }


def tiny_spec(name: str, world_dir: Path, model: str):
    method = get_method(name)
    base = method.spec("tiny")
    options = {k: v for k, v in stage_options(world_dir, model).items() if k in method.default_options}
    return method.spec("tiny", model=model, steps=STEPS, batch_size=BATCH,
                       method_options={**dict(base.method_options), **options})


def staged_methods() -> list[str]:
    """The registered methods that run stages before their own training (no world needed to plan them)."""
    return [name for name in list_methods()
            if get_method(name).stages(tiny_spec(name, Path("world"), "tiny-model"))]


STAGED = staged_methods()


def test_the_staged_methods_include_tdro_mined_and_the_coco_variants():
    assert STAGED and {"tdro", "mined", "idro", "groupdro"} <= set(STAGED)


def _command(name: str, world_dir: Path, model: str, out: Path) -> list[str]:
    options = dict(tiny_spec(name, world_dir, model).method_options)
    return ["train", "--method", name, "--data", str(world_dir / "train"), "--domains", ",".join(DOMAINS),
            "--max-rows", str(ROWS), "--model", model, "--scale", "tiny", "--steps", str(STEPS),
            "--batch-size", str(BATCH), "--set", f"method_options={json.dumps(options)}", "--out", str(out)]


def _files(*roots: Path) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file under ``roots`` but claim files (rewritten by every claim)."""
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for root in roots if root.is_dir()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".claim")}


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _train(argv: list[str], capsys) -> None:
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 0, captured.err


@pytest.mark.parametrize("name", STAGED)
def test_train_with_dependencies_into_a_new_folder_evaluates_and_resumes(name, world, tmp_path, monkeypatch,
                                                                         capsys):
    from harness.data.collections import load_training_data

    world_dir, model = world
    cache = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE", str(cache))         # the mined pools and embeddings of this test only
    out = tmp_path / "NEW"
    argv = _command(name, world_dir, model, out)
    _train(argv, capsys)
    assert (out / "done.json").is_file() and (out / "final").is_dir()

    # the dependency runs are the planned ones (by content key), finished, in <out>/deps
    data = load_training_data([{"path": str(world_dir / "train"), "max_rows": ROWS, "domains": DOMAINS}])
    spec = tiny_spec(name, world_dir, model)
    method = get_method(name)
    planned = {p.key for p in flatten_stages(method, spec, data.fingerprint()) if isinstance(p.stage, Stage)}
    deps = out / "deps"
    runs = {p.name for p in deps.iterdir() if p.is_dir()} if deps.is_dir() else set()
    assert runs == planned and all((deps / key / "done.json").is_file() for key in runs)
    assert {"run.json", "train_log.jsonl", "done.json"} <= {p.name for p in out.iterdir()}   # its own run, beside

    # stopped after the dependency stages (with two or more, before the last one: only its claim file is
    # left): the same command trains what is missing into the same folder and reuses every finished stage
    for entry in out.iterdir():
        if entry.name != "deps":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    if len(runs) > 1:
        shutil.rmtree(max((deps / key for key in runs), key=lambda d: (d / "done.json").stat().st_mtime_ns))
    stages = _files(deps, cache)
    assert stages, "no stage left files (dependency runs or mined pools)"
    _train(argv, capsys)
    assert _files(deps, cache).items() >= stages.items()                  # no finished stage's file rewritten
    assert ({p.name for p in deps.iterdir() if p.is_dir()} if deps.is_dir() else set()) == runs
    assert all((deps / key / "done.json").is_file() for key in runs)
    assert (out / "done.json").is_file()
    finished = _files(out)
    _train(argv, capsys)                                                     # finished: nothing is redone
    assert _files(out) == finished

    code = main(["eval", "--model", str(out), "--suite", "synthetic", "--dataset-dir",
                 str(world_dir / "eval" / EVAL_SET), "--out", str(tmp_path / "eval"), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    ndcg = json.loads(captured.out)["metrics"]["ndcg@10"]
    assert isinstance(ndcg, float) and 0.0 < ndcg <= 1.0


def test_a_folder_that_is_not_this_runs_is_refused_before_any_stage(world, tmp_path, monkeypatch, capsys):
    world_dir, model = world
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    name = "tdro"
    user = tmp_path / "user"
    (user / "deps").mkdir(parents=True)
    (user / "deps" / "notes.txt").write_text("mine\n")
    other = tmp_path / "other"                        # another configuration's dependency run
    (other / "deps" / "0123456789abcdef").mkdir(parents=True)
    (other / "deps" / "0123456789abcdef" / "run.json").write_text("{}\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "thesis.tex").write_text("x\n")
    for folder, message in ((user, "deps holds notes.txt, which is not a dependency run of this training run"),
                            (other, "deps holds 0123456789abcdef, which is not a dependency run"),
                            (plain, "is not empty and holds no training run of the harness")):
        before = (_tree(folder), _files(folder))
        assert main(_command(name, world_dir, model, folder)) == 2
        assert message in capsys.readouterr().err
        assert (_tree(folder), _files(folder)) == before
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("done.json"))

    # the method API refuses a user's folder before its first dependency writes anything there
    from harness.data.collections import load_training_data

    data = load_training_data([{"path": str(world_dir / "train"), "max_rows": ROWS, "domains": DOMAINS}])
    before = (_tree(tmp_path), _files(plain))
    with pytest.raises(OutputExistsError, match="holds no training run of the harness"):
        get_method(name).train(tiny_spec(name, world_dir, model), data, plain)
    assert (_tree(tmp_path), _files(plain)) == before
