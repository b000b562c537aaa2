"""Clean exits: no native thread may enter Python while the interpreter finalizes.

The fast path of ``read_run`` handed pyarrow's streaming CSV reader a Python file: its read-ahead
thread called back into Python for each block, went on doing so after a bad block had ended the
loop, and kept Python ``bytes`` behind every block, released on whichever pyarrow thread dropped it
last.  When the command then exited at once, such a thread entered the finalizing interpreter and
the process died with SIGABRT (``terminate called without an active exception`` or ``Fatal Python
error: PyGILState_Release``) instead of exiting 2 with its one-line error.  The blocks are now read
on the calling thread and handed to pyarrow as its own memory (``harness.data.trec_fast._LineBlocks``);
the BM25 search threads, attached to the JVM, are joined even when the wait for them is interrupted.
``scripts/exit-loop`` is the long measurement (hundreds of exits of evaluate / eval / run).
"""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.data import trec_fast
from harness.data.trec_fast import read_run_columns

MARKERS = ("terminate called", "Aborted", "Fatal Python error", "egmentation", "Traceback")
SMALL_BLOCK = 1 << 16       # many read-ahead blocks from a file of a few MB


def write_bad_run(path: Path, queries: int) -> Path:
    """A run of ``queries`` x 1000 lines whose first line has a malformed score (about 32 kB a query)."""
    with open(path, "w") as f:
        f.write("q0 Q0 d0-0 1 not-a-number sys\n")
        for q in range(queries):
            f.write("".join(f"q{q} Q0 d{q}-{r} {r + 1} {1.0 / (r + 1):.6f} sys\n" for r in range(1000)))
    return path


def assert_clean(proc: subprocess.CompletedProcess, expected: int) -> None:
    found = [m for m in MARKERS if m in proc.stderr]
    assert proc.returncode == expected and not found, (proc.returncode, found, proc.stderr[-2000:])


def test_fast_reader_hands_pyarrow_no_python_object(tmp_path, monkeypatch):
    """The run reader gives pyarrow its own memory only: no Python file (its read-ahead thread would call into
    Python) and no ``py_buffer`` (a Python object released wherever pyarrow drops the buffer)."""
    path = write_bad_run(tmp_path / "bad.trec", queries=100)
    inputs: list[object] = []
    read_csv = trec_fast.pacsv.read_csv

    def refused(*args, **kwargs):
        raise AssertionError("a Python object handed to pyarrow")

    def watched_read_csv(source, *args, **kwargs):
        inputs.append(source)
        return read_csv(source, *args, **kwargs)

    monkeypatch.setattr(trec_fast.pacsv, "open_csv", refused)
    monkeypatch.setattr(trec_fast.pa, "py_buffer", refused)
    monkeypatch.setattr(trec_fast.pacsv, "read_csv", watched_read_csv)
    assert read_run_columns(path, block_size=SMALL_BLOCK) is None
    path.write_text(path.read_text().split("\n", 1)[1])      # the same run without its bad first line
    assert read_run_columns(path, block_size=SMALL_BLOCK) is not None
    assert len(inputs) > 30 and all(isinstance(source, trec_fast.pa.BufferReader) for source in inputs)


def test_good_runs_still_read_on_the_fast_path(tmp_path):
    path = tmp_path / "good.trec"
    with open(path, "w") as f:
        for q in range(60):
            f.write("".join(f"q{q} Q0 d{q}-{r} {r + 1} {1.0 / (r + 1):.6f} sys\n" for r in range(1000)))
    columns = read_run_columns(path, block_size=SMALL_BLOCK)
    assert columns is not None and len(columns.scores) == 60_000 and columns.last_tag == "sys"


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_exit_right_after_the_fast_path_gave_up(tmp_path, suffix):
    """The process exits as soon as the fast path has given up on a bad first block: before the fix, most such
    exits aborted (pyarrow's read-ahead thread entered the finalizing interpreter)."""
    path = write_bad_run(tmp_path / "bad.trec", queries=200)
    if suffix:
        path = path.with_name("bad.trec.gz")
        path.write_bytes(gzip.compress((tmp_path / "bad.trec").read_bytes(), compresslevel=1))
    script = textwrap.dedent(f"""
        from pathlib import Path
        from harness.data.trec_fast import read_run_columns
        assert read_run_columns(Path({str(path)!r}), block_size={SMALL_BLOCK}) is None
    """)
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert_clean(proc, 0)


