"""Benchmark families, one module each, registered by name on import.

``beir``, ``miracl``, ``mkqa``, ``cmteb``, ``dureader`` and ``synthetic``; each loads
its release format and any BEIR-layout folder, and attaches its protocol card.
Use :func:`harness.benchmark.get_suite` rather than importing these modules directly.
"""
