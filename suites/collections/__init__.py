"""Metadata (language, task, symmetric flag, instructions) for known training collections.

Each ``<name>.json`` file has the ``domains.json`` format of
:mod:`harness.data.collections` and applies to a training folder named ``<name>``
that ships no ``domains.json`` of its own.
"""
