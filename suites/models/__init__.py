"""Known released checkpoints as data: ``known_models.yaml``, registered into the engine's registry.

Each entry is a public model (a seed paper's released checkpoint or a baseline of its tables) with
the settings it must be encoded with and, for every setting, where it comes from; see
:mod:`harness.encoders.known` for the fields and what an unknown (absent) setting means.  The
engine imports this package by name on the first lookup (``Registry(builtins=("suites.models",))``).
"""
from __future__ import annotations

from pathlib import Path

from harness.encoders.known import register_known_models

DATA_FILE = Path(__file__).with_name("known_models.yaml")

register_known_models(DATA_FILE)
