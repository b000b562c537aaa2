"""Encoding speed of the int8 backend vs our fp32 path (and vs sentence-transformers' ONNX int8 backend
where it can be installed).

Both encoders run in this process on the same 256 real SciFact passages (batch 32, max length
256), after a warm-up, with interleaved rounds (fp32 in the untimed pedantic ``setup``, int8 as
the benchmark target); the ratio is best-vs-best, the median of per-round ratios is reported too.
sentence-transformers' ``backend="onnx"`` needs ``optimum[onnxruntime]``, which cannot be installed
beside transformers 5 (see :mod:`harness.encoders.quantized`), so that comparison is skipped with
the reason unless it imports.

Run with ``pytest -m slow tests/speed/test_encoding_int8_speed.py -s``.
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


def test_int8_vs_fp32_encode_speed(benchmark, scifact_passages):
    texts = scifact_passages
    import torch

    from harness.encoders.hf import HFEncoder

    fp32 = HFEncoder("minilm", batch_size=BATCH_SIZE, doc_max_length=MAX_LENGTH)
    int8 = HFEncoder("minilm", batch_size=BATCH_SIZE, doc_max_length=MAX_LENGTH, backend="int8")
    a = fp32.encode_docs(texts, progress=False)           # warm-up, and the quality of the vectors
    b = int8.encode_docs(texts, progress=False)
    cosine = np.sum(a * b, axis=1)
    result, fp32_times, int8_times = interleaved_rounds(benchmark, lambda: fp32.encode_docs(texts, progress=False),
                                                        lambda: int8.encode_docs(texts, progress=False), ROUNDS)
    ratio, median_ratio = speed_ratios(fp32_times, int8_times)
    benchmark.extra_info.update({"texts": N_TEXTS, "torch_threads": torch.get_num_threads(), "fp32_s": fp32_times,
                                 "int8_s": int8_times, "speed_ratio_best": round(ratio, 4),
                                 "speed_ratio_paired_median": round(median_ratio, 4),
                                 "cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean())})
    print(f"\nint8 vs fp32 on {N_TEXTS} SciFact passages: best-round ratio {ratio:.3f}x (median per-round "
          f"{median_ratio:.3f}x); int8 {N_TEXTS / min(int8_times):.1f} texts/s, fp32 {N_TEXTS / min(fp32_times):.1f} "
          f"texts/s; cosine to fp32 min {cosine.min():.4f} mean {cosine.mean():.4f}")
    assert result.shape == (N_TEXTS, 384)
    assert cosine.min() > 0.95
    assert ratio > 1.0


def test_int8_vs_sentence_transformers_onnx_int8(benchmark, texts, tmp_path):
    require_extra("sentence_transformers")
    pytest.importorskip("optimum.onnxruntime", reason="sentence-transformers' ONNX backend needs optimum[onnxruntime], "
                                                      "which requires transformers<4.58 (not installable here)")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model

    from harness.encoders.hf import HFEncoder

    ours = HFEncoder("minilm", batch_size=BATCH_SIZE, doc_max_length=MAX_LENGTH, backend="int8")
    reference = SentenceTransformer(ours.path, device="cpu", backend="onnx")
    reference.max_seq_length = MAX_LENGTH
    export_dynamic_quantized_onnx_model(reference, "avx512_vnni", str(tmp_path / "onnx"))
    reference = SentenceTransformer(str(tmp_path / "onnx"), device="cpu", backend="onnx",
                                    model_kwargs={"file_name": "onnx/model_qint8_avx512_vnni.onnx"})
    ours.encode_docs(texts[:BATCH_SIZE], progress=False)
    _, ref_times, our_times = interleaved_rounds(
        benchmark, lambda: reference.encode(texts, batch_size=BATCH_SIZE, normalize_embeddings=True),
        lambda: ours.encode_docs(texts, progress=False), ROUNDS)
    ratio, median_ratio = speed_ratios(ref_times, our_times)
    print(f"\nour int8 vs sentence-transformers ONNX int8: best-round ratio {ratio:.3f}x (median {median_ratio:.3f}x)")
