"""Content keys: a short, stable hash of a JSON-able dict.

Training runs, suite cells and evaluation cells are cached under these keys.  They
live in the engine (not in the ablation runner) so that a method can key the runs it
depends on exactly like the runner keys its cells without importing the runner.
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.train.spec import TrainSpec

KEY_LENGTH = 16


def content_key(obj: Any) -> str:
    """The first ``KEY_LENGTH`` hex digits of the SHA-256 of ``obj`` as canonical JSON."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_LENGTH]


def train_run_config(method: str, spec: TrainSpec, data_fingerprint: str | None) -> dict[str, Any]:
    """What identifies a training run: its content key is ``content_key`` of this.  Suite cells and
    method dependencies (``Method.run_key``) use the same config, so they share runs."""
    config: dict[str, Any] = {"method": method, "spec": spec.result_dict(), "data": data_fingerprint}
    revision = _method_revision(method)
    if revision > 1:            # only revised methods carry it, so every other key stays as it was
        config["revision"] = revision
    return config


def _method_revision(method: str) -> int:
    """The registered method's ``revision`` (1 when the name is not a registered method)."""
    from harness.errors import ConfigError
    from harness.method import METHODS

    try:
        cls = METHODS.get(method)
    except ConfigError:
        return 1
    return int(getattr(cls, "revision", 1))
