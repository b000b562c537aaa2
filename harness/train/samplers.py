"""Which training rows form each global micro-batch (METHODS.md 0.3).

* :class:`DatasetStream`: one source's rows, shuffled, cycled forever ("all
  exhausted": small sources are oversampled); epoch e uses a permutation seeded by
  ``(seed, source, e)``, so the state is just ``(epoch, cursor)``.
* :class:`WeightedSampler` with ``mode="homogeneous"``: for each global batch one
  source g ~ Categorical(weights) is drawn and all rows come from g (task-homogeneous
  batching, the tDRO fine-tuning sampler).  ``mode="mixed"``: each row's source is
  drawn independently (the tDRO-stage interleave; per-source counts are multinomial).

Every rank runs an identical sampler from the shared seed and takes its own slice
of the global batch, so all ranks agree on g without communication.  Weights are
normalised to sum to 1; a method may change them during training, and the sampler
state (RNG, stream positions, current weights) is saved in checkpoints.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.errors import ConfigError

_SAMPLER_STREAM = 0x5A3  # separates the sampler's seed sequence from other uses of the run seed


class DatasetStream:
    """Shuffled, cycled stream of row indices of one source."""

    def __init__(self, size: int, seed: int, source: int):
        if size < 1:
            raise ConfigError(f"training source {source} has no rows")
        self.size, self.seed, self.source = size, seed, source
        self.epoch, self.cursor = 0, 0
        self._perm: np.ndarray | None = None

    def _permutation(self) -> np.ndarray:
        if self._perm is None:
            rng = np.random.default_rng([self.seed, _SAMPLER_STREAM, self.source, self.epoch])
            self._perm = rng.permutation(self.size)
        return self._perm

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            perm = self._permutation()
            n = min(k - len(out), self.size - self.cursor)
            out.extend(int(i) for i in perm[self.cursor:self.cursor + n])
            self.cursor += n
            if self.cursor == self.size:
                self.epoch, self.cursor, self._perm = self.epoch + 1, 0, None
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.cursor, self._perm = int(state["epoch"]), int(state["cursor"]), None


def normalize_weights(weights: Sequence[float], n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ConfigError(f"expected {n} dataset weights, got {w.shape[0] if w.ndim == 1 else w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ConfigError(f"dataset weights must be finite, >= 0 and not all 0; got {w.tolist()}")
    return w / w.sum()


class WeightedSampler:
    """Global batches of ``(source, row)`` pairs; see the module docstring."""

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], global_batch: int, seed: int,
                 mode: str = "homogeneous"):
        if mode not in ("homogeneous", "mixed"):
            raise ConfigError(f"unknown sampling mode {mode!r}; choose homogeneous or mixed")
        if global_batch < 1:
            raise ConfigError("global batch must be >= 1")
        self.sizes = list(sizes)
        self.mode = mode
        self.global_batch = global_batch
        self.seed = seed
        self.weights = normalize_weights(weights, len(self.sizes))
        self.streams = [DatasetStream(n, seed, i) for i, n in enumerate(self.sizes)]
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, _SAMPLER_STREAM])))
        self.batches_drawn = 0

    def set_weights(self, weights: Sequence[float]) -> None:
        """Change the sampling distribution from the next batch on."""
        self.weights = normalize_weights(weights, len(self.sizes))

    def next_batch(self) -> list[tuple[int, int]]:
        """The next global batch as ``(source index, row index)`` pairs."""
        k = len(self.sizes)
        if self.mode == "homogeneous":
            g = int(self.rng.choice(k, p=self.weights))
            batch = [(g, r) for r in self.streams[g].take(self.global_batch)]
        else:
            sources = self.rng.choice(k, size=self.global_batch, p=self.weights)
            counts = np.bincount(sources, minlength=k)
            rows = {g: iter(self.streams[g].take(int(c))) for g, c in enumerate(counts) if c}
            batch = [(int(g), next(rows[int(g)])) for g in sources]
        self.batches_drawn += 1
        return batch

    @staticmethod
    def local_slice(batch: list[Any], rank: int, world_size: int) -> list[Any]:
        """Rank ``rank``'s contiguous share of a global batch."""
        per_rank = len(batch) // world_size
        return batch[rank * per_rank:(rank + 1) * per_rank]

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "weights": self.weights.tolist(), "rng": self.rng.bit_generator.state,
                "streams": [s.state_dict() for s in self.streams], "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["streams"]) != len(self.streams) or state["mode"] != self.mode:
            raise ConfigError("sampler state does not match this training data / sampling mode")
        self.weights = normalize_weights(state["weights"], len(self.sizes))
        self.rng.bit_generator.state = state["rng"]
        for stream, s in zip(self.streams, state["streams"]):
            stream.load_state_dict(s)
        self.batches_drawn = int(state["batches_drawn"])
