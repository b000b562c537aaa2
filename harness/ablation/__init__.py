"""Ablation suites: a YAML file names variants x benchmarks x scales; the runner expands,
trains (cached), evaluates (cached), compares against the baseline and prints the table.

Public API::

    from harness.ablation import load_suite, run_suite
    suite = load_suite("quickstart")             # a name in suites/ablations/ or a path
    outcome = run_suite(suite, scale="tiny", results_root="results")
    print(outcome.markdown)
"""
from harness.ablation.cells import EvalCell, TrainCell, expand_cells
from harness.ablation.runner import SuiteOutcome, run_suite
from harness.ablation.spec import AblationSuite, list_suite_files, load_suite

__all__ = ["AblationSuite", "EvalCell", "SuiteOutcome", "TrainCell", "expand_cells", "list_suite_files",
           "load_suite", "run_suite"]
