"""Running an ablation suite: train (cached) -> evaluate (cached) -> compare -> table.

Results layout under ``results_root``::

    cells/train/<key>/          one training run per training cell (method workdir, resumable)
    cells/eval/<key>/           one result directory per (training cell, benchmark)
    suites/<suite>/<scale>/     table.md, table.tex, comparisons.json, summary.json
        results/<variant>/<benchmark>/   the cell's result under a stable name (per-query values,
                                         metrics, manifest: hard links to cells/eval/<key>/), the
                                         path regression expectations point at

(the paths come from :mod:`harness.ablation.paths`, shared with the table layouts).

Every directory is written atomically and finished cells are never redone, so a
killed run resumes where it stopped (and removes the temporary folders its killed writers left in
``cells/``: :mod:`harness.io.stale`), and ``--shard i/n`` lets several machines that
share ``results_root`` split the cells.  Each train cell, eval cell and dependency is claimed
(:mod:`harness.io.claims`) while it is worked on: concurrent runs wait for it and reuse it.
The table is produced once every cell of the suite has a result.

:class:`SuiteRun` is the one object the executors, the CLI and the pytest plugin hold; it is a façade over
three pieces with one job each:

    :mod:`harness.ablation.suite_state`    the cells, their folders, which are done, the loaded benchmarks
    :mod:`harness.ablation.cell_work`      train one training cell, evaluate one eval cell (claims, stale sweep)
    :mod:`harness.ablation.suite_report`   compare, tables, summary, stable result links, json lock, HTML hook

:func:`run_suite` drives a whole suite (shards, ``--only``, multi-process launches) through it.
"""
from __future__ import annotations

import logging
from pathlib import Path

from harness.ablation import cell_work, suite_report
from harness.ablation.cells import EvalCell, TrainCell, shard_filter
from harness.ablation.html_report import write_runner_html
from harness.ablation.spec import AblationSuite
from harness.ablation.suite_report import SuiteOutcome
from harness.ablation.suite_state import SuiteState
from harness.ablation.validate import validate_plan
from harness.errors import ConfigError
from harness.train.result import Checkpoint

log = logging.getLogger("harness.ablation")

__all__ = ["SuiteOutcome", "SuiteRun", "run_suite", "select_cells"]


class SuiteRun(SuiteState):
    """One suite at one scale over one results root; cells can be run one by one (pytest items).

    The state (cells, folders, ``is_trained``/``is_evaluated``/``pending``, benchmarks) is inherited from
    :class:`harness.ablation.suite_state.SuiteState`; the work and the report are delegated."""

    # ------------------------------------------------------------------ work (harness.ablation.cell_work)
    def sweep_stale(self) -> list[Path]:
        """Remove the temporary folders that killed writers left in ``cells/train`` and ``cells/eval``."""
        return cell_work.sweep_stale(self)

    def train(self, cell: TrainCell) -> Checkpoint | None:
        """Train one cell (or load its finished checkpoint); None for untrained variants."""
        return cell_work.train_cell(self, cell)

    def evaluate(self, cell: EvalCell, ckpt: Checkpoint | None = None) -> Path:
        """Evaluate one (training cell, benchmark) pair unless its result exists."""
        return cell_work.evaluate_cell(self, cell, ckpt)

    def checkpoint_at(self, cell: TrainCell, final: Checkpoint, step: int) -> Checkpoint:
        """The finished run's intermediate checkpoint of ``step`` as a Checkpoint an encoder loads."""
        return cell_work.checkpoint_at(self, cell, final, step)

    def run_cell(self, cell: TrainCell) -> None:
        """Train one cell and evaluate it on every benchmark."""
        cell_work.run_cell(self, cell)

    # ------------------------------------------------------------------ report (harness.ablation.suite_report)
    def report(self) -> SuiteOutcome:
        """Compare every variant with the baseline and write the tables (all cells must be done)."""
        # html/ next to table.md; a failure is logged as an error, tables stand
        return suite_report.write_report(self, write_html=lambda: write_runner_html(self))

    def write_json_lock(self) -> None:
        """Record the resolved suite (cells and their configs) next to the table, for provenance."""
        suite_report.write_json_lock(self)


def _launch() -> tuple[int, int]:
    """(processes, rank) of a multi-process launch, from the launcher's environment (1, 0 otherwise)."""
    import os

    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


def select_cells(runner: SuiteRun, shard: tuple[int, int] = (1, 1), only: list[str] | None = None) -> list[TrainCell]:
    """The training cells of ``--shard`` and ``--only``: a declared variant id selects all its cells, a
    system or cell id selects those; an unknown name is refused."""
    cells = shard_filter(runner.train_cells, shard)
    if only:
        names = {n for c in runner.train_cells for n in (c.variant.id, c.system, c.declared)}
        unknown = sorted(set(only) - names)
        if unknown:
            raise ConfigError(f"--only names unknown variant(s): {', '.join(unknown)}")
        cells = [c for c in cells if {c.variant.id, c.system, c.declared} & set(only)]
    return cells


def run_suite(suite: AblationSuite, scale: str = "tiny", results_root: str | Path = "results", *,
              shard: tuple[int, int] = (1, 1), only: list[str] | None = None,
              cache_dir: str | Path | None = None, progress: bool = True, validate: bool = True) -> SuiteOutcome:
    """Run (or resume) every cell of this shard, then write the table if the suite is complete.

    The whole plan is validated first (:func:`harness.ablation.validate.validate_plan`): every problem
    is reported at once, before the first cell trains or anything is written (``validate=False``: the
    caller did, e.g. with :func:`harness.ablation.validate.load_validated`)."""
    if validate:
        validate_plan(suite, scale)
    runner = SuiteRun(suite, scale, results_root, cache_dir, progress)
    cells = select_cells(runner, shard, only)
    world, rank = _launch()
    if rank == 0:
        runner.sweep_stale()
    if world > 1:
        # Under ``accelerate launch``/``torchrun`` every process trains each cell together (DDP);
        # evaluation and the tables then run on the main process alone, so the other processes
        # never wait in a collective while it encodes corpora.
        for cell in {c.key: c for c in cells}.values():
            runner.train(cell)
        if rank != 0:
            return SuiteOutcome(suite.name, scale, runner.report_dir, False, main_process=False,
                                pending=[f"evaluation runs on the main process (this is rank {rank} of {world})"])
    done_keys: set[str] = set()
    total = len(cells)
    for i, cell in enumerate(cells, start=1):
        if cell.key in done_keys:
            continue
        state = "cached" if runner.is_trained(cell) and all(
            runner.is_evaluated(ec) for ec in runner.eval_cells if ec.train.key == cell.key) else "running"
        log.info("[%d/%d] %s: %s", i, total, cell.variant.id, state)
        runner.run_cell(cell)
        done_keys.add(cell.key)
    outcome = runner.report()
    if outcome.complete:
        runner.write_json_lock()
    return outcome