def _cli(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def test_evaluate_exits_cleanly(tmp_path):
    """5 error exits (a malformed run line) and 5 normal exits of ``harness evaluate`` in real processes."""
    (tmp_path / "qrels.trec").write_text("q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 2\n")
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 0.9 sys\nq1 Q0 d2 2 0.4 sys\nq2 Q0 d2 1 0.8 sys\n")
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1 0.9 sys\nq1 Q0 d2 2 0,4 sys\nq2 Q0 d2 1 0.8 sys\n")
    env = {**os.environ, "HARNESS_NUM_THREADS": "1"}
    cases = [(run, 0 if run == "run.trec" else 2) for run in ("run.trec", "bad.trec") for _ in range(5)]
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda case: _cli(["evaluate", "--qrels", "qrels.trec", "--run", case[0]],
                                                tmp_path, env), cases))
    for (_, expected), proc in zip(cases, procs):
        assert_clean(proc, expected)
        if expected:
            assert proc.stderr.startswith("harness evaluate: error: ") and "bad.trec:2" in proc.stderr


@pytest.mark.slow
def test_bm25_eval_exits_cleanly(tmp_path, beir_folder):
    """5 error exits (``--k1 -1``: refused after the JVM started) and 5 normal exits of ``harness eval --model
    bm25`` (the JVM, Lucene's threads and pyarrow's pools alive at exit)."""
    folder = beir_folder({"d1": "alpha beta", "d2": "beta gamma", "d3": "gamma delta"},
                         {"q1": "alpha", "q2": "gamma"}, [("q1", "d1"), ("q2", "d3")])
    env = {**os.environ, "HARNESS_NUM_THREADS": "1", "HARNESS_CACHE": str(tmp_path / "cache")}
    base = ["eval", "--model", "bm25", "--dataset-dir", str(folder), "--format", "json"]
    assert_clean(_cli([*base, "--out", str(tmp_path / "warm")], tmp_path, env), 0)     # builds the index once
    cases = [(i, k1) for i in range(5) for k1 in (None, "-1")]
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda case: _cli([*base, "--out", str(tmp_path / f"out-{case[0]}-{case[1]}"),
                                                 *(["--k1", case[1]] if case[1] else [])], tmp_path, env), cases))
    for (_, k1), proc in zip(cases, procs):
        assert_clean(proc, 2 if k1 else 0)


def test_interrupted_bm25_search_leaves_no_thread_in_java(monkeypatch):
    """Ctrl-C while the main thread waits for the BM25 search threads: they stop after their current query and
    detach from the JVM before the error leaves ``_parallel_search`` (none is left inside a Java call while the
    interpreter finalizes).  Fake Java classes: no JVM is started."""
    from harness.retrieval import bm25

    searched: list[str] = []
    detached: list[str] = []

    class Searcher:
        def search(self, query, n):
            time.sleep(0.02)
            searched.append(query)
            return query

    java = types.SimpleNamespace(
        BagOfWords=lambda: types.SimpleNamespace(buildQuery=lambda field, analyzer, text: text),
        ObjectMapper=lambda: types.SimpleNamespace(writeValueAsString=lambda top: '{"scoreDocs": []}'))
    monkeypatch.setattr(bm25, "_java", lambda: java)
    monkeypatch.setitem(sys.modules, "jnius", types.SimpleNamespace(
        detach=lambda: detached.append(threading.current_thread().name)))
    join = threading.Thread.join
    interrupted: list[bool] = []

    def interrupted_join(self, timeout=None):
        if not interrupted:
            interrupted.append(True)
            time.sleep(0.1)
            raise KeyboardInterrupt
        return join(self, timeout)

    monkeypatch.setattr(threading.Thread, "join", interrupted_join)
    texts = [f"q{i}" for i in range(2000)]
    with pytest.raises(KeyboardInterrupt):
        bm25._parallel_search(Searcher(), None, texts, k=10, threads=4)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("bm25-search")]
    assert sorted(detached) == [f"bm25-search-{n}" for n in range(4)]
    assert 0 < len(searched) < len(texts)
