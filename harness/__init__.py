"""Retrieval harness: train, ablate and statistically compare text retrievers.

The engine (this package) knows nothing about any particular method; methods live
in ``methods/``, benchmark and ablation suites in ``suites/``, tables and plots in
``reports/``.
"""
__version__ = "0.1.0"
