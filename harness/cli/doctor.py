"""``harness doctor``: what this machine can run, and why not.

Each check says whether a capability is available, what it found (versions, devices) and, when it is not
available, why and how to get it.  Nothing is installed, downloaded or started (no JVM, no GPU kernel):
the checks read versions and ask the libraries what they see, so the command takes about a second."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

from harness.errors import ConfigError
from harness.retrieval import java


@dataclass
class Check:
    name: str
    ok: bool
    detail: str              # what was found
    needed_for: str          # what it enables
    why_not: str = ""        # when not ok: the reason and the remedy


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="print what this machine can run (GPU, faiss-gpu, Java, extras) and why not",
                       description="Check CUDA GPUs and bf16, faiss GPU support, Java for Lucene, the optional "
                                   "extras (cmteb/mteb, seismic, cluster/submitit, ray, topics/fasttext, bitsandbytes, "
                                   "vllm, playwright + chromium) and the thread count. Exit 0 whatever is missing.")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--devices", default=None, metavar="DEVICE[,DEVICE...]",
                   help="also check the encoding devices that harness eval --devices (or a suite's encoding: "
                        "devices) would use, e.g. cuda:0,cuda:1 or auto (every visible GPU, else cpu)")
    p.set_defaults(func=run)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _package(name: str, dist: str, module: str, needed_for: str, extra: str) -> Check:
    version = _version(dist)
    found = importlib.util.find_spec(module) is not None
    if version and found:
        return Check(name, True, f"{dist} {version}", needed_for)
    return Check(name, False, "not installed", needed_for, f"pip install {extra}")


def cuda_checks() -> list[Check]:
    import torch

    checks = []
    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = ("this torch build has no CUDA (CPU wheel); install a CUDA build of torch on a GPU machine"
               if not built else f"torch is built for CUDA {built} but sees no GPU (no driver or no device visible)")
        checks.append(Check("cuda", False, f"torch {torch.__version__}, 0 GPUs", "training and encoding on GPUs, "
                            "bf16/fp16 autocast on GPU, multi-GPU training (accelerate/torchrun)", why))
        checks.append(Check("bf16", False, "no GPU", "bf16 mixed precision on GPU (precision: bf16)",
                            "needs a CUDA GPU with bf16 (Ampere or newer); on CPU, bf16 autocast runs but slowly"))
        return checks
    n = torch.cuda.device_count()
    names = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(n)}))
    checks.append(Check("cuda", True, f"torch {torch.__version__}, CUDA {torch.version.cuda}, {n} GPU(s): {names}",
                        "training and encoding on GPUs, multi-GPU training (accelerate/torchrun)"))
    bf16 = torch.cuda.is_bf16_supported()
    checks.append(Check("bf16", bf16, "supported" if bf16 else "not supported by this GPU",
                        "bf16 mixed precision on GPU (precision: bf16)",
                        "" if bf16 else "use precision: fp16 on this GPU (pre-Ampere)"))
    return checks


def faiss_check() -> Check:
    version = _version("faiss-cpu") or _version("faiss-gpu-cu12") or _version("faiss-gpu")
    try:
        from harness.retrieval.dense import gpu_count  # lazy: optional extra (ImportError handled below)

        gpus = gpu_count()
    except ImportError as exc:
        return Check("faiss-gpu", False, "faiss not importable", "dense search on GPUs", str(exc))
    detail = f"faiss {version or '?'}, sees {gpus} GPU(s)"
    if gpus:
        return Check("faiss-gpu", True, detail, "dense exact search on GPUs")
    gpu_build = _version("faiss-gpu-cu12") or _version("faiss-gpu")
    return Check("faiss-gpu", False, detail, "dense exact search on GPUs (CPU search works everywhere)",
                 "faiss-gpu is installed but sees no GPU" if gpu_build
                 else "CPU-only faiss: on a GPU machine pip install 'retrieval-harness[gpu]' (faiss-gpu-cu12)")


def java_check() -> Check:
    try:
        rt = java.find_java_runtime()   # looked up at call time (tests replace it)
    except ConfigError as exc:
        return Check("java", False, "no Java 21+", "BM25 and Lucene impact search (Pyserini)", str(exc))
    return Check("java", True, f"Java {rt.major} from {rt.source} ({rt.home})",
                 "BM25 and Lucene impact search (Pyserini)")


def chromium_check() -> Check:
    playwright = _version("playwright")
    browser = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
                   None)
    if playwright and browser:
        return Check("playwright+chromium", True, f"playwright {playwright}, {browser}",
                     "the HTML report's headless-browser test")
    missing = [what for what, ok in (("playwright (pip install 'retrieval-harness[dev]')", playwright),
                                     ("a chromium binary (apt-get install chromium)", browser)) if not ok]
    return Check("playwright+chromium", False, f"playwright {playwright or 'missing'}, browser {browser or 'missing'}",
                 "the HTML report's headless-browser test", "missing " + " and ".join(missing))


def threads_check() -> Check:
    import torch

    env = os.environ.get("HARNESS_NUM_THREADS")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Check("threads", True, f"{cpus} CPU(s) usable, torch uses {torch.get_num_threads()} thread(s)"
                 + (f", HARNESS_NUM_THREADS={env}" if env else ""),
                 "CPU encoding and training (--threads or HARNESS_NUM_THREADS sets it)")


def devices_check(devices: str) -> Check:
    """The devices a multi-device encoding would use (``--devices``), or why they cannot be used."""
    from harness.encoders.devices import describe_devices, parse_devices  # lazy (start-up speed): imports numpy

    needed_for = "corpus encoding with one worker process per device (harness eval --devices, encoding: devices)"
    try:
        return Check("encoding devices", True, describe_devices(parse_devices(devices)), needed_for)
    except ConfigError as exc:
        return Check("encoding devices", False, f"asked for {devices}", needed_for, str(exc))


def all_checks() -> list[Check]:
    """Every check, in the order printed."""
    checks = [*cuda_checks(), faiss_check(), java_check()]
    checks += [
        _package("cmteb/mteb", "mteb", "mteb", "the C-MTEB benchmark family (--suite cmteb; task definitions)",
                 "'retrieval-harness[cmteb]'"),
        _package("seismic", "pyseismic-lsr", "seismic", "approximate sparse retrieval (--sparse-backend seismic)",
                 "'retrieval-harness[seismic]'"),
        _package("cluster/submitit", "submitit", "submitit", "harness run --executor submitit (Slurm job arrays)",
                 "'retrieval-harness[cluster]'"),
        _package("ray", "ray", "ray", "harness run --executor ray", "'retrieval-harness[ray]'"),
        _package("topics/fasttext", "fasttext-wheel", "fasttext", "fastText topic batches of the mining method",
                 "'retrieval-harness[topics]'"),
    ]
    bnb = _package("bitsandbytes", "bitsandbytes", "bitsandbytes", "QLoRA (echo-splade quantization: 4bit)",
                   "bitsandbytes (and a CUDA GPU)")
    if bnb.ok and not checks[0].ok:
        bnb = Check(bnb.name, False, bnb.detail, bnb.needed_for, "installed, but QLoRA needs a CUDA GPU")
    checks.append(bnb)
    checks.append(_package("vllm", "vllm", "vllm", "the vllm:<model> judge/generator of harness mine (GPU)",
                           "vllm, in the environment where the judge runs (needs a CUDA GPU)"))
    checks.append(chromium_check())
    checks.append(threads_check())
    return checks


def run(args: argparse.Namespace) -> int:
    checks = all_checks()
    if getattr(args, "devices", None):
        checks.append(devices_check(args.devices))
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": sys.platform,
                            "checks": [asdict(c) for c in checks]}
    if args.format == "json":
        print(json.dumps(info, indent=2))
        return 0
    print(f"python {info['python']} on {info['platform']}")
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"  [{'ok' if c.ok else '--'}] {c.name:<{width}}  {c.detail}")
        print(f"  {'':4} {'':<{width}}  for: {c.needed_for}")
        if not c.ok:
            print(f"  {'':4} {'':<{width}}  why not: {c.why_not}")
    return 0
