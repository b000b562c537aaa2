"""Sparse encoding speed: our SparseMLMEncoder vs ``sentence_transformers.SparseEncoder.encode_document``
on the same model (SPLADE-tiny, exported with the SparseEncoder files), the same 256 real SciFact passages,
batch size 32 and max length 256, in this process (same torch threads), after a warm-up and a parity check.
Rounds are interleaved (the reference in the untimed pedantic ``setup``, timed by hand) so that load from
other processes hits both alike; the asserted ratio compares the fastest round of each, and the median of
the per-round ratios is reported too.  Both return CPU sparse results (ours CSR, theirs a sparse COO tensor).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from benchutil import interleaved_rounds, speed_ratios
from optional_extras import require_extra

os.environ.setdefault("HF_HUB_OFFLINE", "1")

N_TEXTS = 256  # = len(scifact_passages) (tests/speed/conftest.py)
BATCH_SIZE = 32
MAX_LENGTH = 256
ROUNDS = 3

pytestmark = [pytest.mark.benchmark, pytest.mark.slow, pytest.mark.needs_shared]


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
    result, reference_times, ours_times = interleaved_rounds(
        benchmark, reference_encode, lambda: ours.encode_docs(texts, progress=False), ROUNDS)
    assert len(result) == N_TEXTS
    ratio, median_ratio = speed_ratios(reference_times, ours_times)
    benchmark.extra_info.update({
        "texts": N_TEXTS, "batch_size": BATCH_SIZE, "max_length": MAX_LENGTH, "torch_threads": torch.get_num_threads(),
        "ours_s": ours_times, "sparse_encoder_s": reference_times,
        "speed_ratio_best": round(ratio, 4), "speed_ratio_paired_median": round(median_ratio, 4),
    })
    print(f"\nSparseMLMEncoder vs SparseEncoder on {N_TEXTS} SciFact passages (SPLADE-tiny): best-round ratio "
          f"{ratio:.3f}x (median of per-round ratios {median_ratio:.3f}x); ours {N_TEXTS / min(ours_times):.1f} "
          f"texts/s, SparseEncoder {N_TEXTS / min(reference_times):.1f} texts/s, {torch.get_num_threads()} threads")
    assert ratio >= 1.0
