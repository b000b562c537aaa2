"""Every file and folder name of the results layout, in one place.

Under a results root::

    cells/train/<key>/                  a training run (TRAIN_RUN_FILE while it runs, TRAIN_DONE_FILE when finished)
    cells/eval/<key>/                   a result directory (RESULT_RUN_FILE, PER_QUERY_FILE, METRICS_FILE,
                                        MANIFEST_FILE)
    suites/<suite>/<scale>/             a suite's report: TABLE_MD, TABLE_TEX, COMPARISONS_FILE, SUMMARY_FILE,
                                        RESOLVED_SUITE_FILE, HTML_DIR/
        results/<variant>/<benchmark>/  the cell's result under a stable name

The writers (:mod:`harness.store`, :mod:`harness.train`, the suite runner) and the readers (tables,
layouts, the HTML report, ``harness check``, :mod:`harness.results`) take the names from here.
Changing one changes what is on disk: stored results and regression expectations name these files.
"""
from __future__ import annotations

# ---- a result directory (harness.store.ResultStore)
RESULT_RUN_FILE = "run.trec.gz"
PER_QUERY_FILE = "per_query.tsv.gz"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"

# ---- a training run folder (harness.train)
TRAIN_RUN_FILE = "run.json"        # the run's record, written when it starts
TRAIN_DONE_FILE = "done.json"      # written last: the run finished

# ---- the folders of a results root (harness.ablation.paths)
CELLS_DIR = "cells"
TRAIN_CELLS_DIR = "train"
EVAL_CELLS_DIR = "eval"
SUITES_DIR = "suites"
CELL_RESULTS_DIR = "results"       # suites/<suite>/<scale>/results/<variant>/<benchmark>

# ---- a suite's report folder, suites/<suite>/<scale>/
TABLE_MD = "table.md"
TABLE_TEX = "table.tex"
COMPARISONS_FILE = "comparisons.json"
SUMMARY_FILE = "summary.json"
RESOLVED_SUITE_FILE = "suite.resolved.json"
HTML_DIR = "html"
