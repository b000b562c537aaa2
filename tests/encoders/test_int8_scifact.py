"""Quality guard for the int8 CPU backend: SciFact (test split) with MiniLM, fp32 vs dynamic int8.

Both runs go through ``harness eval`` (so the card and manifest are checked too) into one cache;
the nDCG@10 difference is printed and must stay within 0.003, and R@100 within 0.01.  Measured here
(per-channel int8): nDCG@10 0.6451 -> 0.6455 (+0.0004), R@100 0.9250 -> 0.9183 (-0.0067).
Minutes on two CPU cores (two full SciFact encodes), hence ``slow``.
"""
from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_shared]
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _eval(shared_data, tmp_path, name: str, *extra: str) -> dict:
    from harness.cli import main

    out = tmp_path / name
    assert main(["eval", "--model", "minilm", "--dataset-dir", str(shared_data / "scifact"), "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--format", "json", *extra]) == 0
    return {"metrics": json.loads((out / "metrics.json").read_text()),
            "manifest": json.loads((out / "manifest.json").read_text())}


def test_int8_ndcg_at_10_within_0_003_of_fp32(shared_data, tmp_path):
    fp32 = _eval(shared_data, tmp_path, "fp32")
    int8 = _eval(shared_data, tmp_path, "int8", "--backend", "int8")
    a, b = fp32["metrics"], int8["metrics"]
    a = a.get("aggregate", a)
    b = b.get("aggregate", b)
    diff = {m: b[m] - a[m] for m in ("ndcg@10", "recall@100")}
    print(f"\nSciFact minilm fp32 nDCG@10 {a['ndcg@10']:.4f} R@100 {a['recall@100']:.4f}; int8 nDCG@10 "
          f"{b['ndcg@10']:.4f} ({diff['ndcg@10']:+.4f}) R@100 {b['recall@100']:.4f} ({diff['recall@100']:+.4f}); "
          f"retrieve {fp32['manifest']['timings']['retrieve_s']:.0f} s vs "
          f"{int8['manifest']['timings']['retrieve_s']:.0f} s")
    assert "backend" not in fp32["manifest"]["encoder"]
    assert int8["manifest"]["encoder"]["backend"] == "int8-dynamic-per-channel-torch.ao"
    assert abs(diff["ndcg@10"]) <= 0.003
    assert abs(diff["recall@100"]) <= 0.01
