"""Encoding peak memory stays flat with the corpus size at a fixed shard size.

Corpora of 20,000 and 100,000 SciFact-like documents (real SciFact passages drawn with
replacement, two joined per document, so most reach the 256-token limit) are encoded into the
embedding cache with shard size 5,000, each in a fresh subprocess.  The model is the 2-layer
tiny BERT with the real MiniLM WordPiece tokenizer: the tokens, their count and the padding are
MiniLM's, only the forward is cheap (the memory in question is the tokenisation's, and the
vectors of one shard).  Peak RSS is measured over the encoding alone: the kernel's high-water
mark is reset (``/proc/self/clear_refs``) after the corpus is in memory, so what is reported is
what encoding adds on top of the corpus texts.

What used to grow with the corpus: the tokenizer reads each text through CPython's UTF-8 view of the
str, which a non-ASCII str (41% of these documents) then keeps for its lifetime, so the corpus itself
grew by ~1.3 KB a document as it was encoded (213 MB added at 20k documents, 347 MB at 100k).  The
encoder now tokenises copies (harness.encoders.texts); the worker also checks that the corpus strings
keep their size.

Run with ``pytest -m slow tests/speed/test_encoding_memory.py -s``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark, pytest.mark.needs_shared]

SHARD_SIZE = 5_000

_WORKER = r"""
import json, os, sys, time
import numpy as np
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from harness.data import Corpus, load_beir
from harness.encoders.cache import encode_corpus
from harness.encoders.hf import HFEncoder

scifact, model, cache, n, shard = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
source = load_beir(scifact, "test").corpus
passages = source.passages()
rng = np.random.default_rng(0)
picks = rng.integers(0, len(passages), (n, 2))
texts = [passages[a] + " " + passages[b] for a, b in picks.tolist()]
corpus = Corpus([f"s{i}" for i in range(n)], [""] * n, texts)
del source, passages, picks
corpus_bytes = sum(map(sys.getsizeof, texts))
encoder = HFEncoder(model, batch_size=64, doc_max_length=256, pooling="mean", normalize=True)
encoder._load()
import torch
torch.set_num_threads(1)                 # the memory, not the speed, is measured: one thread is enough

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
before = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")                    # reset the peak-RSS mark: measure the encoding alone
started = time.perf_counter()
emb = encode_corpus(encoder, corpus, cache, shard_size=shard, progress=False)
seconds = time.perf_counter() - started
print(json.dumps({"docs": n, "corpus_grew_bytes": sum(map(sys.getsizeof, texts)) - corpus_bytes,
                  "rss_before_mb": before / 2**20, "peak_mb": status("VmHWM:") / 2**20,
                  "added_mb": (status("VmHWM:") - before) / 2**20, "seconds": seconds,
                  "shards": len(emb.layout)}))
"""


def _measure(shared_data: Path, model: Path, cache: Path, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _WORKER, str(shared_data / "scifact"), str(model), str(cache), str(n),
                          str(SHARD_SIZE)], capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_encoding_peak_memory_is_flat_in_corpus_size(shared_data, tmp_path):
    from harness.encoders.tiny import make_tiny_bert

    model = make_tiny_bert(tmp_path / "tiny-bert")
    small = _measure(shared_data, model, tmp_path / "cache", 20_000)
    large = _measure(shared_data, model, tmp_path / "cache", 100_000)
    for r in (small, large):
        print(f"\n{r['docs']} docs, shard {SHARD_SIZE} ({r['shards']} shards): encoding added {r['added_mb']:.0f} MB "
              f"over {r['rss_before_mb']:.0f} MB (corpus + model), peak {r['peak_mb']:.0f} MB, {r['seconds']:.0f} s")
    assert small["shards"] == 4 and large["shards"] == 20
    assert small["corpus_grew_bytes"] == large["corpus_grew_bytes"] == 0     # nothing stays on the corpus strings
    # Five times the documents, the same added peak: within 30 MB or 15% (allocator noise on a shared machine).
    # Measured here (2 shared cores, heavily loaded): 213 MB (20k) vs 347 MB (100k) before; 176 vs 211 MB with
    # the UTF-8 fix alone; 200 vs 219 MB (19 MB apart) with the oneDNN primitive caches bounded too
    # (harness.encoders.fusion).  Per shard the peak levels off after the first one (40k docs: 200, 200, 204, 205,
    # 206, 206, 208, 208 MB): what remains is the tokenisation window's and one batch's working memory.
    assert abs(large["added_mb"] - small["added_mb"]) <= max(30.0, 0.15 * small["added_mb"]), (small, large)
