"""Encoding speed: HFEncoder vs sentence-transformers, and the embedding cache's skip on a second evaluation.

Both encoders run in this process on one torch thread, on the same 256 real SciFact
passages, batch size 32, max length 256, after a warm-up.  Rounds are interleaved
(sentence-transformers in the untimed pedantic ``setup``, timed by hand; the harness
encoder as the benchmark target), both timed in process CPU seconds, and the bound is on the
median of the per-round ratios (tests/train/benchutil.py): other processes' load adds wall
time, not this process's CPU time, and each round's pair runs under the same load.  One thread
so that CPU time is work (worker threads spinning at a barrier while another process holds the
core would count too).  Minutes on two CPU cores, hence ``slow``.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from benchutil import paired_rounds
from optional_extras import require_extra

os.environ.setdefault("HF_HUB_OFFLINE", "1")

N_TEXTS = 256
BATCH_SIZE = 32
MAX_LENGTH = 256
ROUNDS = 5
# ours / sentence-transformers, CPU time, median round.  Measured at load average 11 (5 rounds of 256 passages,
# ~33-36 s CPU a side): median 0.94, rounds 0.90-0.96; 1.05 leaves 9% over the slowest round (1.0 left 4%).
MAX_RATIO = 1.05
MIN_SKIP_SPEEDUP = 20

pytestmark = [pytest.mark.benchmark, pytest.mark.slow]


@pytest.fixture(scope="module")
def scifact_corpus(shared_data):
    from harness.data import load_beir

    corpus = load_beir(shared_data / "scifact", "test").corpus
    return corpus.subset(corpus.ids[:N_TEXTS])


def test_encode_docs_throughput_vs_sentence_transformers(benchmark, scifact_corpus, one_thread):
    import torch

    SentenceTransformer = require_extra("sentence_transformers").SentenceTransformer

    from harness.encoders.hf import HFEncoder

    texts = scifact_corpus.passages()
    assert len(texts) == N_TEXTS
    ours = HFEncoder("minilm", batch_size=BATCH_SIZE, doc_max_length=MAX_LENGTH)
    reference = SentenceTransformer(ours.path, device="cpu")
    reference.max_seq_length = MAX_LENGTH

    def reference_encode():
        return reference.encode(texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True)

    def ours_encode():
        return ours.encode_docs(texts, progress=False)

    # Warm-up (allocator, oneDNN kernels), and a parity check so we time the same computation.
    np.testing.assert_allclose(ours.encode_docs(texts[:BATCH_SIZE], progress=False),
                               reference.encode(texts[:BATCH_SIZE], batch_size=BATCH_SIZE, normalize_embeddings=True),
                               atol=1e-5)
    times = paired_rounds(benchmark, reference_encode, ours_encode, ROUNDS, warmup=False)
    assert times.result.shape == (N_TEXTS, 384)
    benchmark.extra_info.update({"texts": N_TEXTS, "batch_size": BATCH_SIZE, "max_length": MAX_LENGTH,
                                 "torch_threads": torch.get_num_threads(),
                                 "ours_texts_per_cpu_s": round(N_TEXTS / min(times.ours), 2)})
    times.report(benchmark, f"HFEncoder / sentence-transformers on {N_TEXTS} SciFact passages, "
                            f"{torch.get_num_threads()} thread")
    times.assert_at_most(MAX_RATIO, "HFEncoder / sentence-transformers")


def test_second_evaluation_skips_encoding(benchmark, scifact_corpus, tmp_path):
    from harness.encoders.cache import encode_corpus
    from harness.encoders.hf import HFEncoder

    started = time.process_time()       # CPU seconds (all threads): other processes' load adds none
    first = encode_corpus(HFEncoder("minilm", batch_size=BATCH_SIZE), scifact_corpus, tmp_path, progress=False)
    first_s = time.process_time() - started
    assert first.encoded_shards == 1

    def second_evaluation():
        # A new evaluation builds a new encoder: the cache hit must not even load the weights.
        encoder = HFEncoder("minilm", batch_size=BATCH_SIZE)
        embeddings = encode_corpus(encoder, scifact_corpus, tmp_path, progress=False)
        assert embeddings.skipped and encoder._model is None
        return embeddings

    second = benchmark.pedantic(second_evaluation, rounds=5, iterations=1, warmup_rounds=1)
    np.testing.assert_array_equal(second.as_array(), first.as_array())
    second_s = float("inf")
    for _ in range(3):                  # the fastest of three, in CPU seconds
        started = time.process_time()
        second_evaluation()
        second_s = min(second_s, time.process_time() - started)
    speedup = first_s / second_s
    benchmark.extra_info.update({"first_encode_s": round(first_s, 3), "cached_s": round(second_s, 4),
                                 "skip_speedup": round(speedup, 1)})
    print(f"\nsecond evaluation of {N_TEXTS} passages: {second_s * 1000:.1f} ms vs {first_s:.1f} s encoding, CPU "
          f"({speedup:.0f}x faster)")
    assert speedup > MIN_SKIP_SPEEDUP
