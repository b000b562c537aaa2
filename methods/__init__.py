"""Training methods: one module per method family, each registering a :class:`harness.method.Method`.

The interface, the registry and ``Checkpoint`` live in the engine (:mod:`harness.method`,
:mod:`harness.train.result`); this package holds implementations only.
"""
