"""``harness evaluate`` from files (read qrels + read run + evaluate) vs pytrec_eval and ranx.

A generated 5,000 x 1,000 TREC run (about 150 MB) and its qrels are written once; each side then
reads both files and computes the same six metrics in a fresh subprocess (so that its peak RSS,
``ru_maxrss``, is its own: imports included, the same for all sides), timing parse + evaluate from
inside (interpreter start and imports excluded).  Rounds are interleaved: the references run in the
untimed pedantic ``setup``, ours is the timed target, and the assertions compare the median of the
per-round ratios harness / pytrec_eval (tests/train/benchutil.py) of CPU seconds of all the child's
threads, as the issue measured: robust to a shared machine's load, and no credit for parallel threads;
wall seconds and ranx are reported too) and the peak RSS of each.
A 50,000-query run's peak memory is measured by tests/speed/test_evaluate_50k_memory.py (a tie-heavier
run, through ``harness evaluate`` itself).

Run with ``pytest -m "benchmark and slow" tests/speed/test_trec_io_speed.py -s``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from benchutil import paired_from_children
from optional_extras import require_extra

require_extra("pytrec_eval")
pytest.importorskip("ranx")

pytestmark = [pytest.mark.benchmark(group="trec-io-5000x1000"), pytest.mark.slow]

ROUNDS = 3
# harness / pytrec_eval CPU seconds, median round.  Measured at load average 7-12 after the doc ids' buffer
# encoder: median 0.42, rounds 0.38-0.49 (peak RSS 492 MB vs pytrec_eval 852, ranx 1943; vs ranx 0.15x);
# 0.7 (issue 31's target for untied runs) is 43% over the slowest round.
MAX_RATIO = 0.7
METRICS = ["ndcg@10", "recall@100", "mrr", "map", "p@10"]

# Each worker prints {"seconds": parse + evaluate (wall), "cpu_seconds": the same in CPU time of all
# threads, "maxrss_kb": peak RSS, "ndcg@10": value}.
_WORKER = r"""
import json, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
side, qrels_path, run_path = sys.argv[1:4]
if side == "harness":
    from harness.data import read_qrels, read_run
    from harness.metrics import evaluate
    started, cpu_started = time.perf_counter(), cpu()
    result = evaluate(read_qrels(qrels_path), read_run(run_path), ["ndcg@10", "recall@100", "mrr", "map", "p@10"])
    ndcg = result.aggregate["ndcg@10"]
elif side == "pytrec_eval":
    import pytrec_eval
    started, cpu_started = time.perf_counter(), cpu()
    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    per_query = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.10", "recall.100", "recip_rank", "map", "P.10"}).evaluate(run)
    ndcg = sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query)
else:
    from ranx import Qrels, Run, evaluate
    started, cpu_started = time.perf_counter(), cpu()
    qrels = Qrels.from_file(qrels_path, kind="trec")
    run = Run.from_file(run_path, kind="trec")
    ndcg = evaluate(qrels, run, ["ndcg@10", "recall@100", "mrr", "map", "precision@10"])["ndcg@10"]
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "ndcg@10": float(ndcg)}))
"""


def write_collection(folder: Path, n_queries: int, n_docs: int, seed: int = 0) -> tuple[Path, Path]:
    """A TREC run (``n_docs`` distinct documents per query out of 1M, 4-decimal scores, so with ties)
    and TREC qrels (10 graded judgements per query, 5 of them retrieved)."""
    rng = np.random.default_rng(seed)
    run_path, qrels_path = folder / f"run_{n_queries}.trec", folder / f"qrels_{n_queries}.trec"
    pool = 1_000_000
    with open(run_path, "w") as run_file, open(qrels_path, "w") as qrels_file:
        for start in range(0, n_queries, 1000):
            lines, judged = [], []
            for q in range(start, min(start + 1000, n_queries)):
                docs = rng.choice(pool, n_docs + 5, replace=False)
                scores = np.sort(np.round(rng.random(n_docs) * 30, 4))[::-1].tolist()
                lines.extend(f"q{q} Q0 doc{d} {r} {s} run\n" for r, (d, s) in enumerate(zip(docs[:n_docs].tolist(),
                                                                                           scores), 1))
                picked = np.concatenate([docs[:n_docs][rng.choice(n_docs, 5, replace=False)], docs[n_docs:]])
                judged.extend(f"q{q} 0 doc{d} {g}\n" for d, g in zip(picked.tolist(),
                                                                    rng.integers(0, 3, 10).tolist()))
            run_file.write("".join(lines))
            qrels_file.write("".join(judged))
    return qrels_path, run_path


def measure(side: str, qrels_path: Path, run_path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _WORKER, side, str(qrels_path), str(run_path)],
                         capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def collection_5k(tmp_path_factory):
    return write_collection(tmp_path_factory.mktemp("trec_io"), 5_000, 1_000)


def test_evaluate_from_files_vs_pytrec_eval_and_ranx(benchmark, collection_5k):
    qrels_path, run_path = collection_5k
    lines = 5_000 * 1_000
    runs: dict[str, list[dict]] = {"harness": [], "pytrec_eval": [], "ranx": []}

    def references():
        for side in ("pytrec_eval", "ranx"):
            runs[side].append(measure(side, qrels_path, run_path))

    def ours():
        runs["harness"].append(measure("harness", qrels_path, run_path))

    benchmark.pedantic(ours, setup=references, rounds=ROUNDS, iterations=1)
    times = paired_from_children(runs["pytrec_eval"], runs["harness"], cpu_key="cpu_seconds", wall_key="seconds")
    times.others = {"ranx": [r["cpu_seconds"] for r in runs["ranx"]]}
    peak_mb = {side: max(r["maxrss_kb"] for r in rs) / 1024 for side, rs in runs.items()}
    ndcg = {side: rs[0]["ndcg@10"] for side, rs in runs.items()}
    benchmark.extra_info.update({"run_lines": lines, "run_mb": round(run_path.stat().st_size / 2**20, 1),
                                 "peak_rss_mb": peak_mb, "ndcg@10": ndcg})
    times.report(benchmark, f"5000 x 1000 run ({run_path.stat().st_size / 2**20:.0f} MB), parse + evaluate, "
                            f"harness / pytrec_eval; peak RSS " + ", ".join(f"{s} {peak_mb[s]:.0f} MB" for s in runs)
                 + f"; harness {peak_mb['harness'] * 2**20 / lines:.0f} bytes of peak RSS per run line")
    assert ndcg["harness"] == pytest.approx(ndcg["pytrec_eval"], abs=1e-9)
    times.assert_at_most(MAX_RATIO, "harness / pytrec_eval, parse + evaluate")
    assert peak_mb["harness"] < peak_mb["pytrec_eval"]
