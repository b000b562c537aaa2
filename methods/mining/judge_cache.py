"""The judge's vote cache: every vote stored, so a rerun asks nothing and gets identical votes.

A vote is keyed by the judge's identity (model fingerprint, or endpoint + model name, and its
decoding settings), the prompt version, the sampling (top_p, temperature), the run seed and the
(query, positive, candidate) texts.  Votes live under ``<root>/judge-votes/<judge key>/`` in
append-only JSONL shards: new votes are buffered and written as a new shard (atomically: a
temporary file renamed into place) every ``flush_every`` votes and at the end of a pass, so a
killed run loses at most one buffer and never leaves a torn file.  Failed calls are not stored
(a rerun asks again); replies without a label are (the model's answer, -1).
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.io import atomic_write, atomic_write_json
from harness.keys import content_key

if TYPE_CHECKING:   # annotations only
    from methods.mining.judge import Judge, Reply, Sampling, Triple

FORMAT = 1


def judge_key(judge: Judge) -> str:
    return content_key({"format": FORMAT, "judge": judge.identity(), "prompt": judge.prompt_version})


def vote_key(sampling: Sampling, seed: int, triple: Triple) -> str:
    text = json.dumps([sampling.top_p, sampling.temperature, seed, triple.query, triple.positive, triple.candidate],
                      ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VoteCache:
    """Votes of any number of judges under ``root`` (loaded lazily, one judge at a time)."""

    def __init__(self, root: str | Path, *, flush_every: int = 256):
        self.root = Path(root) / "judge-votes"
        self.flush_every = flush_every
        self._votes: dict[str, dict[str, dict[str, Any]]] = {}     # judge key -> vote key -> record
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._judges: dict[int, str] = {}

    def _judge(self, judge: Judge) -> str:
        jk = self._judges.get(id(judge))
        if jk is None:
            jk = self._judges[id(judge)] = judge_key(judge)
        if jk not in self._votes:
            self._votes[jk] = self._load(jk)
            meta = self.root / jk / "judge.json"
            if not meta.is_file():     # for people browsing the cache
                atomic_write_json(meta, {"judge": judge.identity(), "prompt_version": judge.prompt_version})
        return jk

    def _load(self, jk: str) -> dict[str, dict[str, Any]]:
        votes: dict[str, dict[str, Any]] = {}
        folder = self.root / jk
        for shard in sorted(folder.glob("votes-*.jsonl")) if folder.is_dir() else []:
            for line in shard.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                votes.setdefault(rec["key"], rec)     # the first vote stored wins
        return votes

    def __len__(self) -> int:
        return sum(len(v) for v in self._votes.values())

    def get(self, judge: Judge, sampling: Sampling, seed: int, triple: Triple) -> dict[str, Any] | None:
        return self._votes[self._judge(judge)].get(vote_key(sampling, seed, triple))

    def put(self, judge: Judge, sampling: Sampling, seed: int, triple: Triple, reply: Reply) -> None:
        jk = self._judge(judge)
        key = vote_key(sampling, seed, triple)
        if key in self._votes[jk]:
            return
        rec: dict[str, Any] = {"key": key, "label": reply.label}
        if reply.text is not None:
            rec["reply"] = reply.text[:500]
        self._votes[jk][key] = rec
        pending = self._pending.setdefault(jk, [])
        pending.append(rec)
        if len(pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the buffered votes as new shards (one per judge)."""
        for jk, pending in self._pending.items():
            if not pending:
                continue
            name = f"votes-{os.getpid()}-{uuid.uuid4().hex[:12]}.jsonl"
            with atomic_write(self.root / jk / name) as fh:
                for rec in pending:
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            pending.clear()
