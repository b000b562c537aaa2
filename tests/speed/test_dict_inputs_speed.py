"""``Qrels.from_dict`` + ``Run.from_dict`` + ``evaluate`` against pytrec_eval's construction + evaluation.

The input is what a pytrec_eval user holds: nested dicts ``{query: {doc: score}}`` of 5,000 queries x
1,000 documents (string ids ``doc<n>`` drawn from 1M, unique per query, each query's documents in rank
order as a run file lists them) and ``{query: {doc: grade}}`` qrels (10 judgements a query, 5 of them
retrieved).  Two runs: *tied* (scores rounded to two decimals: a third of the rows tie with a neighbour,
so the tie-break by document id does real work) and *untied* (full precision).

Each side works in a fresh subprocess (its peak memory is its own, and a library it imports lazily is
paid for, as a user's first call pays for it).  The dicts are built untimed; then ours times
``Qrels.from_dict`` + ``Run.from_dict`` + ``evaluate`` (five metrics), pytrec_eval times
``RelevanceEvaluator(qrels, measures)`` + ``evaluate(run)`` (it converts the run inside ``evaluate``,
so its construction cannot be timed apart: ours is compared with its whole).  Rounds are interleaved
(pytrec_eval in pedantic's untimed ``setup``, ours the timed target); the bound is on the median of the
per-round ratios of process CPU seconds (all threads), and wall seconds and peak RSS growth of the
timed part are reported.  Run with ``pytest -m "benchmark and slow" tests/speed/test_dict_inputs_speed.py -s``.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from benchutil import paired_from_children
from optional_extras import require_extra

require_extra("pytrec_eval")

pytestmark = [pytest.mark.benchmark(group="dict-inputs-5000x1000"), pytest.mark.slow]

ROUNDS = 5
N_QUERIES, N_DOCS = 5_000, 1_000
METRICS = ["ndcg@10", "recall@100", "mrr", "map", "p@10"]
# Measured on a loaded 2-core machine, 5 interleaved rounds, CPU ratio median (rounds): before encode_strings
# 2.58x / 2.65x; with it 0.92 tied (0.86-1.06) and 0.84 untied (0.82-0.91) at load 8-10; after the uint8 key
# packing and the queries flattened in string order (no block moved), at load 10.9-12.1: 0.67 tied (0.63-0.91,
# wall 0.67, construction alone 0.61) and 0.66 untied (0.59-0.86, wall 0.66, construction 0.60), peak RSS
# growth 210 / 185 MB vs pytrec_eval's 237.  Issue 31's "at least as fast as pytrec_eval": 1.0, 9% above the
# slowest round seen.
BOUND = {"tied": 1.0, "untied": 1.0}
MEASURES = ["ndcg_cut.10", "recall.100", "recip_rank", "map", "P.10"]

# argv: side (harness | pytrec_eval), tied (0/1), queries, docs.  Prints {"cpu": timed CPU s,
# "wall": timed wall s, "build_cpu": our construction's CPU s, "peak_mb": peak RSS growth of the
# timed part, "ndcg@10": mean value}.
_WORKER = r"""
import gc, json, resource, sys, time
import numpy as np

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

side, tied, n_queries, n_docs = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
metrics, measures = json.loads(sys.argv[5]), json.loads(sys.argv[6])
if side == "harness":
    from harness.data import Qrels, Run
    from harness.metrics import evaluate
else:
    import pytrec_eval
rng = np.random.default_rng(0)
run, qrels = {}, {}
for q in range(n_queries):
    docs = rng.choice(1_000_000, n_docs + 5, replace=False)
    raw = rng.random(n_docs) * 10
    scores = np.sort(np.round(raw, 2) if tied else raw)[::-1]
    names = [f"doc{d}" for d in docs.tolist()]
    run[f"q{q}"] = dict(zip(names[:n_docs], scores.tolist()))
    judged = rng.choice(n_docs, 5, replace=False).tolist() + list(range(n_docs, n_docs + 5))
    qrels[f"q{q}"] = {names[i]: g for i, g in zip(judged, rng.integers(0, 3, 10).tolist())}
gc.collect()
with open("/proc/self/clear_refs", "w") as f:   # reset the peak (VmHWM) to the current RSS
    f.write("5")
rss_before = status("VmRSS")
started, cpu_started = time.perf_counter(), cpu()
if side == "harness":
    q_obj, r_obj = Qrels.from_dict(qrels), Run.from_dict(run)
    build_cpu = cpu() - cpu_started
    ndcg = evaluate(q_obj, r_obj, metrics).aggregate["ndcg@10"]
else:
    per_query = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)
    build_cpu = 0.0
    ndcg = sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query)
wall, used = time.perf_counter() - started, cpu() - cpu_started
print(json.dumps({"cpu": used, "wall": wall, "build_cpu": build_cpu,
                  "peak_mb": (status("VmHWM") - rss_before) / 1024, "ndcg@10": float(ndcg)}))
"""


def measure(side: str, tied: bool, n_queries: int = N_QUERIES, n_docs: int = N_DOCS) -> dict:
    """One side's timed part in a fresh interpreter (see the module docstring)."""
    out = subprocess.run([sys.executable, "-c", _WORKER, side, "1" if tied else "0", str(n_queries), str(n_docs),
                          json.dumps(METRICS), json.dumps(MEASURES)],
                         capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_from_dict_and_evaluate_vs_pytrec_eval(benchmark, kind):
    tied = kind == "tied"
    runs: dict[str, list[dict]] = {"harness": [], "pytrec_eval": []}
    benchmark.pedantic(lambda: runs["harness"].append(measure("harness", tied)),
                       setup=lambda: runs["pytrec_eval"].append(measure("pytrec_eval", tied)),
                       rounds=ROUNDS, iterations=1)
    times = paired_from_children(runs["pytrec_eval"], runs["harness"])
    peak = {side: max(r["peak_mb"] for r in rs) for side, rs in runs.items()}
    build = sorted(h["build_cpu"] / p["cpu"] for h, p in zip(runs["harness"], runs["pytrec_eval"]))
    benchmark.extra_info.update(times.info())
    benchmark.extra_info.update({"peak_mb": peak, "construction_ratio_rounds": build})
    times.report(None, f"{kind} dicts, from_dict + evaluate vs pytrec_eval")
    print(f"  construction alone / pytrec_eval: median {build[len(build) // 2]:.3f} (rounds "
          f"{', '.join(f'{r:.3f}' for r in build)}); peak RSS growth {peak['harness']:.0f} MB vs "
          f"pytrec_eval {peak['pytrec_eval']:.0f} MB")
    assert runs["harness"][0]["ndcg@10"] == pytest.approx(runs["pytrec_eval"][0]["ndcg@10"], abs=1e-12)
    times.assert_at_most(BOUND[kind], f"{kind} from_dict + evaluate")
