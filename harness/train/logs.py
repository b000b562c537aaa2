"""Training logs: one JSON object per optimizer step, optional TensorBoard, a progress bar.

Only rank 0 writes.  On resume the log is cut back to the resumed step (atomically),
so the file always reads as one uninterrupted run.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from harness.io import atomic_write
from harness.progress import bar_disabled

log = logging.getLogger(__name__)
LOG_FILE = "train_log.jsonl"


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """All records of a training log (an empty list when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class TrainLogger:
    def __init__(self, workdir: Path, *, enabled: bool, resume_step: int, total_steps: int, tensorboard: bool,
                 progress: bool):
        self.enabled = enabled
        self.path = workdir / LOG_FILE
        self._tb = None
        self._bar = None
        if not enabled:
            return
        kept = [r for r in read_log(self.path) if r.get("step", 0) <= resume_step]
        with atomic_write(self.path) as handle:
            for record in kept:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._handle = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(workdir / "tensorboard"), purge_step=resume_step + 1)
            except ImportError:
                log.warning("tensorboard is not installed; logging to %s only", self.path)
        if progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=resume_step, desc="train", unit="step", dynamic_ncols=True,
                             disable=bar_disabled())

    def write(self, record: dict[str, Any], persist: bool = True) -> None:
        """Record one step (to the files only when ``persist``; the progress bar always moves)."""
        if not self.enabled:
            return
        if persist:
            self._handle.write(json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n")
            self._handle.flush()
            if self._tb is not None:
                for key, value in _flat_numbers(record):
                    self._tb.add_scalar(key, value, record["step"])
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}")

    def close(self) -> None:
        if not self.enabled:
            return
        self._handle.close()
        if self._tb is not None:
            self._tb.close()
        if self._bar is not None:
            self._bar.close()


def _flat_numbers(record: dict[str, Any], prefix: str = ""):
    for key, value in record.items():
        if key == "step":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flat_numbers(value, name + "/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield name, float(value)
