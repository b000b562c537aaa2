"""Encoding memory does not grow with the number of distinct batch shapes.

oneDNN keeps each fused-linear primitive (reordered weights, scratch buffers) per input shape in two
caches of 1024 entries by default; encoding makes one shape per padded batch length, so memory grew with
the lengths a corpus produces (tiny BERT: ~2 MB a shape; MiniLM: ~14 MB).  harness.encoders.fusion caps
both caches at import.  Each measurement runs in a fresh process: the caches are per process and read
their capacity once."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_SHAPES = r"""
import json, sys
import torch
from harness.encoders.hf import HFEncoder
torch.set_num_threads(1)
encoder = HFEncoder(sys.argv[1], batch_size=16, pooling="mean")
model, _ = encoder._load()

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

with torch.inference_mode():
    ids = torch.ones(16, 130, dtype=torch.long)
    model(input_ids=ids, attention_mask=ids)             # the largest batch first: its buffers are the baseline
    before = rss_mb()
    for length in range(2, int(sys.argv[2])):
        ids = torch.ones(16, length, dtype=torch.long)
        model(input_ids=ids, attention_mask=ids)
print(json.dumps({"added_mb": rss_mb() - before, "fused": encoder.fused}))
"""


def _added(model_dir, lengths: int, **env: str) -> dict:
    caps = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    environ = {k: v for k, v in os.environ.items() if k not in caps}
    out = subprocess.run([sys.executable, "-c", _SHAPES, str(model_dir), str(lengths)], capture_output=True,
                         text=True, check=True, timeout=600, env={**environ, "HARNESS_NUM_THREADS": "1", **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_batches_of_many_lengths_add_bounded_memory(tiny_bert_dir):
    bounded = _added(tiny_bert_dir, 66)                   # 64 distinct batch shapes through the fused linear
    assert bounded["fused"]["linear"] > 0
    assert bounded["added_mb"] < 40                       # measured 12 MB (128 shapes: 267 MB with the defaults)


@pytest.mark.slow
def test_the_default_onednn_caches_would_grow(tiny_bert_dir):
    """What the bound prevents: with oneDNN's default capacities the same batches keep ~2 MB a shape."""
    grown = _added(tiny_bert_dir, 130, LRU_CACHE_CAPACITY="1024", ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024")
    bounded = _added(tiny_bert_dir, 130)
    assert grown["added_mb"] > 100 and grown["added_mb"] > 5 * bounded["added_mb"], (grown, bounded)
