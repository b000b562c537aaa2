"""``harness doctor`` on this machine: every check agrees with what the libraries themselves report."""
from __future__ import annotations

import importlib.util
import json

import torch

from harness.cli import main
from harness.errors import ConfigError

NAMES = ["cuda", "bf16", "faiss-gpu", "java", "cmteb/mteb", "seismic", "cluster/submitit", "ray", "topics/fasttext",
         "bitsandbytes", "vllm", "playwright+chromium", "threads"]


def _checks(capsys) -> dict[str, dict]:
    assert main(["doctor", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in report["checks"]] == NAMES
    for c in report["checks"]:
        assert set(c) == {"name", "ok", "detail", "needed_for", "why_not"}
        assert bool(c["why_not"]) == (not c["ok"]) or c["name"] == "threads"      # a reason for every "no"
    return {c["name"]: c for c in report["checks"]}


def test_doctor_reports_what_this_machine_has(capsys):
    from harness.retrieval.dense import gpu_count
    from harness.retrieval.java import find_java_runtime

    checks = _checks(capsys)
    assert checks["cuda"]["ok"] == torch.cuda.is_available()
    assert checks["cuda"]["detail"].startswith(f"torch {torch.__version__}")
    if not torch.cuda.is_available():
        assert checks["bf16"]["ok"] is False and "CUDA GPU" in checks["bf16"]["why_not"]
        assert ("no CUDA" in checks["cuda"]["why_not"]) == (torch.version.cuda is None)
    assert checks["faiss-gpu"]["ok"] == (gpu_count() > 0)
    assert f"sees {gpu_count()} GPU(s)" in checks["faiss-gpu"]["detail"]
    runtime = find_java_runtime()
    assert checks["java"]["ok"] and checks["java"]["detail"].startswith(f"Java {runtime.major} from {runtime.source}")
    for name, module in (("cmteb/mteb", "mteb"), ("seismic", "seismic"), ("cluster/submitit", "submitit"),
                         ("ray", "ray"), ("topics/fasttext", "fasttext"), ("vllm", "vllm")):
        assert checks[name]["ok"] == (importlib.util.find_spec(module) is not None), name
    if importlib.util.find_spec("ray") is None:
        assert checks["ray"]["why_not"] == "pip install 'retrieval-harness[ray]'"
    if importlib.util.find_spec("bitsandbytes") is None or not torch.cuda.is_available():
        assert checks["bitsandbytes"]["ok"] is False
    assert f"torch uses {torch.get_num_threads()} thread(s)" in checks["threads"]["detail"]


def test_text_output_and_a_missing_java_says_why(capsys, monkeypatch):
    import harness.retrieval.java as java

    def no_java():
        raise ConfigError("BM25 (Pyserini/Lucene) needs Java 21+; tried: JAVA_HOME=/nowhere (no Java found there)")

    monkeypatch.setattr(java, "find_java_runtime", no_java)
    checks = _checks(capsys)
    assert checks["java"]["ok"] is False and "JAVA_HOME=/nowhere" in checks["java"]["why_not"]
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "[--] java" in out and "why not: BM25 (Pyserini/Lucene) needs Java 21+" in out
    assert out.count("[ok]") + out.count("[--]") == len(NAMES)
