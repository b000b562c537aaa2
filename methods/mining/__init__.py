"""Hard-negative mining (paper 004, METHODS.md 5): selection strategies, the false-negative
vote and language/topic batches.  Candidate lists come from the engine
(:mod:`harness.retrieval.pool`); ``harness mine`` writes mined training rows; the ``mined`` training
method (:mod:`methods.mining.method`, registered on import) mines and then fine-tunes.
"""
from methods.mining import method as _method  # noqa: F401  (registers the "mined" method)
from methods.mining.batches import language_topic_batches, loss_weights, weighted_batch_loss
from methods.mining.selection import (
    STRATEGIES,
    Selection,
    positive_threshold,
    sample_from_pool,
    select,
    select_negatives,
)
from methods.mining.votes import FILTER_MODES, fn_vote, keeps

__all__ = [
    "FILTER_MODES",
    "STRATEGIES",
    "Selection",
    "fn_vote",
    "keeps",
    "language_topic_batches",
    "loss_weights",
    "positive_threshold",
    "sample_from_pool",
    "select",
    "select_negatives",
    "weighted_batch_loss",
]
