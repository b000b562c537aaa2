"""Tie-heavy runs and dict inputs: ``harness evaluate``'s path and ``Run/Qrels.from_dict`` vs pytrec_eval.

Two generated 5,000-query x 1,000-document TREC runs (string document ids, unique per query) with
the same qrels (10 graded judgements a query): a *tied* run whose scores are rounded to two decimals
(about a third of the rows tie with a neighbour, so the tie-break by document id does real work) and
an *untied* one (full-precision scores).  Each side works in a fresh subprocess, so that its peak
memory is its own, and times itself from inside (interpreter start and imports excluded):

* ``files``: read qrels + read run + evaluate five metrics (the ``harness evaluate`` path) against
  ``pytrec_eval.parse_qrel`` / ``parse_run`` + ``RelevanceEvaluator.evaluate``;
* ``dict``: the nested dicts are built untimed, then ``Qrels.from_dict`` + ``Run.from_dict`` (+ evaluate)
  against ``RelevanceEvaluator(qrels)`` + ``evaluate(run)`` (pytrec_eval converts the run inside
  ``evaluate``, so its construction cannot be timed apart: ours is compared with its whole).

Rounds are interleaved (the reference runs in pedantic's untimed ``setup``, ours is the timed target);
the assertions use the median of the per-round ratios of CPU seconds (all threads: robust to a shared
machine's load, no credit for parallel threads; tests/train/benchutil.py) and the peak memory of the
timed part (VmHWM reset before it, so the dicts themselves do not count).
Run with ``pytest -m "benchmark and slow" tests/speed/test_run_order_speed.py -s``.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from benchutil import PairedTimes, paired_from_children
from optional_extras import require_extra

require_extra("pytrec_eval")

pytestmark = [pytest.mark.benchmark(group="run-order-5000x1000"), pytest.mark.slow]

ROUNDS = 3
N_QUERIES, N_DOCS = 5_000, 1_000

# Prints {"cpu": timed CPU s, "wall": timed wall s, "build_cpu": construction CPU s (dict mode),
# "peak_mb": peak RSS growth of the timed part, "ndcg@10": mean value}.
_WORKER = r"""
import gc, json, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
mode, side, qrels_path, run_path = sys.argv[1:5]
if side == "harness":
    from harness.data import Qrels, Run, read_qrels, read_run
    from harness.metrics import evaluate
else:
    import pytrec_eval
if mode == "dict":
    qrels, run = {}, {}
    with open(qrels_path) as f:
        for line in f:
            q, _, d, r = line.split()
            qrels.setdefault(q, {})[d] = int(r)
    with open(run_path) as f:
        for line in f:
            q, _, d, _, s, _ = line.split()
            run.setdefault(q, {})[d] = float(s)
gc.collect()
with open("/proc/self/clear_refs", "w") as f:   # reset the peak (VmHWM) to the current RSS
    f.write("5")
rss_before = status("VmRSS")
started, cpu_started = time.perf_counter(), cpu()
build_cpu = 0.0
if side == "harness":
    if mode == "dict":
        q_obj, r_obj = Qrels.from_dict(qrels), Run.from_dict(run)
    else:
        q_obj, r_obj = read_qrels(qrels_path), read_run(run_path)
    build_cpu = cpu() - cpu_started
    ndcg = evaluate(q_obj, r_obj, ["ndcg@10", "recall@100", "mrr", "map", "p@10"]).aggregate["ndcg@10"]
else:
    if mode == "files":
        with open(qrels_path) as f:
            qrels = pytrec_eval.parse_qrel(f)
        with open(run_path) as f:
            run = pytrec_eval.parse_run(f)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "recip_rank", "map", "P.10"})
    build_cpu = cpu() - cpu_started
    per_query = evaluator.evaluate(run)
    ndcg = sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query)
wall, used = time.perf_counter() - started, cpu() - cpu_started
print(json.dumps({"cpu": used, "wall": wall, "build_cpu": build_cpu,
                  "peak_mb": (status("VmHWM") - rss_before) / 1024, "ndcg@10": float(ndcg)}))
