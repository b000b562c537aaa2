"""The representation heads moved to :mod:`harness.encoders.heads` (inference and training both use them).

Kept so ``harness.method``'s annotations and older imports still resolve; new code imports
:mod:`harness.encoders.heads`.
"""
from harness.encoders.heads import (
    AGGREGATIONS,
    BACKBONE_CLASSES,
    POOLED,
    DenseHead,
    Head,
    MarkedSparseHead,
    SparseHead,
    load_backbone_for,
    splade_pool,
)

__all__ = ["AGGREGATIONS", "BACKBONE_CLASSES", "POOLED", "DenseHead", "Head", "MarkedSparseHead", "SparseHead",
           "load_backbone_for", "splade_pool"]
