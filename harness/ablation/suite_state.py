"""What one suite run at one scale is over one results root: its cells, where each lives, which are done.

:class:`SuiteState` holds the expanded training cells, the benchmarks it loaded (once each, their protocol
cards carrying the scale's evaluation settings) and the evaluation cells keyed by those cards.  It writes
nothing: the cell work (:mod:`harness.ablation.cell_work`) and the report
(:mod:`harness.ablation.suite_report`) take it, and :class:`harness.ablation.runner.SuiteRun` is this state
with those two attached.  The folders come from :mod:`harness.ablation.paths`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.ablation.benchmarks import load_benchmark_ref
from harness.ablation.cells import EvalCell, TrainCell, expand_eval_cells, expand_train_cells
from harness.ablation.paths import eval_cell_dir, report_dir, train_cell_dir
from harness.ablation.spec import AblationSuite, encoding_kwargs
from harness.benchmark import LoadedBenchmark
from harness.io.results_layout import TRAIN_DONE_FILE
from harness.retrieval.seismic import parse_backend
from harness.store import is_result_dir


class SuiteState:
    """The cells of ``suite`` at ``scale`` under ``results_root`` and their state on disk (read-only)."""

    def __init__(self, suite: AblationSuite, scale: str, results_root: str | Path = "results",
                 cache_dir: str | Path | None = None, progress: bool = True, load_data: bool = True):
        self.suite = suite
        self.scale = scale
        self.config = suite.scale(scale)
        self.root = Path(results_root)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.progress = progress
        self.train_cells: list[TrainCell] = expand_train_cells(suite, scale, load_data=load_data)
        self._benchmarks: dict[str, LoadedBenchmark] = {}
        self._eval_cells: list[EvalCell] | None = None
        # each system's resolved settings with their sources (harness.ablation.cell_work.settings_record)
        self.provenance: dict[str, list[dict[str, Any]]] | None = None

    @property
    def report_dir(self) -> Path:
        return report_dir(self.root, self.suite.name, self.scale)

    def train_dir(self, cell: TrainCell) -> Path:
        return train_cell_dir(self.root, cell.key)

    def eval_dir(self, cell: EvalCell) -> Path:
        return eval_cell_dir(self.root, cell.key)

    def benchmark(self, bid: str) -> LoadedBenchmark:
        """The benchmark ``bid`` of this scale, loaded on first use (its card holds the evaluation settings)."""
        if bid not in self._benchmarks:
            ref = next(b for b in self.config.benchmarks if b.id == bid)
            loaded = load_benchmark_ref(ref, self.suite.metrics)
            extra = evaluation_card_fields(self.config.evaluation)
            if extra:      # the scale's evaluation settings hold for every variant: part of the protocol
                loaded.card = loaded.card.with_(extra={**dict(loaded.card.extra), **extra})
            self._benchmarks[bid] = loaded
        return self._benchmarks[bid]

    @property
    def eval_cells(self) -> list[EvalCell]:
        """Every (training cell, benchmark[, step]) pair; the keys hold the benchmark cards, so the first use
        loads every benchmark."""
        if self._eval_cells is None:
            cards = {b.id: self.benchmark(b.id).card.fingerprint() for b in self.config.benchmarks}
            self._eval_cells = expand_eval_cells(self.train_cells, self.config.benchmarks, cards)
        return self._eval_cells

    def is_trained(self, cell: TrainCell) -> bool:
        return not cell.trains or (self.train_dir(cell) / TRAIN_DONE_FILE).exists()

    def is_trained_key(self, key: str) -> bool:
        """Whether the training run (a cell or a dependency) of ``key`` has finished."""
        return (train_cell_dir(self.root, key) / TRAIN_DONE_FILE).exists()

    def is_evaluated(self, cell: EvalCell) -> bool:
        return is_result_dir(self.eval_dir(cell))

    def pending(self) -> list[str]:
        """``<cell> x <benchmark>`` of every evaluation cell without a stored result."""
        return [f"{c.id} x {c.benchmark.id}" for c in self.eval_cells if not self.is_evaluated(c)]


def evaluation_card_fields(settings: dict[str, Any]) -> dict[str, Any]:
    """Protocol-card ``extra`` fields of evaluation settings that change numbers (defaults add none, so default
    cards keep their fingerprints): a non-fp32 dtype or the int8 backend, a sparse backend other than exact,
    the impact quantisation of lucene-impact."""
    from harness.encoders.hf import encoding_card_fields  # lazy (start-up speed): imports torch, tqdm

    extra = encoding_card_fields(encoding_kwargs(settings.get("encoding") or {}))
    backend = settings.get("sparse_backend")
    if backend is not None and parse_backend(backend)[0] != "exact":
        extra["sparse_backend"] = backend
    if backend is not None and parse_backend(backend)[0] == "lucene-impact":
        extra["impact_quantization"] = settings.get("quantization", "pyserini")
    return extra
