"""Benchmark suites (one module per benchmark family, each with its protocol card) and ablation suites."""