"""


def write_collection(folder: Path, tied: bool, seed: int = 0) -> tuple[Path, Path]:
    """TREC qrels and a TREC run of N_QUERIES x N_DOCS (documents drawn from 1M, unique per query):
    scores rounded to two decimals when ``tied``, full precision otherwise."""
    rng = np.random.default_rng(seed)
    tag = "tied" if tied else "untied"
    run_path, qrels_path = folder / f"run_{tag}.trec", folder / f"qrels_{tag}.trec"
    with open(run_path, "w") as run_file, open(qrels_path, "w") as qrels_file:
        for start in range(0, N_QUERIES, 500):
            lines: list[str] = []
            judged: list[str] = []
            for q in range(start, start + 500):
                docs = rng.choice(1_000_000, N_DOCS + 5, replace=False)
                raw = rng.random(N_DOCS) * 10
                scores = np.sort(np.round(raw, 2) if tied else raw)[::-1].tolist()
                lines.extend(f"q{q} Q0 doc{d} {r} {s!r} run\n"
                             for r, (d, s) in enumerate(zip(docs[:N_DOCS].tolist(), scores), 1))
                picked = np.concatenate([docs[rng.choice(N_DOCS, 5, replace=False)], docs[N_DOCS:]])
                judged.extend(f"q{q} 0 doc{d} {g}\n" for d, g in zip(picked.tolist(), rng.integers(0, 3, 10).tolist()))
            run_file.write("".join(lines))
            qrels_file.write("".join(judged))
    return qrels_path, run_path


def measure(mode: str, side: str, qrels_path: Path, run_path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _WORKER, mode, side, str(qrels_path), str(run_path)],
                         capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def collections(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run_order")
    return {"tied": write_collection(folder, tied=True), "untied": write_collection(folder, tied=False)}


def _compare(benchmark, mode: str, paths: tuple[Path, Path], label: str) -> tuple[PairedTimes, dict]:
    """Interleaved rounds of pytrec_eval (setup) and ours (timed): the paired CPU times, and the
    construction ratio, peaks and values."""
    qrels_path, run_path = paths
    runs: dict[str, list[dict]] = {"harness": [], "pytrec_eval": []}
    benchmark.pedantic(lambda: runs["harness"].append(measure(mode, "harness", qrels_path, run_path)),
                       setup=lambda: runs["pytrec_eval"].append(measure(mode, "pytrec_eval", qrels_path, run_path)),
                       rounds=ROUNDS, iterations=1)
    times = paired_from_children(runs["pytrec_eval"], runs["harness"])
    peak = {s: max(r["peak_mb"] for r in rs) for s, rs in runs.items()}
    summary = {"peak_mb": peak,
               "build_ratio": statistics.median(h["build_cpu"] / p["cpu"]
                                                for h, p in zip(runs["harness"], runs["pytrec_eval"])),
               "ndcg@10": {s: rs[0]["ndcg@10"] for s, rs in runs.items()}}
    benchmark.extra_info.update(summary)
    times.report(benchmark, f"{label} {mode}, harness / pytrec_eval (construction / pytrec_eval "
                            f"{summary['build_ratio']:.2f}x, peak {peak['harness']:.0f} vs "
                            f"{peak['pytrec_eval']:.0f} MB)")
    assert summary["ndcg@10"]["harness"] == pytest.approx(summary["ndcg@10"]["pytrec_eval"], abs=1e-9)
    return times, summary


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_evaluate_from_files_vs_pytrec_eval(benchmark, collections, kind):
    times, summary = _compare(benchmark, "files", collections[kind], kind)
    # Measured on a loaded 2-core machine (load average 8.6-11.5), median round (rounds): before the buffer
    # encoder of the doc ids (read_run_columns -> encode_utf8_chunks) 0.85x tied (0.79-0.85), 0.71x untied
    # (0.67-0.79), peak 604 / 520 MB vs pytrec_eval's 826; after 0.40x tied (0.40-0.45), 0.33x untied
    # (0.31-0.33), peak 498 / 434 MB; with HARNESS_NUM_THREADS=1 0.45x (0.36-0.45) / 0.37x (0.31-0.37).
    # Bound 0.7x (issue 31's target for the untied run, here for both): 37% above the slowest round seen.
    times.assert_at_most(0.7, f"{kind} files: harness / pytrec_eval")
    assert summary["peak_mb"]["harness"] < summary["peak_mb"]["pytrec_eval"]


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_from_dict_vs_pytrec_eval(benchmark, collections, kind):
    times, summary = _compare(benchmark, "dict", collections[kind], kind)
    # Issue 31's goal, at least as fast as pytrec_eval: median rounds 0.77x tied (0.72-0.87) and 0.79x untied
    # (0.73-0.82) at load average 9.7-11.2 (construction alone 0.68x / 0.70x; peak 210 / 185 MB vs 237).
    # Before: row by row 7.95x / 5.59x, then 2.61x / 2.46x, then (encode_strings) about 0.92x / 0.84x.
    # 1.0x sits 15% above the slowest round seen.
    times.assert_at_most(1.0, f"{kind} dict: harness / pytrec_eval")
    assert summary["build_ratio"] <= 1.0
