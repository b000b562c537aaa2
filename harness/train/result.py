"""The result of a finished training run: the ``done.json`` marker the trainer writes last.

It lives next to the trainer that writes it; methods, the suite runner and the CLI read it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.io.results_layout import TRAIN_DONE_FILE as DONE_FILE


@dataclass(frozen=True)
class Checkpoint:
    """A finished training run: ``path`` is the model folder an encoder loads."""

    path: Path
    workdir: Path
    method: str
    step: int
    spec_fingerprint: str
    data_fingerprint: str
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "workdir": str(self.workdir), "method": self.method, "step": self.step,
                "spec_fingerprint": self.spec_fingerprint, "data_fingerprint": self.data_fingerprint,
                "info": self.info}

    @classmethod
    def load(cls, workdir: str | Path) -> Checkpoint:
        """The finished run in ``workdir`` (raises ConfigError if training did not finish)."""
        workdir = Path(workdir)
        done = workdir / DONE_FILE
        if not done.exists():
            raise ConfigError(f"{workdir}: no finished training run ({DONE_FILE} is missing)")
        obj = json.loads(done.read_text(encoding="utf-8"))
        return cls(path=workdir / obj["model_dir"], workdir=workdir, method=obj["method"], step=obj["step"],
                   spec_fingerprint=obj["spec_fingerprint"], data_fingerprint=obj["data_fingerprint"],
                   info=obj.get("info", {}))
