"""Table layout kinds beyond the engine's ``results`` and ``weights`` (harness/ablation/layout.py).

Each module here defines :class:`harness.ablation.layout.LayoutKind` subclasses registered with
``@register_layout_kind("<kind>")``; a suite file uses them as ``kind: <kind>`` in a layout of its
``table:`` section, with the kind's settings under ``options:``.  Modules are imported on the first
lookup of a kind, so adding a kind means adding one file.
"""
