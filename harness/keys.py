"""Content keys: a short, stable hash of a JSON-able dict.

Training runs, suite cells and evaluation cells are cached under these keys.  They
live in the engine (not in the ablation runner) so that a method can key the runs it
depends on exactly like the runner keys its cells without importing the runner; what
identifies a training run is ``harness.method.train_run_config`` (it needs the method
registry for the method's ``revision``).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

KEY_LENGTH = 16


def content_key(obj: Any) -> str:
    """The first ``KEY_LENGTH`` hex digits of the SHA-256 of ``obj`` as canonical JSON."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_LENGTH]
