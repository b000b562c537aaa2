"""Shard claims in the embedding caches: concurrent encodings of one corpus encode each shard once.

Two real OS processes encode the same corpus with the same model into the same cache at the same time;
every shard is encoded by exactly one of them and both read the same vectors, byte for byte those of a
single-process encoding.  A shard whose claim holder is dead (a record left by a dead pid, or a live
holder killed while another process waits for it) is taken over.  The sparse cache claims its shards
the same way.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from harness.data import Corpus
from harness.encoders import shards as shard_mod
from harness.encoders.base import Encoder
from harness.encoders.cache import cache_root, embedding_key, encode_corpus
from harness.encoders.shards import shard_claim_target
from harness.encoders.sparse_cache import encode_corpus_sparse
from harness.encoders.sparse_vectors import SparseVectors
from harness.io.claims import claim_path

REPO = Path(__file__).resolve().parents[2]
N_DOCS, SHARD_SIZE = 240, 30          # 8 shards
VOCAB = 64
# Real words (the tiny BERT's WordPiece knows them); a list of its own keeps this module free of torch, so
# the sparse children start fast.
WORDS = ("the a of to in for with and is this that query document passage text model search find rank score "
         "cat dog bird fish tree river city house car road book paper science study result cell protein gene "
         "drug effect cause risk patient health water energy light sound red green blue one two three").split()

# One encoding process: builds the corpus, waits for its peers (a file barrier), encodes, and logs every
# encode_docs call (pid and the shard's first document id) to a shared counter file.
CHILD = textwrap.dedent('''
    import json, os, sys, time
    import numpy as np
    args = json.loads(sys.argv[1])
    if args["mode"] == "hold":           # hold one shard's claim until killed
        from harness.io.claims import try_claim
        held = try_claim(args["target"], "holding a shard for the test")
        open(args["ready"], "w").close()
        time.sleep(600)
        sys.exit(0)
    if args["mode"] == "dense":
        import torch
        torch.set_num_threads(1)
    sys.path.insert(0, args["tests"])
    from test_shard_claims import make_corpus, count_call, CountingSparse
    from harness.encoders.cache import encode_corpus
    from harness.encoders.sparse_cache import encode_corpus_sparse
    corpus = make_corpus()
    if args["mode"] == "dense":
        from harness.encoders.hf import HFEncoder

        class CountingHF(HFEncoder):
            def encode_docs(self, texts, **kwargs):
                count_call(args["counter"], texts, args["delay"])
                return super().encode_docs(texts, **kwargs)

        encoder = CountingHF(args["model"], pooling="mean")
        encoder._load()       # before the barrier: the cache loads the model before any shard is claimed
    else:
        encoder = CountingSparse(counter=args["counter"], delay=args["delay"])
    os.makedirs(args["barrier"], exist_ok=True)
    open(os.path.join(args["barrier"], str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(args["barrier"])) < args["peers"] and time.monotonic() < deadline:
        time.sleep(0.01)
    if args["mode"] == "dense":
        emb = encode_corpus(encoder, corpus, args["cache"], shard_size=args["shard_size"], progress=False)
        np.save(args["out"], emb.as_array())
    else:
        emb = encode_corpus_sparse(encoder, corpus, args["cache"], shard_size=args["shard_size"], progress=False)
        np.save(args["out"], emb.vectors().to_dense())
    print(json.dumps({"pid": os.getpid(), "encoded_shards": emb.encoded_shards}))
''')


def make_corpus(n: int = N_DOCS) -> Corpus:
    """``n`` short documents of real words; document i's text starts with ``d<i>``."""
    rng = np.random.default_rng(11)
    ids = [f"d{i}" for i in range(n)]
    texts = [f"d{i} " + " ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))) for i in range(n)]
    return Corpus(ids, [""] * n, texts)


def count_call(counter: str | None, texts, delay: float) -> None:
    """Log one encode_docs call (one per shard): this pid and the shard's first document id."""
    if counter:
        with open(counter, "a", encoding="utf-8") as handle:     # one short O_APPEND write per call
            handle.write(f"{os.getpid()} {texts[0].split()[0]}\n")
    time.sleep(delay)       # long enough that the two processes overlap


class CountingSparse(Encoder):
    """A cheap deterministic sparse encoder (term weights from the words' positions in WORDS)."""

    kind = "sparse"
    similarity = "dot"

    def __init__(self, counter: str | None = None, delay: float = 0.0):
        self.counter, self.delay = counter, delay

    def identity(self):
        return {"encoder": "counting-sparse", "vocab": VOCAB}

    def encode_docs(self, texts, *, batch_size=None, progress=True):
        count_call(self.counter, texts, self.delay)
        dense = np.zeros((len(texts), VOCAB), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split()[1:]:
                dense[row, WORDS.index(word) % VOCAB] += 0.5
        return SparseVectors.from_dense(dense)

    encode_queries = encode_docs


def _counts(counter: Path) -> dict[int, list[int]]:
    """Shard index -> pids that encoded it."""
    out: dict[int, list[int]] = {}
    for line in counter.read_text().splitlines():
        pid, first = line.split()
        out.setdefault(int(first[1:]) // SHARD_SIZE, []).append(int(pid))
    return out


def _spawn(args: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("HARNESS_CLAIMS", None)
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps({"tests": str(Path(__file__).parent), **args})],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_pair(tmp_path: Path, mode: str, model: str = "", delay: float = 0.1) -> tuple[Path, list[dict]]:
    counter = tmp_path / f"{mode}-calls.txt"
    procs = [_spawn({"mode": mode, "model": model, "cache": str(tmp_path / "shared"), "counter": str(counter),
                     "delay": delay, "barrier": str(tmp_path / f"{mode}-barrier"), "peers": 2,
                     "shard_size": SHARD_SIZE, "out": str(tmp_path / f"{mode}-{k}.npy")}) for k in range(2)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return counter, reports


@pytest.fixture
def no_claim_env(monkeypatch):
    monkeypatch.delenv("HARNESS_CLAIMS", raising=False)
    monkeypatch.delenv("HARNESS_CLAIM_TIMEOUT", raising=False)
    monkeypatch.setattr(shard_mod, "SHARD_POLL_SECONDS", 0.05)


def _reference_dense(model: str, cache: Path):
    import torch

    from harness.encoders.hf import HFEncoder

    before = torch.get_num_threads()
    torch.set_num_threads(1)          # as the children encode
    try:
        return encode_corpus(HFEncoder(model, pooling="mean"), make_corpus(), cache, shard_size=SHARD_SIZE,
                             progress=False)
    finally:
        torch.set_num_threads(before)


def _shard_bytes(entry: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(entry.glob("shard-*.npy"))}


def test_two_concurrent_processes_encode_each_shard_once(tiny_bert_dir, tmp_path, no_claim_env):
    counter, reports = _run_pair(tmp_path, "dense", model=str(tiny_bert_dir))
    counts = _counts(counter)
    # Every shard encoded exactly once overall (without claims: 16 encodes, each process all 8 shards).
    assert sorted(counts) == list(range(8))
    assert {i: len(pids) for i, pids in counts.items()} == {i: 1 for i in range(8)}, counts
    assert sum(r["encoded_shards"] for r in reports) == 8
    assert all(r["encoded_shards"] >= 1 for r in reports)          # they really did share the work

    reference = _reference_dense(str(tiny_bert_dir), tmp_path / "alone")
    first, second = (np.load(tmp_path / f"dense-{k}.npy") for k in range(2))
    assert first.tobytes() == second.tobytes() == np.asarray(reference.as_array()).tobytes()
    shared = cache_root(tmp_path / "shared") / "embeddings" / reference.key
    assert _shard_bytes(shared) == _shard_bytes(reference.path) and len(_shard_bytes(shared)) == 8
    meta = json.loads((shared / "meta.json").read_text())
    assert meta["complete"] is True and meta["dim"] == reference.dim
    assert not list(shared.glob("*.tmp"))
    for i in range(8):    # every claim released cleanly (an empty record)
        assert claim_path(shard_claim_target(shared, i)).read_text() == ""


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _counting_hf(model: str):
    """The tiny BERT in this process, recording the shard of each encode_docs call in ``firsts``."""
    from harness.encoders.hf import HFEncoder

    class Counting(HFEncoder):
        firsts: list[int] = []

        def encode_docs(self, texts, **kwargs):
            self.firsts.append(int(texts[0].split()[0][1:]) // SHARD_SIZE)
            return super().encode_docs(texts, **kwargs)

    encoder = Counting(model, pooling="mean")
    encoder.firsts = []
    return encoder


def _alone(model: str, corpus: Corpus, cache: Path):
    from harness.encoders.hf import HFEncoder

    return encode_corpus(HFEncoder(model, pooling="mean"), corpus, cache, shard_size=SHARD_SIZE, progress=False)


def test_a_claim_left_by_a_dead_process_is_taken_over(tiny_bert_dir, tmp_path, no_claim_env, caplog):
    corpus = make_corpus()
    encoder = _counting_hf(str(tiny_bert_dir))
    entry = cache_root(tmp_path / "cache") / "embeddings" / embedding_key(encoder.identity(), corpus.content_hash())
    entry.mkdir(parents=True)
    dead = _dead_pid()
    claim_path(shard_claim_target(entry, 2)).write_text(json.dumps(
        {"host": "this-host", "pid": dead, "what": "encoding, shard 2", "started": "2020-01-01T00:00:00+00:00"}))
    with caplog.at_level(logging.INFO):
        emb = encode_corpus(encoder, corpus, tmp_path / "cache", shard_size=SHARD_SIZE, progress=False)
    assert sorted(encoder.firsts) == list(range(8)) and emb.encoded_shards == 8
    assert f"recovered the claim on {shard_claim_target(entry, 2)} left by pid {dead}" in caplog.text
    alone = _alone(str(tiny_bert_dir), corpus, tmp_path / "alone")
    assert _shard_bytes(emb.path) == _shard_bytes(alone.path)


def _hold(tmp_path: Path, target: Path) -> subprocess.Popen:
    ready = tmp_path / "holder-ready"
    holder = _spawn({"mode": "hold", "target": str(target), "ready": str(ready)})
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert holder.poll() is None, holder.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the holder did not start"
        time.sleep(0.02)
    return holder


def _kill_when(holder: subprocess.Popen, written: list[Path]) -> threading.Thread:
    """Kill the holder (SIGKILL: no clean release) once the other shards are written and the encoding waits."""
    def watch() -> None:
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in written) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        holder.send_signal(signal.SIGKILL)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_holder_that_dies_while_waited_for_is_taken_over(tiny_bert_dir, tmp_path, no_claim_env, caplog):
    corpus = make_corpus()
    encoder = _counting_hf(str(tiny_bert_dir))
    entry = cache_root(tmp_path / "cache") / "embeddings" / embedding_key(encoder.identity(), corpus.content_hash())
    holder = _hold(tmp_path, shard_claim_target(entry, 5))
    try:
        watcher = _kill_when(holder, [entry / f"shard-{i:05d}.npy" for i in range(8) if i != 5])
        with caplog.at_level(logging.INFO):
            emb = encode_corpus(encoder, corpus, tmp_path / "cache", shard_size=SHARD_SIZE, progress=False)
        watcher.join(timeout=10)
    finally:
        holder.kill()
        holder.communicate()
    # Shard 5 was skipped while held, waited for (naming the holder) and taken over once the holder died.
    assert encoder.firsts == [0, 1, 2, 3, 4, 6, 7, 5] and emb.encoded_shards == 8
    assert f"waiting for shard 5 of {entry}: claimed by pid {holder.pid}" in caplog.text
    assert "recovered the claim" in caplog.text and "taking over shard 5" in caplog.text
    alone = _alone(str(tiny_bert_dir), corpus, tmp_path / "alone")
    assert _shard_bytes(emb.path) == _shard_bytes(alone.path)


def test_the_sparse_cache_claims_its_shards_too(tmp_path, no_claim_env, caplog):
    counter, reports = _run_pair(tmp_path, "sparse", delay=0.1)
    counts = _counts(counter)
    assert {i: len(pids) for i, pids in counts.items()} == {i: 1 for i in range(8)}, counts
    assert sum(r["encoded_shards"] for r in reports) == 8
    alone = encode_corpus_sparse(CountingSparse(), make_corpus(), tmp_path / "alone", shard_size=SHARD_SIZE,
                                 progress=False)
    dense = alone.vectors().to_dense()
    for k in range(2):
        assert np.load(tmp_path / f"sparse-{k}.npy").tobytes() == dense.tobytes()
    shared = cache_root(tmp_path / "shared") / "sparse" / alone.key
    assert _shard_bytes(shared) == _shard_bytes(alone.path) and len(_shard_bytes(shared)) == 24
    assert json.loads((shared / "meta.json").read_text())["vocab_size"] == VOCAB

    # A sparse shard whose holder dies while waited for is taken over too.
    corpus = make_corpus(90)
    encoder = CountingSparse(counter=str(tmp_path / "takeover.txt"))
    entry = cache_root(tmp_path / "cache") / "sparse" / embedding_key(encoder.identity(), corpus.content_hash())
    holder = _hold(tmp_path, shard_claim_target(entry, 0))
    try:
        watcher = _kill_when(holder, [entry / f"shard-{i:05d}.indptr.npy" for i in (1, 2)])
        with caplog.at_level(logging.INFO):
            taken = encode_corpus_sparse(encoder, corpus, tmp_path / "cache", shard_size=SHARD_SIZE, progress=False)
        watcher.join(timeout=10)
    finally:
        holder.kill()
        holder.communicate()
    assert [int(line.split()[1][1:]) // SHARD_SIZE for line in (tmp_path / "takeover.txt").read_text().splitlines()] \
        == [1, 2, 0]
    assert taken.encoded_shards == 3 and f"claimed by pid {holder.pid}" in caplog.text
    assert np.array_equal(taken.vectors().to_dense(), encoder.encode_docs(corpus.passages()).to_dense())
