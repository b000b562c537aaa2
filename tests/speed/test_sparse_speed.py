"""Sparse encoding speed: our SparseMLMEncoder vs ``sentence_transformers.SparseEncoder.encode_document``
on the same model (SPLADE-tiny, exported with the SparseEncoder files), the same 256 real SciFact passages,
batch size 32 and max length 256, in this process on one torch thread, after a warm-up and a parity check.
Rounds are interleaved (the reference in the untimed pedantic ``setup``, timed by hand), both timed in process
CPU seconds, and the bound is on the median of the per-round ratios (tests/train/benchutil.py): other
processes' load adds wall time but not this process's CPU time, and each round's pair runs under one load.
Both return CPU sparse results (ours CSR, theirs a sparse COO tensor).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from benchutil import paired_rounds
from optional_extras import require_extra

os.environ.setdefault("HF_HUB_OFFLINE", "1")

N_TEXTS = 256  # = len(scifact_passages) (tests/speed/conftest.py)
BATCH_SIZE = 32
MAX_LENGTH = 256
ROUNDS = 5
MAX_RATIO = 1.0      # ours / SparseEncoder, CPU time, median round (measured spread: in the report)

pytestmark = [pytest.mark.benchmark, pytest.mark.slow, pytest.mark.needs_shared, pytest.mark.usefixtures("one_thread")]


def test_sparse_encode_throughput_vs_sparse_encoder(benchmark, scifact_passages, tmp_path):
    import torch

    SparseEncoder = require_extra("sentence_transformers").SparseEncoder

    from harness.encoders.sparse import SparseMLMEncoder
    from methods.splade_export import export_sparse_encoder

    texts = scifact_passages
    folder = export_sparse_encoder("splade-tiny", tmp_path / "st", max_length=MAX_LENGTH)
    ours = SparseMLMEncoder(str(folder), batch_size=BATCH_SIZE, doc_max_length=MAX_LENGTH)
    reference = SparseEncoder(str(folder), device="cpu")
    reference.max_seq_length = MAX_LENGTH

    def reference_encode():
        return reference.encode_document(texts, batch_size=BATCH_SIZE, convert_to_tensor=True)

    # Warm-up and parity: the same computation on both sides.
    np.testing.assert_allclose(ours.encode_docs(texts[:BATCH_SIZE], progress=False).to_dense(),
                               reference.encode_document(texts[:BATCH_SIZE], batch_size=BATCH_SIZE,
                                                         convert_to_tensor=True).to_dense().numpy(), atol=1e-4)
    times = paired_rounds(benchmark, reference_encode, lambda: ours.encode_docs(texts, progress=False), ROUNDS,
                          warmup=False)
    assert len(times.result) == N_TEXTS
    benchmark.extra_info.update({"texts": N_TEXTS, "batch_size": BATCH_SIZE, "max_length": MAX_LENGTH,
                                 "torch_threads": torch.get_num_threads()})
    times.report(benchmark, f"SparseMLMEncoder / SparseEncoder on {N_TEXTS} SciFact passages (SPLADE-tiny, "
                            f"{torch.get_num_threads()} thread)")
    times.assert_at_most(MAX_RATIO, "SparseMLMEncoder / SparseEncoder")
