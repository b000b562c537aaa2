"""Which folders a training run may write into (``harness train --out``, ``Method.train``).

Checkpoints are pruned and replaced in a run folder, so training uses only a folder that is absent,
empty, holds a run of the harness (``run.json``), or holds nothing but ``deps/``: the dependency runs
(tDRO's reference and stage 1, a COCO pretraining run, ...) that ``Method.train_dependency`` trains
into ``<workdir>/deps/<key>/`` when no suite runner gives them a shared home, with their claim files.
That is what a ``harness train`` of a method with dependencies leaves behind before its own run
starts, so the same command resumes there; anything else is refused before any work.

Torch-free: the method registry and the CLI check folders before anything heavy is imported.
"""
from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from harness.io import OutputExistsError
from harness.io.claims import CLAIM_SUFFIX
from harness.io.results_layout import TRAIN_RUN_FILE as RUN_FILE

DEPS_DIR = "deps"


def foreign_dependency_entries(deps: str | Path, runs: Collection[str] | None = None) -> list[str]:
    """The names in the dependency folder ``deps`` that are not dependency runs or their claim files
    (empty: all are).  With ``runs`` (run folder names, i.e. content keys) only those runs count;
    without, any folder that is empty or holds a run (``run.json``) does."""
    deps = Path(deps)
    if deps.is_symlink() or not deps.is_dir():
        return [deps.name]
    foreign = []
    for entry in sorted(deps.iterdir()):
        name = entry.name
        if entry.is_symlink():
            ok = False
        elif name.endswith(CLAIM_SUFFIX) and entry.is_file():
            ok = runs is None or name[:-len(CLAIM_SUFFIX)] in runs
        elif entry.is_dir():
            ok = name in runs if runs is not None else (entry / RUN_FILE).is_file() or not any(entry.iterdir())
        else:
            ok = False
        if not ok:
            foreign.append(name)
    return foreign


def check_training_folder(workdir: str | Path, dependencies: Collection[str] | None = None) -> None:
    """Refuse (:class:`~harness.io.OutputExistsError`) a folder training must not write into.

    Accepted: no folder yet, an empty folder, one holding a training run (``run.json``), or one whose
    only entry is ``deps/`` holding dependency runs and their claim files: the runs named by
    ``dependencies`` (their folder names) when given, the runs of this training run; else any run."""
    workdir = Path(workdir)
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise OutputExistsError(f"{workdir} exists and is not a directory; choose another output folder")
    if not workdir.is_dir() or (workdir / RUN_FILE).is_file():
        return
    entries = sorted(p.name for p in workdir.iterdir())
    if not entries:
        return
    if entries == [DEPS_DIR]:
        foreign = foreign_dependency_entries(workdir / DEPS_DIR, dependencies)
        if not foreign:
            return
        if foreign != [DEPS_DIR]:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputExistsError(
                f"{workdir / DEPS_DIR} holds {shown}, which {'are' if len(foreign) > 1 else 'is'} not a dependency "
                f"run of this training run (another configuration's, or not the harness's); refusing to write "
                f"into {workdir}: choose a new folder, or rerun the command that trained there")
    raise OutputExistsError(f"{workdir} is not empty and holds no training run of the harness "
                            f"({RUN_FILE} is missing); refusing to write into it: choose a new folder")
