"""Paired significance statistics on per-query scores.

Public API::

    from harness.stats import compare_systems, compare_suite, StatsOptions

    report = compare_systems({"bm25": r0, "dense": r1}, ["ndcg@10"],
                             options=StatsOptions(test="randomization", seed=1),
                             correction="holm", alpha=0.05)
    report.get("dense", "ndcg@10").p_adjusted

Building blocks: :func:`paired_ttest`, :func:`randomization_test`,
:func:`bootstrap_ci`, :func:`bootstrap_test`, :func:`effect_size`,
:func:`win_tie_loss` (on aligned arrays), :func:`align` (pairing by query id with
an explicit missing-query policy), :func:`adjust_pvalues` (Bonferroni, Holm,
Benjamini-Hochberg) and :func:`compare_aggregate` (macro averages over datasets).
Decisions within Monte Carlo error of their corrected threshold are decided by
:func:`resolve_sign_flip` (exact p, exact bounds or the saddlepoint) and listed in
``ComparisonReport.resolved`` (:class:`ResolvedDecision`).
"""
from harness.stats.aggregate import AGGREGATE_METHODS, compare_aggregate
from harness.stats.align import MISSING_POLICIES, MissingQueriesError, PairedScores, align
from harness.stats.compare import TESTS, Comparison, StatsOptions, compare_pair
from harness.stats.correction import CORRECTIONS, adjust_pvalues
from harness.stats.paired import (
    StatisticsError,
    TestResult,
    bootstrap_ci,
    bootstrap_test,
    effect_size,
    paired_ttest,
    randomization_test,
    win_tie_loss,
)
from harness.stats.resolve import Resolution, resolve_sign_flip
from harness.stats.seeds import comparison_rng, comparison_seed
from harness.stats.suite import (
    FAMILIES,
    ComparisonReport,
    ResolvedDecision,
    apply_correction,
    compare_suite,
    compare_systems,
)

__all__ = [
    "AGGREGATE_METHODS", "CORRECTIONS", "FAMILIES", "MISSING_POLICIES", "TESTS",
    "Comparison", "ComparisonReport", "MissingQueriesError", "PairedScores", "Resolution", "ResolvedDecision",
    "StatisticsError", "StatsOptions", "TestResult",
    "adjust_pvalues", "align", "apply_correction", "bootstrap_ci", "bootstrap_test", "compare_aggregate",
    "compare_pair", "compare_suite", "compare_systems", "comparison_rng", "comparison_seed", "effect_size",
    "paired_ttest", "randomization_test", "resolve_sign_flip", "win_tie_loss",
]
