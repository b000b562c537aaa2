"""Helpers shared by the mining tests (tests/mining is on sys.path when its tests run)."""
from __future__ import annotations

import hashlib

import numpy as np

from harness.encoders.base import Encoder

DIM = 12


class SaltEncoder(Encoder):
    """Deterministic unit vectors per (salt, text); counts the texts it encodes."""

    similarity = "cos"

    def __init__(self, salt: str, dim: int = DIM):
        self.salt, self.dim, self.calls = salt, dim, 0

    def identity(self):
        return {"encoder": "salt", "salt": self.salt, "dim": self.dim}

    def encode_docs(self, texts, *, batch_size=None, progress=True):
        self.calls += len(texts)
        out = np.empty((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(f"{self.salt}|{t}".encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        return out

    encode_queries = encode_docs
